import { performance } from "node:perf_hooks"
import { setTimeout as sleep } from "node:timers/promises"
import { ADMIN_TOKEN } from "./TestNode.js"

/** A JSON POST to `baseUrl`, answered status and parsed body. */
const post = async (baseUrl: string, path: string, bearer: string, body?: unknown) => {
  const response = await fetch(`${baseUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${bearer}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) })
  })
  const text = await response.text()
  return { status: response.status, body: text === "" ? null : JSON.parse(text) }
}

const expectStatus = (what: string, reply: { status: number; body: unknown }, status: number) => {
  if (reply.status !== status) throw new Error(`${what}: ${reply.status} ${JSON.stringify(reply.body)}`)
  return reply.body as any
}

/** A tenant and a webhook channel through the admin and management APIs of `baseUrl`; the channel's secret. */
export const channelSecretAt = async (baseUrl: string) => {
  const tenant = expectStatus(
    "tenant create",
    await post(baseUrl, "/api/v1/admin/tenants", ADMIN_TOKEN, { tenant: { name: `bench-${crypto.randomUUID().slice(0, 8)}` } }),
    201
  )
  const response = await fetch(`${baseUrl}/api/v1/manage/channels`, {
    method: "POST",
    headers: { "x-api-key": tenant.data.api_key, "content-type": "application/json" },
    body: JSON.stringify({ channel: { name: "bench", config: { url: "http://127.0.0.1:9/hook" } } })
  })
  const channel = expectStatus("channel create", { status: response.status, body: await response.json() }, 201)
  return channel.data.secret as string
}

/**
 * Generates a token on node `a`, sees node `b` accept it, revokes it on `a` (channel secret and
 * `{token}`), and asks `b` every 5 ms until it answers 401 `token_revoked`: the milliseconds from
 * sending the revocation. `b` is asked through `tokens/refresh`, the token-authenticated route
 * there is (within the rotation grace, the token stays valid however often it is refreshed).
 */
export const revocationLagMs = async (a: string, b: string, secret: string, timeoutMs = 5000) => {
  const token = expectStatus("generate", await post(a, "/api/v1/chat/tokens/generate", secret, {}), 200).token as string
  expectStatus("refresh before the revocation", await post(b, "/api/v1/chat/tokens/refresh", token), 200)
  const start = performance.now()
  expectStatus("revoke", await post(a, "/api/v1/chat/tokens/revoke", secret, { token }), 200)
  for (;;) {
    const reply = await post(b, "/api/v1/chat/tokens/refresh", token)
    if (reply.status === 401 && reply.body?.error?.code === "token_revoked") return performance.now() - start
    expectStatus("refresh after the revocation", reply, 200)
    if (performance.now() - start > timeoutMs) throw new Error(`node ${b} still accepts a token revoked ${timeoutMs} ms ago`)
    await sleep(5)
  }
}
