import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"

const sourcesUnder = (dir: string): ReadonlyArray<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sourcesUnder(join(dir, entry.name))
      : entry.name.endsWith(".ts")
      ? [join(dir, entry.name)]
      : []
  )

describe("Imports", () => {
  // ADR 0007: the package index evaluates HttpApiScalar and HttpApiSwagger, ~20 MiB of bundled UI strings.
  it.effect("the server imports @effect/platform modules by path, never the package index", () =>
    Effect.sync(() => {
      const offenders = ["src", "cluster"].flatMap(sourcesUnder).filter((file) =>
        /from "@effect\/platform"/.test(readFileSync(file, "utf8"))
      )
      expect(offenders).toEqual([])
    }))
})
