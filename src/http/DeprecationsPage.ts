import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Effect, Layer, Option } from "effect"
import { existsSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import type { RouteSpec } from "./RouteTable.js"

/** Where the `Link: rel="deprecation"` header of every deprecated surface points. */
const DEPRECATIONS_PATH = "/docs/deprecations.md"

/** When `x-channel-token` and its routes were deprecated (Unix seconds), for the `Deprecation` header. */
const DEPRECATED_AT = Math.floor(Date.UTC(2026, 9, 1) / 1000)

/** The headers every answer of a deprecated surface carries (client-api.md "Versioning"). */
export const DEPRECATION_HEADERS = {
  deprecation: `@${DEPRECATED_AT}`,
  link: `<${DEPRECATIONS_PATH}>; rel="deprecation"`
} as const

export const deprecationsRoutes: ReadonlyArray<RouteSpec> = [{ method: "GET", path: DEPRECATIONS_PATH }]

/** `docs/deprecations.md` of the installation: the nearest one above this module (in src/ or dist/). */
const findPage = (): Option.Option<string> => {
  let directory = dirname(fileURLToPath(import.meta.url))
  while (true) {
    const candidate = join(directory, "docs", "deprecations.md")
    if (existsSync(candidate)) return Option.some(candidate)
    const parent = dirname(directory)
    if (parent === directory) return Option.none()
    directory = parent
  }
}

/**
 * Serves the deprecation page, read once at start, so that the link a deprecated answer carries
 * resolves on the node that gave it. An installation without the page answers 404 there.
 */
export const DeprecationsPage = Layer.unwrapEffect(Effect.sync(() =>
  Option.match(findPage(), {
    onNone: () => Layer.empty,
    onSome: (path) => {
      const text = readFileSync(path, "utf8")
      return HttpLayerRouter.add(
        "GET",
        DEPRECATIONS_PATH,
        HttpServerResponse.text(text, { contentType: "text/markdown; charset=utf-8" })
      )
    }
  })
))
