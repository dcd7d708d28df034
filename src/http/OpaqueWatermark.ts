import { Effect } from "effect"
import { isOpaqueWatermark } from "../domain/Watermark.js"
import type { DeprecationWarnings } from "./DeprecationWarnings.js"
import { markDeprecated } from "./TenantAuth.js"

/**
 * A `watermark` in a deprecated opaque form (client-api.md "Versioning" 3): the answer carries the
 * deprecation headers and the use is logged (once in a while per channel).
 */
export const noteOpaqueWatermark = (warnings: DeprecationWarnings, watermark: string | undefined, channelId: string | null) =>
  watermark !== undefined && isOpaqueWatermark(watermark)
    ? Effect.zipRight(markDeprecated, warnings.warn("opaque watermark", channelId))
    : Effect.void
