import { createHash, hash, randomInt, timingSafeEqual } from "node:crypto"

const BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

/** The credential kinds of CONTRACT.md §2 with their prefixes and random lengths. */
const CredentialKind = {
  apiKey: { prefix: "ck_", length: 40 },
  channelSecret: { prefix: "cs_", length: 40 },
  publishableKey: { prefix: "pk_", length: 32 }
} as const
export type CredentialKind = keyof typeof CredentialKind

/** Characters of a key shown to identify it (`prefix`, CONTRACT.md §2): its kind's prefix and 8 more. */
const SHOWN_PREFIX_LENGTH = 11

/** The start of a key that identifies it without revealing it. */
export const shownPrefix = (credential: string): string => credential.slice(0, SHOWN_PREFIX_LENGTH)

/** A fresh credential: prefix plus uniformly random base62 characters. */
export const generateCredential = (kind: CredentialKind): string => {
  const { length, prefix } = CredentialKind[kind]
  let out = prefix
  for (let i = 0; i < length; i++) out += BASE62[randomInt(62)]
  return out
}

/** True when the text has the shape of a credential of that kind. */
export const looksLike = (kind: CredentialKind, text: string): boolean => {
  const { length, prefix } = CredentialKind[kind]
  return text.length === prefix.length + length && text.startsWith(prefix) &&
    /^[0-9A-Za-z]+$/.test(text.slice(prefix.length))
}

/**
 * What we store of a credential. The credentials are 190+ random bits, so a plain SHA-256 is
 * enough (a slow hash protects guessable secrets, these are not) and keeps lookups by hash cheap.
 */
export const hashCredential = (credential: string): Buffer => createHash("sha256").update(credential).digest()

/** `hashCredential` as hex, in one call (the key lookup of every tenant API request). */
export const hashCredentialHex = (credential: string): string => hash("sha256", credential, "hex")

/** Compares two secrets in time independent of where they differ (and of their lengths). */
export const constantTimeEquals = (a: string, b: string): boolean =>
  timingSafeEqual(hashCredential(a), hashCredential(b))
