import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { InsufficientScope, NotFound, Unavailable, ValidationFailed } from "../domain/ApiError.js"
import { ApiKey } from "../domain/ApiKey.js"
import { ApiKeyBody, ApiKeyWithKey } from "./AdminApi.js"
import { ManageAuth } from "./TenantAuth.js"
import { envelope } from "./ErrorEnvelope.js"

const ApiKeyPath = Schema.Struct({ id: Schema.UUID })

/** The tenant's scoped API keys (`/api/v1/manage/api_keys`); the raw key only in the create answer. */
export class ApiKeysApi extends HttpApiGroup.make("apiKeys")
  .add(HttpApiEndpoint.get("listKeys", "/api_keys").addSuccess(Schema.Struct({ data: Schema.Array(ApiKey) })))
  .add(
    HttpApiEndpoint.post("issueKey", "/api_keys")
      .setPayload(ApiKeyBody)
      .addSuccess(Schema.Struct({ data: ApiKeyWithKey }), { status: 201 })
  )
  .add(HttpApiEndpoint.get("getKey", "/api_keys/:id").setPath(ApiKeyPath).addSuccess(Schema.Struct({ data: ApiKey })))
  .add(HttpApiEndpoint.del("revokeKey", "/api_keys/:id").setPath(ApiKeyPath).addSuccess(HttpApiSchema.NoContent))
  .addError(envelope(NotFound))
  .addError(envelope(ValidationFailed))
  .addError(envelope(InsufficientScope))
  .addError(envelope(Unavailable))
  .middleware(ManageAuth)
  .prefix("/api/v1/manage")
{}
