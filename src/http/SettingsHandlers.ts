import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import type { SettingsInput } from "../domain/Tenant.js"
import { Tenants } from "../tenants/Tenants.js"
import { CurrentCredential } from "./TenantAuth.js"
import { withETag } from "./ETag.js"
import { ParleyApi } from "./ParleyApi.js"

export const SettingsHandlers = HttpApiBuilder.group(ParleyApi, "settings", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants
    const update = ({ headers, payload }: {
      readonly headers: { readonly "if-match"?: string | undefined }
      readonly payload: { readonly settings: SettingsInput }
    }) =>
      CurrentCredential.pipe(
        Effect.flatMap((credential) =>
          tenants.updateSettings(
            credential.tenantId,
            payload.settings,
            Option.fromNullable(headers["if-match"]),
            credential.actor
          )
        ),
        Effect.flatMap(withETag)
      )
    return handlers
      .handle("getSettings", () =>
        CurrentCredential.pipe(Effect.flatMap((credential) => tenants.get(credential.tenantId)), Effect.flatMap(withETag)))
      .handle("putSettings", update)
      .handle("patchSettings", update)
  }))
