import { HttpApi, OpenApi } from "@effect/platform"
import { AdminApi } from "./AdminApi.js"
import { ChannelsApi } from "./ChannelsApi.js"
import { SettingsApi } from "./ManageApi.js"
import { PublishableKeysApi } from "./PublishableKeysApi.js"

/** Every REST family served through HttpApi; its OpenAPI document is `GET /api/v1/openapi.json`. */
export class ParleyApi extends HttpApi.make("parley")
  .add(AdminApi)
  .add(SettingsApi)
  .add(ChannelsApi)
  .add(PublishableKeysApi)
  .annotate(OpenApi.Title, "Parley")
  .annotate(OpenApi.Version, "0.2.0")
{}
