import { Effect, Option, Redacted } from "effect"
import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto"
import { installationSecret } from "../db/InstallationSecrets.js"

/** Where the sealing key is kept in `installation_secrets`. */
export const SEALING_KEY_NAME = "channel_secret_sealing_key"

// Layout of a sealed secret: version, 12-byte nonce, 16-byte GCM tag, ciphertext.
const VERSION = 1
const NONCE_BYTES = 12
const TAG_BYTES = 16
const HEADER_BYTES = 1 + NONCE_BYTES + TAG_BYTES

/**
 * A channel secret encrypted (AES-256-GCM) so that outbound signatures can be keyed with it; the
 * channel id is authenticated with it, so a sealed value copied to another row does not open.
 */
export const sealSecret = (key: Uint8Array, channelId: string, secret: string): Buffer => {
  const nonce = randomBytes(NONCE_BYTES)
  const cipher = createCipheriv("aes-256-gcm", key, nonce)
  cipher.setAAD(Buffer.from(channelId))
  const ciphertext = Buffer.concat([cipher.update(secret, "utf8"), cipher.final()])
  return Buffer.concat([Buffer.of(VERSION), nonce, cipher.getAuthTag(), ciphertext])
}

/** The secret of `sealSecret`; none when the value was altered, moved to another channel, or sealed with another key. */
export const openSecret = (key: Uint8Array, channelId: string, sealed: Uint8Array): Option.Option<string> => {
  if (sealed.length <= HEADER_BYTES || sealed[0] !== VERSION) return Option.none()
  const bytes = Buffer.from(sealed)
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, bytes.subarray(1, 1 + NONCE_BYTES))
    decipher.setAAD(Buffer.from(channelId))
    decipher.setAuthTag(bytes.subarray(1 + NONCE_BYTES, HEADER_BYTES))
    return Option.some(Buffer.concat([decipher.update(bytes.subarray(HEADER_BYTES)), decipher.final()]).toString("utf8"))
  } catch {
    // GCM refuses anything it did not seal itself: that is the answer, not a fault.
    return Option.none()
  }
}

/**
 * The node-wide sealing key: generated once into `installation_secrets` (as the token signing key
 * is); nodes that start together agree on the first one inserted.
 */
const loadKey = Effect.map(installationSecret(SEALING_KEY_NAME), (value) => Buffer.from(value, "base64url"))

/**
 * Channel secrets kept for signing: the API still shows a secret once and authenticates by its hash
 * (ADR 0003), but an HMAC keyed with the secret (server-apis.md, outbound webhook signatures) needs
 * the secret itself, so it is also stored sealed (`channels.secret_sealed`).
 */
export class ChannelSecrets extends Effect.Service<ChannelSecrets>()("parley/ChannelSecrets", {
  effect: Effect.gen(function*() {
    const key = yield* loadKey

    /** The value to store in `secret_sealed` beside a new secret's hash. */
    const seal = (channelId: string, secret: string) => sealSecret(key, channelId, secret)

    /** The secret of a `secret_sealed` value read with the channel row. */
    const open = (channelId: string, sealed: Uint8Array | null): Option.Option<Redacted.Redacted<string>> =>
      sealed === null ? Option.none() : Option.map(openSecret(key, channelId, sealed), Redacted.make)

    return { seal, open } as const
  })
}) {}
