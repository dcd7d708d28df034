import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { filesUnder } from "./support/FilesUnder.js"

describe("Imports", () => {
  // ADR 0007: the package index evaluates HttpApiScalar and HttpApiSwagger, ~20 MiB of bundled UI strings.
  it.effect("the server imports @effect/platform modules by path, never the package index", () =>
    Effect.sync(() => {
      const offenders = ["src", "cluster"].flatMap((dir) => filesUnder(dir, ".ts")).filter((file) =>
        /from "@effect\/platform"/.test(readFileSync(file, "utf8"))
      )
      expect(offenders).toEqual([])
    }))
})
