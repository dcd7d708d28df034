import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import { CurrentActor } from "../auth/Actor.js"
import type { TenantId } from "../domain/Tenant.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { tenantNotFound, Tenants } from "../tenants/Tenants.js"
import { withETag } from "./ETag.js"
import { ParleyApi } from "./ParleyApi.js"

export const AdminHandlers = HttpApiBuilder.group(ParleyApi, "admin", (handlers) =>
  Effect.gen(function*() {
    const tenants = yield* Tenants
    const apiKeys = yield* ApiKeys
    const update = ({ headers, path, payload }: {
      readonly path: { readonly id: TenantId }
      readonly headers: { readonly "if-match"?: string | undefined }
      readonly payload: { readonly tenant: Parameters<typeof tenants.update>[1] }
    }) =>
      CurrentActor.pipe(
        Effect.flatMap((actor) => tenants.update(path.id, payload.tenant, Option.fromNullable(headers["if-match"]), actor)),
        Effect.flatMap(withETag)
      )
    return handlers
      .handle("listTenants", () => tenants.list().pipe(Effect.flatMap((data) => withETag(data))))
      .handle("createTenant", ({ payload }) =>
        CurrentActor.pipe(
          Effect.flatMap((actor) => tenants.create(payload.tenant, actor)),
          Effect.flatMap(({ apiKey, tenant }) => withETag({ ...tenant, api_key: apiKey }, tenant))
        ))
      .handle("getTenant", ({ path }) => tenants.get(path.id).pipe(Effect.flatMap(withETag)))
      .handle("putTenant", update)
      .handle("patchTenant", update)
      .handle("deleteTenant", ({ headers, path }) =>
        CurrentActor.pipe(
          Effect.flatMap((actor) => tenants.remove(path.id, Option.fromNullable(headers["if-match"]), actor))
        ))
      .handle("rotateApiKey", ({ path }) =>
        CurrentActor.pipe(
          Effect.flatMap((actor) => tenants.rotateApiKey(path.id, actor)),
          Effect.flatMap(({ apiKey, tenant }) => withETag({ ...tenant, api_key: apiKey }, tenant))
        ))
      .handle("listApiKeys", ({ path }) =>
        tenants.get(path.tenant_id).pipe(
          Effect.zipRight(apiKeys.list(path.tenant_id)),
          Effect.map((data) => ({ data }))
        ))
      .handle("createApiKey", ({ path, payload }) =>
        Effect.gen(function*() {
          const actor = yield* CurrentActor
          yield* tenants.get(path.tenant_id)
          const { apiKey, key } = yield* apiKeys.issueAsOperator(path.tenant_id, payload.api_key, actor).pipe(
            // Deleted since the check above: the 404 an unknown tenant gets.
            Effect.catchTag("TenantGone", ({ tenantId }) => Effect.fail(tenantNotFound(tenantId)))
          )
          return { data: { ...apiKey, key } }
        }))
      .handle("revokeApiKey", ({ path }) =>
        CurrentActor.pipe(Effect.flatMap((actor) => apiKeys.revoke(path.tenant_id, path.id, actor))))
  }))
