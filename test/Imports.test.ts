import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { dirname, join, relative, resolve, sep } from "node:path"
import { filesUnder } from "./support/FilesUnder.js"

/** The project folders (relative to the root) a source file imports from, by its relative imports. */
const foldersImportedBy = (file: string): ReadonlyArray<string> =>
  [...readFileSync(file, "utf8").matchAll(/(?:\bfrom|\bimport)\s*\(?\s*"(\.[^"]*)"/g)].map((match) =>
    dirname(relative(".", resolve(dirname(file), match[1]!)))
  )

const within = (folder: string) => (path: string) => path === folder || path.startsWith(folder + sep)

describe("Imports", () => {
  // ADR 0019: `cluster/` builds on `src/`, so only the composition roots may reach back into it.
  it.effect("no module under src/ but the composition roots imports from cluster/", () =>
    Effect.sync(() => {
      const roots = [join("src", "NodeLive.ts"), join("src", "main.ts")]
      const offenders = filesUnder("src", ".ts").filter((file) =>
        !roots.includes(file) && foldersImportedBy(file).some(within("cluster"))
      )
      expect(offenders).toEqual([])
    }))

  it.effect("src/domain/ imports no other folder of the project", () =>
    Effect.sync(() => {
      const domain = join("src", "domain")
      const offenders = filesUnder(domain, ".ts").filter((file) => !foldersImportedBy(file).every(within(domain)))
      expect(offenders).toEqual([])
    }))

  it.effect("src/db/ imports none of the folders that build on it", () =>
    Effect.sync(() => {
      const above = ["channels", "conversations", "delivery", "http", "ops", "ratelimit", "realtime", "routing", "tenants"]
        .map((folder) => join("src", folder))
      const offenders = filesUnder(join("src", "db"), ".ts").filter((file) =>
        foldersImportedBy(file).some((imported) => above.some((folder) => within(folder)(imported)))
      )
      expect(offenders).toEqual([])
    }))

  // ADR 0007: the package index evaluates HttpApiScalar and HttpApiSwagger, ~20 MiB of bundled UI strings.
  it.effect("the server imports @effect/platform modules by path, never the package index", () =>
    Effect.sync(() => {
      const offenders = ["src", "cluster"].flatMap((dir) => filesUnder(dir, ".ts")).filter((file) =>
        /from "@effect\/platform"/.test(readFileSync(file, "utf8"))
      )
      expect(offenders).toEqual([])
    }))
})
