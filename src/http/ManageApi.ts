import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Schema } from "effect"
import { NotFound, PreconditionFailed, Unavailable, ValidationFailed } from "../domain/ApiError.js"
import { SettingsInput, Tenant } from "../domain/Tenant.js"
import { IfMatchHeaders } from "./AdminApi.js"
import { ManageAuth } from "./TenantAuth.js"
import { envelope } from "./ErrorEnvelope.js"

const SettingsBody = Schema.Struct({ settings: SettingsInput })

/**
 * What every management group shares: the errors of a tenant-owned resource, `x-api-key` with the
 * `manage` scope, and the `/api/v1/manage` prefix.
 */
export const manageGroup = <Id extends string, Endpoints extends HttpApiEndpoint.HttpApiEndpoint.Any, E, R>(
  group: HttpApiGroup.HttpApiGroup<Id, Endpoints, E, R>
) =>
  group
    .addError(envelope(NotFound))
    .addError(envelope(ValidationFailed))
    .addError(envelope(PreconditionFailed))
    .addError(envelope(Unavailable))
    .middleware(ManageAuth)
    .prefix("/api/v1/manage")

const updateSettings = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "PUT" | "PATCH">) =>
  endpoint.setHeaders(IfMatchHeaders).setPayload(SettingsBody).addSuccess(Schema.Struct({ data: Tenant }))

/** The tenant's own settings (`/api/v1/manage/settings`). */
export class SettingsApi extends manageGroup(
  HttpApiGroup.make("settings")
    .add(HttpApiEndpoint.get("getSettings", "/settings").addSuccess(Schema.Struct({ data: Tenant })))
    .add(updateSettings(HttpApiEndpoint.put("putSettings", "/settings")))
    .add(updateSettings(HttpApiEndpoint.patch("patchSettings", "/settings")))
) {}
