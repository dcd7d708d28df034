import { Effect } from "effect"
import { insertChannel } from "./Fixtures.js"
import { createTenant, manage, request } from "./TestNode.js"

/** A client address of its own: the buckets counted per address start empty (the node trusts 127.0.0.1). */
export const randomIp = () =>
  `10.${Math.floor(Math.random() * 256)}.${Math.floor(Math.random() * 256)}.${Math.floor(Math.random() * 256)}`

/** A client-API call (`/api/v1/chat…`) with a Bearer credential, from an address of its own unless given. */
export const chat = (
  method: string,
  path: string,
  options: { readonly bearer?: string; readonly body?: unknown; readonly raw?: string; readonly headers?: Record<string, string> } = {}
) =>
  request(method, `/api/v1/chat${path}`, {
    ...(options.body === undefined ? {} : { body: options.body }),
    ...(options.raw === undefined ? {} : { raw: options.raw }),
    headers: {
      "x-forwarded-for": randomIp(),
      ...(options.bearer === undefined ? {} : { authorization: `Bearer ${options.bearer}` }),
      ...options.headers
    }
  })

/** A token from `tokens/generate`; the test fails on anything but 200. */
export const generateToken = (secret: string, body: unknown = {}) =>
  Effect.map(chat("POST", "/tokens/generate", { bearer: secret, body }), (reply) => {
    if (reply.status !== 200) throw new Error(`generate failed: ${reply.status} ${JSON.stringify(reply.body)}`)
    return reply.body.token as string
  })

/** A tenant with one channel; its API key and the channel's secret. */
export const tenantWithChannel = Effect.gen(function*() {
  const tenant = yield* createTenant()
  const channel = yield* insertChannel(tenant.id)
  return { tenant, channel }
})

export const ORIGIN = "https://shop.example.com"

/** A publishable key of the channel allowing `ORIGIN`, through the management API. */
export const createPublishableKey = (apiKey: string, channelId: string, origins: ReadonlyArray<string> = [ORIGIN]) =>
  Effect.map(
    manage(apiKey, "POST", `/channels/${channelId}/publishable_keys`, { publishable_key: { name: "web", allowed_origins: origins } }),
    (reply) => {
      if (reply.status !== 201) throw new Error(`publishable key create failed: ${reply.status} ${JSON.stringify(reply.body)}`)
      return reply.body.data as { id: string; key: string }
    }
  )

/** The claims of a JWT, read without verifying it. */
export const claimsOf = (token: string): Record<string, unknown> =>
  JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8"))
