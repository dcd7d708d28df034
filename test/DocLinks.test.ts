import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { dirname, join, normalize } from "node:path"
import { filesUnder } from "./support/FilesUnder.js"

/** The text a reader sees as prose: code blocks and code spans hold examples, not links. */
const prose = (markdown: string) => markdown.replace(/^```[\s\S]*?^```/gm, "").replace(/`[^`\n]*`/g, "")

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
const anchorOf = (heading: string) =>
  heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")

const anchorsIn = (file: string) =>
  new Set(prose(readFileSync(file, "utf8")).split("\n").flatMap((line) => {
    const heading = /^#{1,6}\s+(.*)$/.exec(line)?.[1]
    return heading === undefined ? [] : [anchorOf(heading)]
  }))

/** Every relative link of a document that names no existing file, or no heading of it. */
const brokenLinks = (file: string): ReadonlyArray<string> =>
  [...prose(readFileSync(file, "utf8")).matchAll(/\]\(([^)\s]+)\)/g)].flatMap((match) => {
    const target = match[1] ?? ""
    if (/^[a-z]+:/i.test(target)) return []
    const [path = "", anchor] = target.split("#")
    const resolved = path === "" ? file : normalize(join(dirname(file), path))
    if (!existsSync(resolved)) return [`${file}: ${target}`]
    return anchor !== undefined && resolved.endsWith(".md") && !anchorsIn(resolved).has(anchor)
      ? [`${file}: ${target} (no such heading)`]
      : []
  })

describe("documentation links", () => {
  it.effect("every relative link in the README and the docs points to an existing file and heading", () =>
    Effect.sync(() => {
      const documents = ["README.md", join("test", "bench", "README.md"), ...filesUnder("docs", ".md")]
      expect(documents.flatMap(brokenLinks)).toEqual([])
    }))
})
