import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { InsufficientScope, NotFound, PreconditionFailed, Unavailable, ValidationFailed } from "../domain/ApiError.js"
import { ApiKey, ApiKeyInput } from "../domain/ApiKey.js"
import { Tenant, TenantId, TenantInput } from "../domain/Tenant.js"
import { AdminAuth } from "./AdminAuth.js"
import { envelope } from "./ErrorEnvelope.js"

const TenantPath = Schema.Struct({ id: TenantId })
const TenantKeysPath = Schema.Struct({ tenant_id: TenantId })
const TenantKeyPath = Schema.Struct({ tenant_id: TenantId, id: Schema.UUID })
/** `If-Match` of PUT, PATCH and DELETE. */
export const IfMatchHeaders = Schema.Struct({ "if-match": Schema.optional(Schema.String) })

/** A tenant with its primary key, as create and rotation answer (the key once). */
const TenantWithKey = Schema.Struct({ ...Tenant.fields, api_key: Schema.String })
/** A scoped key with its raw value, as issuing answers (the key once). */
export const ApiKeyWithKey = Schema.Struct({ ...ApiKey.fields, key: Schema.String })

const TenantBody = Schema.Struct({ tenant: TenantInput })
/** The body that issues a scoped key, on the admin and management APIs. */
export const ApiKeyBody = Schema.Struct({ api_key: ApiKeyInput })

const update = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "PUT" | "PATCH">) =>
  endpoint
    .setPath(TenantPath)
    .setHeaders(IfMatchHeaders)
    .setPayload(TenantBody)
    .addSuccess(Schema.Struct({ data: Tenant }))

/** The operator's API (`/api/v1/admin`), server-apis.md "Admin API". */
export class AdminApi extends HttpApiGroup.make("admin")
  .add(HttpApiEndpoint.get("listTenants", "/tenants").addSuccess(Schema.Struct({ data: Schema.Array(Tenant) })))
  .add(
    HttpApiEndpoint.post("createTenant", "/tenants")
      .setPayload(TenantBody)
      .addSuccess(Schema.Struct({ data: TenantWithKey }), { status: 201 })
  )
  .add(HttpApiEndpoint.get("getTenant", "/tenants/:id").setPath(TenantPath).addSuccess(Schema.Struct({ data: Tenant })))
  .add(update(HttpApiEndpoint.put("putTenant", "/tenants/:id")))
  .add(update(HttpApiEndpoint.patch("patchTenant", "/tenants/:id")))
  .add(
    HttpApiEndpoint.del("deleteTenant", "/tenants/:id")
      .setPath(TenantPath)
      .setHeaders(IfMatchHeaders)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .add(
    HttpApiEndpoint.post("rotateApiKey", "/tenants/:id/rotate_api_key")
      .setPath(TenantPath)
      .addSuccess(Schema.Struct({ data: TenantWithKey }))
  )
  .add(
    HttpApiEndpoint.get("listApiKeys", "/tenants/:tenant_id/api_keys")
      .setPath(TenantKeysPath)
      .addSuccess(Schema.Struct({ data: Schema.Array(ApiKey) }))
  )
  .add(
    HttpApiEndpoint.post("createApiKey", "/tenants/:tenant_id/api_keys")
      .setPath(TenantKeysPath)
      .setPayload(ApiKeyBody)
      .addSuccess(Schema.Struct({ data: ApiKeyWithKey }), { status: 201 })
  )
  .add(
    HttpApiEndpoint.del("revokeApiKey", "/tenants/:tenant_id/api_keys/:id")
      .setPath(TenantKeyPath)
      .addSuccess(HttpApiSchema.NoContent)
  )
  .addError(envelope(NotFound))
  .addError(envelope(ValidationFailed))
  .addError(envelope(PreconditionFailed))
  .addError(envelope(Unavailable))
  .addError(envelope(InsufficientScope))
  .middleware(AdminAuth)
  .prefix("/api/v1/admin")
{}
