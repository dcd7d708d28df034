import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpClient from "@effect/platform/HttpClient"
import * as HttpClientRequest from "@effect/platform/HttpClientRequest"
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import { NodeHttpServer } from "@effect/platform-node"
import { expect, layer } from "@effect/vitest"
import { Chunk, ConfigProvider, Effect, Fiber, Layer, Schema, Stream } from "effect"
import { SignJWT } from "jose"
import { CurrentClient, requireChannelScope, requireConversationBinding, requireOwnChannel, requirePermission } from "../src/auth/ClientAccess.js"
import { ClientTokens } from "../src/auth/ClientTokens.js"
import { TokenRevocations } from "../src/auth/TokenRevocations.js"
import { TokenSigner } from "../src/auth/TokenSigner.js"
import { PublishableKeys } from "../src/channels/PublishableKeys.js"
import { AppConfig } from "../src/config/AppConfig.js"
import { Conversations } from "../src/conversations/Conversations.js"
import { ConversationId } from "../src/domain/Conversation.js"
import { Forbidden, InsufficientPermission, NotFound } from "../src/domain/ApiError.js"
import { ClientAuth, ClientAuthLive } from "../src/http/ClientAuth.js"
import { envelope } from "../src/http/ErrorEnvelope.js"
import { EdgeMiddleware } from "../src/http/EdgeMiddleware.js"
import { RouteTableLive, routesOf } from "../src/http/RouteTable.js"
import { chat, claimsOf, createPublishableKey, generateToken, tenantWithChannel } from "./support/ClientApi.js"
import { expectError } from "./support/Envelope.js"
import { insertConversation } from "./support/Fixtures.js"
import { TestNodeLive } from "./support/TestNode.js"

const SIGNING_KEY = "client-auth-test-signing-key-0123456789ab"

/** A route of each rule, as the conversation routes will use them. */
class ProbeApi extends HttpApiGroup.make("probe")
  .add(
    HttpApiEndpoint.post("write", "/probe/:conversationId/:channelId")
      .setPath(Schema.Struct({ conversationId: Schema.String, channelId: Schema.String }))
      .addSuccess(Schema.Struct({ kind: Schema.String, userId: Schema.NullOr(Schema.String) }))
  )
  .add(HttpApiEndpoint.get("list", "/probe").addSuccess(Schema.Struct({ ok: Schema.Boolean })))
  .addError(envelope(Forbidden))
  .addError(envelope(NotFound))
  .addError(envelope(InsufficientPermission))
  .middleware(ClientAuth)
{}
class TestApi extends HttpApi.make("test").add(ProbeApi) {}

const ProbeHandlers = HttpApiBuilder.group(TestApi, "probe", (handlers) =>
  handlers
    .handle("write", ({ path }) =>
      Effect.gen(function*() {
        yield* requireConversationBinding(path.conversationId)
        // A conversation found on `channelId` of this tenant.
        const client = yield* CurrentClient
        yield* requireOwnChannel({ id: path.conversationId, tenant_id: client.tenantId, channel_id: path.channelId })
        yield* requirePermission("write")
        return { kind: client.kind, userId: client.userId }
      }))
    .handle("list", () => Effect.as(Effect.zipRight(requireChannelScope, requirePermission("read")), { ok: true })))

const config = AppConfig.Default.pipe(
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["TOKEN_SIGNING_KEY", SIGNING_KEY]]))))
)

/** ClientTokens as the node builds it (its own TokenRevocations), on the test node's database and cluster. */
const Tokens = ClientTokens.Default.pipe(
  Layer.provide(Layer.mergeAll(TokenSigner.Default, TokenRevocations.Default, Conversations.Default, PublishableKeys.Default)),
  Layer.provide(config)
)

/** The probe routes behind the edge, with the node's services (on the test node's database and cluster). */
const ProbeServer = HttpLayerRouter.serve(
  Layer.mergeAll(HttpLayerRouter.addHttpApi(TestApi).pipe(Layer.provide(ProbeHandlers), Layer.provide(ClientAuthLive)), EdgeMiddleware),
  { disableListenLog: true, disableLogger: true }
).pipe(
  Layer.provide(RouteTableLive(routesOf(TestApi))),
  Layer.provideMerge(NodeHttpServer.layerTest),
  Layer.provide(Tokens),
  // The edge reads the CORS origins.
  Layer.provide(config)
)

const probe = (method: "GET" | "POST", path: string, token?: string) =>
  HttpClient.execute(
    HttpClientRequest.make(method)(path).pipe(token === undefined ? (r) => r : HttpClientRequest.bearerToken(token))
  ).pipe(Effect.flatMap((response) => Effect.map(response.json, (body) => ({ status: response.status, body: body as any }))))

layer(TestNodeLive({ TOKEN_SIGNING_KEY: SIGNING_KEY, TRUSTED_PROXIES: "127.0.0.1/32" }), { excludeTestServices: true })("ClientAuth", (it) => {
  it.scoped("provides the client of a valid token; 401 without one, for a revoked one", () =>
    Effect.gen(function*() {
      const { channel, tenant } = yield* tenantWithChannel
      const conversationId = yield* insertConversation(tenant.id, channel.id)
      const token = yield* generateToken(channel.secret, { user: { id: "u1" } })
      const ok = yield* probe("POST", `/probe/${conversationId}/${channel.id}`, token)
      expect(ok).toEqual({ status: 200, body: { kind: "unscoped", userId: "u1" } })
      expectError(yield* probe("POST", `/probe/${conversationId}/${channel.id}`), 401, "unauthorized")
      expectError(yield* probe("POST", `/probe/${conversationId}/${channel.id}`, channel.secret), 401, "unauthorized")
      expect((yield* chat("POST", "/tokens/revoke", { bearer: token })).status).toBe(200)
      // Another TokenRevocations than the node's: it learns of the revocation by following the log.
      yield* Effect.sleep("600 millis")
      expectError(yield* probe("POST", `/probe/${conversationId}/${channel.id}`, token), 401, "token_revoked")
    }).pipe(Effect.provide(ProbeServer)))

  it.scoped("token kinds: a bound token 403 on another conversation; another channel's conversation 404", () =>
    Effect.gen(function*() {
      const { channel, tenant } = yield* tenantWithChannel
      const key = yield* createPublishableKey(tenant.api_key, channel.id)
      const bound = yield* chat("POST", "/tokens/publishable", { bearer: key.key, headers: { origin: "https://shop.example.com" } })
      const token = bound.body.token as string
      const own = claimsOf(token)["conversation_id"] as string
      expect((yield* probe("POST", `/probe/${own}/${channel.id}`, token)).body.kind).toBe("conversation")
      expectError(yield* probe("POST", `/probe/${crypto.randomUUID()}/${channel.id}`, token), 403, "forbidden")
      const unscoped = yield* generateToken(channel.secret)
      expectError(yield* probe("POST", `/probe/${own}/${crypto.randomUUID()}`, unscoped), 404, "not_found")
    }).pipe(Effect.provide(ProbeServer)))

  it.scoped("permissions: 403 insufficient_permission naming the one missing; listing needs a channel-scoped token", () =>
    Effect.gen(function*() {
      const { channel, tenant } = yield* tenantWithChannel
      const conversationId = yield* insertConversation(tenant.id, channel.id)
      const readOnly = yield* generateToken(channel.secret, { scope: "channel", permissions: ["read"] })
      expectError(yield* probe("POST", `/probe/${conversationId}/${channel.id}`, readOnly), 403, "insufficient_permission", { required: ["write"] })
      expect(yield* probe("GET", "/probe", readOnly)).toEqual({ status: 200, body: { ok: true } })
      const writeOnly = yield* generateToken(channel.secret, { scope: "channel", permissions: ["write"] })
      expectError(yield* probe("GET", "/probe", writeOnly), 403, "insufficient_permission", { required: ["read"] })
      expectError(yield* probe("GET", "/probe", yield* generateToken(channel.secret)), 403, "forbidden")
    }).pipe(Effect.provide(ProbeServer)))

  it.scoped("a derived (conversation-bound) token keeps family, user, source and permissions, drops the scope, never outlives its parent", () =>
    Effect.gen(function*() {
      const { channel, tenant } = yield* tenantWithChannel
      // A parent with a minute left: the derived token gets that minute, not a whole TTL.
      const iat = Math.floor(Date.now() / 1000)
      const parentToken = yield* Effect.promise(() =>
        new SignJWT({ tid: tenant.id, cid: channel.id, fam: crypto.randomUUID(), jti: crypto.randomUUID(), iat, exp: iat + 60, user_id: "u", scope: "channel", perms: ["read"] })
          .setProtectedHeader({ alg: "HS256", typ: "JWT" })
          .sign(new TextEncoder().encode(SIGNING_KEY))
      )
      const tokens = yield* ClientTokens
      const parent = yield* tokens.authenticate(parentToken)
      const conversationId = ConversationId.to.make(crypto.randomUUID())
      const derived = yield* tokens.derive(parent, conversationId)
      const claims = claimsOf(derived.token)
      expect(claims).toMatchObject({ fam: parent.claims.fam, user_id: "u", perms: ["read"], conversation_id: conversationId })
      expect(claims).not.toHaveProperty("scope")
      expect(claims["exp"]).toBe(iat + 60)
      expect(derived.expiresIn).toBeLessThanOrEqual(60)
      const child = yield* tokens.authenticate(derived.token)
      expect(child.kind).toBe("conversation")
    }).pipe(Effect.provide(Tokens)))

  it.scoped("TokenRevocations.changes tells each revocation once, those of other nodes included", () =>
    Effect.gen(function*() {
      const { channel } = yield* tenantWithChannel
      const token = yield* generateToken(channel.secret, { user: { id: "u" } })
      const revocations = yield* TokenRevocations
      const seen = yield* revocations.changes.pipe(
        Stream.filter((r) => r.channelId === channel.id),
        Stream.take(2),
        Stream.runCollect,
        Effect.fork
      )
      yield* Effect.sleep("100 millis")
      expect((yield* chat("POST", "/tokens/revoke", { bearer: token })).status).toBe(200)
      expect((yield* chat("POST", "/tokens/revoke", { bearer: channel.secret, body: { user: { id: "u" } } })).status).toBe(200)
      const events = Chunk.toReadonlyArray(yield* Fiber.join(seen).pipe(Effect.timeout("5 seconds")))
      expect(events.map((r) => [r.kind, r.subject])).toEqual([["family", claimsOf(token)["fam"]], ["user", "u"]])
    }).pipe(Effect.provide(TokenRevocations.Default)))
})
