import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { ChannelSecrets, openSecret, sealSecret } from "../src/channels/ChannelSecrets.js"
import { createChannel, manage } from "./support/ManageClient.js"
import { query, serverUrl } from "./support/TestDatabase.js"
import { createTenant, TestNodeLive } from "./support/TestNode.js"

const KEY = randomBytes(32)
const CHANNEL = "0b6f3c4e-5d1a-4e7b-9c2f-1a2b3c4d5e6f"
const SECRET = "cs_0123456789abcdefghijABCDEFGHIJ0123456789"

describe("sealed channel secrets", () => {
  it("open gives back what seal sealed, for that channel and key only", () => {
    const sealed = sealSecret(KEY, CHANNEL, SECRET)
    expect(sealed.includes(Buffer.from(SECRET))).toBe(false)
    expect(openSecret(KEY, CHANNEL, sealed)).toEqual(Option.some(SECRET))
    // A fresh nonce each time: the same secret never seals to the same bytes.
    expect(sealSecret(KEY, CHANNEL, SECRET).equals(sealed)).toBe(false)
    expect(openSecret(KEY, "0b6f3c4e-5d1a-4e7b-9c2f-000000000000", sealed)).toEqual(Option.none())
    expect(openSecret(randomBytes(32), CHANNEL, sealed)).toEqual(Option.none())
    const flipped = Buffer.from(sealed)
    flipped[flipped.length - 1]! ^= 1
    expect(openSecret(KEY, CHANNEL, flipped)).toEqual(Option.none())
    expect(openSecret(KEY, CHANNEL, sealed.subarray(0, 20))).toEqual(Option.none())
    expect(openSecret(KEY, CHANNEL, Buffer.concat([Buffer.of(2), sealed.subarray(1)]))).toEqual(Option.none())
  })
})

layer(TestNodeLive({ LOG_LEVEL: "error" }), { excludeTestServices: true })("channel secrets kept for signing", (it) => {
  const sqlIt = it.effect.runIf(serverUrl !== undefined)

  sqlIt("create and rotate_secret seal the secret they return; a channel from before has none", () =>
    Effect.gen(function*() {
      const secrets = yield* ChannelSecrets
      const tenant = yield* createTenant()
      const channel = yield* createChannel(tenant.api_key)
      const signingSecret = (id: string) =>
        Effect.map(
          query<{ secret_sealed: Uint8Array | null }>("SELECT secret_sealed FROM channels WHERE id = $1", [id]),
          (rows) => Option.map(secrets.open(id, rows[0]?.secret_sealed ?? null), Redacted.value)
        )
      expect(yield* signingSecret(channel.id)).toEqual(Option.some(channel.secret))

      const rotated = yield* manage(tenant.api_key, "POST", `/channels/${channel.id}/rotate_secret`)
      expect(rotated.status).toBe(200)
      const secret: string = rotated.body.data.secret
      expect(secret).not.toBe(channel.secret)
      expect(yield* signingSecret(channel.id)).toEqual(Option.some(secret))

      yield* query("UPDATE channels SET secret_sealed = NULL WHERE id = $1", [channel.id])
      expect(yield* signingSecret(channel.id)).toEqual(Option.none())
    }).pipe(Effect.provide(ChannelSecrets.Default)))
})
