import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { invalidApiKey } from "../domain/ApiError.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { CurrentCredential, keyGoneWithTenant } from "./TenantAuth.js"
import { ParleyApi } from "./ParleyApi.js"

/** `/api/v1/manage/api_keys`: the calling key's tenant's scoped keys. */
export const ApiKeysHandlers = HttpApiBuilder.group(ParleyApi, "apiKeys", (handlers) =>
  Effect.gen(function*() {
    const apiKeys = yield* ApiKeys
    return handlers
      .handle("listKeys", () =>
        CurrentCredential.pipe(
          Effect.flatMap((credential) => apiKeys.list(credential.tenantId)),
          Effect.map((data) => ({ data }))
        ))
      .handle("issueKey", ({ payload }) =>
        CurrentCredential.pipe(
          // A key may only hand out scopes it holds itself (Conventions 6), and is the new key's issuer.
          Effect.flatMap((credential) =>
            apiKeys.issue(credential.tenantId, payload.api_key, credential, credential.actor).pipe(
              keyGoneWithTenant,
              // Revoked since it was checked: the 401 it gets now.
              Effect.catchTag("IssuerGone", () => Effect.fail(invalidApiKey()))
            )
          ),
          Effect.map(({ apiKey, key }) => ({ data: { ...apiKey, key } }))
        ))
      .handle("getKey", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap((credential) => apiKeys.get(credential.tenantId, path.id)),
          Effect.map((data) => ({ data }))
        ))
      .handle("revokeKey", ({ path }) =>
        CurrentCredential.pipe(Effect.flatMap((credential) => apiKeys.revoke(credential.tenantId, path.id, credential.actor))))
  }))
