import { hash } from "@node-rs/argon2"
import { Data, Effect } from "effect"

/** The shortest password accepted (server-apis.md "Limits"). */
const MIN_PASSWORD_LENGTH = 12
/** The longest password accepted: far beyond any passphrase, short enough that hashing stays cheap. */
const MAX_PASSWORD_LENGTH = 1024
/** A local part at least this long may not appear in the password; shorter ones match too much. */
const MIN_LOCAL_PART_CHECKED = 4

/**
 * What is wrong with `password` for the account `email` (empty when it complies): its length in
 * characters (code points), and it must not contain the address or its local part, case-insensitively.
 */
export const passwordViolations = (password: string, email: string): ReadonlyArray<string> => {
  const violations: Array<string> = []
  const length = [...password].length
  if (length < MIN_PASSWORD_LENGTH) violations.push(`must be at least ${MIN_PASSWORD_LENGTH} characters`)
  else if (length > MAX_PASSWORD_LENGTH) violations.push(`must be at most ${MAX_PASSWORD_LENGTH} characters`)
  const lowered = password.toLowerCase()
  const address = email.trim().toLowerCase()
  const at = address.lastIndexOf("@")
  const local = at > 0 ? address.slice(0, at) : ""
  if (address.length > 0 && lowered.includes(address)) violations.push("must not contain the e-mail address")
  else if (local.length >= MIN_LOCAL_PART_CHECKED && lowered.includes(local)) {
    violations.push("must not contain the name part of the e-mail address")
  }
  return violations
}

/** argon2 refused to hash: bad parameters or no memory, never the caller's fault. */
class PasswordHashFailed extends Data.TaggedError("PasswordHashFailed")<{ readonly cause: unknown }> {}

// `Algorithm.Argon2id` is a const enum: unreadable under isolatedModules and `{}` at runtime.
const ARGON2ID = 2
// OWASP's argon2id baseline (19 MiB, 2 passes, 1 lane), pinned so a library upgrade cannot change it.
const options = { algorithm: ARGON2ID, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const

/** Hashes running at once: libuv's pool has 4 threads, and DNS and file I/O need theirs meanwhile. */
export const PASSWORD_HASH_PERMITS = 2
/** Process-wide, as libuv's pool is: a burst of sign-ups or password changes queues here. */
export const passwordHashing = Effect.unsafeMakeSemaphore(PASSWORD_HASH_PERMITS)

/** The argon2id hash of a password in PHC form (`$argon2id$v=19$…`), with a fresh random salt. */
export const hashPassword = (password: string) =>
  passwordHashing.withPermits(1)(Effect.tryPromise({
    try: (signal) => hash(password, options, signal),
    catch: (cause) => new PasswordHashFailed({ cause })
  }))
