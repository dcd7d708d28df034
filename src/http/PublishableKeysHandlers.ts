import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect } from "effect"
import { PublishableKeys } from "../channels/PublishableKeys.js"
import type { PublishableKey } from "../domain/PublishableKey.js"
import { CurrentCredential, keyGoneWithTenant } from "./TenantAuth.js"
import { ParleyApi } from "./ParleyApi.js"

const withKey = ({ key, publishableKey }: { readonly publishableKey: PublishableKey; readonly key: string }) => ({
  data: { ...publishableKey, key }
})

/** The `publishableKeys` group: keys are reached only through a channel of the key's tenant. */
export const PublishableKeysHandlers = HttpApiBuilder.group(ParleyApi, "publishableKeys", (handlers) =>
  Effect.gen(function*() {
    const keys = yield* PublishableKeys
    return handlers
      .handle("listPublishableKeys", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ tenantId }) => keys.list(tenantId, path.id)),
          Effect.map((data) => ({ data }))
        ))
      .handle("createPublishableKey", ({ path, payload }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) =>
            keys.create(tenantId, path.id, payload.publishable_key, actor).pipe(keyGoneWithTenant)
          ),
          Effect.map(withKey)
        ))
      .handle("updatePublishableKey", ({ path, payload }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) =>
            keys.update(tenantId, path.id, path.key_id, payload.publishable_key, actor)
          ),
          Effect.map((data) => ({ data }))
        ))
      .handle("rotatePublishableKey", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) => keys.rotate(tenantId, path.id, path.key_id, actor)),
          Effect.map(withKey)
        ))
      .handle("deletePublishableKey", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap(({ actor, tenantId }) => keys.remove(tenantId, path.id, path.key_id, actor))
        ))
  }))
