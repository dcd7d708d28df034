import * as HttpApi from "@effect/platform/HttpApi"
import * as OpenApi from "@effect/platform/OpenApi"
import { BadRequest } from "../domain/ApiError.js"
import { AdminApi } from "./AdminApi.js"
import { envelope } from "./ErrorEnvelope.js"
import { ConversationListApi, ConversationsApi } from "./ConversationsApi.js"
import { ApiKeysApi } from "./ApiKeysApi.js"
import { SettingsApi } from "./ManageApi.js"
import { UsersApi } from "./UsersApi.js"
import { ChannelsApi } from "./ChannelsApi.js"
import { PublishableKeysApi } from "./PublishableKeysApi.js"
import { ClientTokensApi } from "./ClientTokensApi.js"
import { ClientConversationsApi } from "./ClientConversationsApi.js"
import { RoutingRulesApi } from "./RoutingRulesApi.js"
import { ChannelDeliveryApi, DeliveriesApi } from "./DeliveriesApi.js"

/** Every REST family served through HttpApi; `OpenApiRoute` serves its OpenAPI document. */
export class ParleyApi extends HttpApi.make("parley")
  .add(AdminApi)
  .add(SettingsApi)
  .add(ConversationListApi)
  .add(ConversationsApi)
  .add(UsersApi)
  .add(ApiKeysApi)
  .add(ChannelsApi)
  .add(PublishableKeysApi)
  .add(ClientTokensApi)
  .add(ClientConversationsApi)
  .add(RoutingRulesApi)
  .add(DeliveriesApi)
  .add(ChannelDeliveryApi)
  // Any route may carry a value the database refuses (SqlFailure.orUnavailable): 400, not 503.
  .addError(envelope(BadRequest))
  .annotate(OpenApi.Title, "Parley")
  .annotate(OpenApi.Version, "0.2.0")
{}
