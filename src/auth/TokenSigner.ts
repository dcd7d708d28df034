import { Effect, Option, Redacted, Schema } from "effect"
import { errors, type JWTPayload, jwtVerify, SignJWT } from "jose"
import { AppConfig } from "../config/AppConfig.js"
import { installationSecret } from "../db/InstallationSecrets.js"
import { TokenExpired, Unauthorized } from "../domain/ApiError.js"
import { ClientTokenClaims, type ClientTokenGrant, ResumeClaims } from "../domain/ClientToken.js"

/** Where the generated key is kept in `installation_secrets`. */
export const SIGNING_KEY_NAME = "token_signing_key"

/**
 * HMAC-SHA256: every node both signs and verifies with one shared secret, so an asymmetric
 * algorithm would buy nothing; verification accepts this algorithm only.
 */
const ALGORITHM = "HS256"

/** The header type of a publishable `resume` value: a token verifier refuses it, and the other way round. */
const RESUME_TYPE = "parley-resume+jwt"
/** How far a token's `iat` may lie ahead of this node's clock (nodes' clocks differ a little). */
const ISSUED_AT_LEEWAY_SECONDS = 5

const decodeClaims = Schema.decodeUnknown(ClientTokenClaims)
const decodeResume = Schema.decodeUnknownOption(ResumeClaims)
const invalidToken = () => new Unauthorized({ message: "invalid token" })

/**
 * The key text: `TOKEN_SIGNING_KEY` when set, else the one generated into the database once.
 */
const loadKey = Effect.gen(function*() {
  const config = yield* AppConfig
  if (Option.isSome(config.tokenSigningKey)) return config.tokenSigningKey.value
  return Redacted.make(yield* installationSecret(SIGNING_KEY_NAME))
})

/**
 * Signs and verifies client tokens (JWT, HS256). Both key sources are used as UTF-8 bytes, so a
 * generated key moves into `TOKEN_SIGNING_KEY` unchanged; tokens are never logged.
 */
export class TokenSigner extends Effect.Service<TokenSigner>()("parley/TokenSigner", {
  effect: Effect.gen(function*() {
    const key = new TextEncoder().encode(Redacted.value(yield* loadKey))

    /**
     * A token for `grant`, valid `ttlSeconds` from now but never past `notAfter` (Unix seconds),
     * with `sub` = `user_id` and a fresh `jti`.
     */
    const sign = Effect.fn("TokenSigner.sign")(function*(grant: ClientTokenGrant, ttlSeconds: number, notAfter = Infinity) {
      const iat = Math.floor(Date.now() / 1000)
      const claims: ClientTokenClaims = {
        ...grant,
        ...(grant.user_id === undefined ? {} : { sub: grant.user_id }),
        jti: crypto.randomUUID(),
        iat,
        exp: Math.min(iat + ttlSeconds, notAfter)
      }
      return yield* Effect.tryPromise(() =>
        new SignJWT({ ...claims } as JWTPayload).setProtectedHeader({ alg: ALGORITHM, typ: "JWT" }).sign(key)
      ).pipe(
        // HMAC over claims we built, with a key we hold, cannot fail: a rejection is a bug.
        Effect.orDie
      )
    })

    /** A publishable `resume` value for `claims`, valid `ttlSeconds` from now. */
    const signResume = (claims: Omit<ResumeClaims, "exp">, ttlSeconds: number) =>
      Effect.tryPromise(() =>
        new SignJWT({ ...claims, exp: Math.floor(Date.now() / 1000) + ttlSeconds })
          .setProtectedHeader({ alg: ALGORITHM, typ: RESUME_TYPE })
          .sign(key)
      ).pipe(Effect.orDie)

    /** The claims of a `resume` value we signed that has not expired; none for anything else. */
    const verifyResume = (text: string) =>
      Effect.promise(() =>
        jwtVerify(text, key, { algorithms: [ALGORITHM], typ: RESUME_TYPE }).then(
          ({ payload }) => decodeResume(payload),
          () => Option.none<ResumeClaims>()
        )
      )

    /**
     * The claims of a token signed with our key: 401 `token_expired` past `exp`, else 401
     * `unauthorized` (a claim missing or mistyped, an `iat` ahead of our clock, a `resume` value).
     */
    const verify = Effect.fn("TokenSigner.verify")(function*(token: string) {
      const { payload, protectedHeader } = yield* Effect.tryPromise({
        try: () => jwtVerify(token, key, { algorithms: [ALGORITHM] }),
        // jose checks `exp` only after the signature, so a forged expired token is not "expired".
        catch: (cause) =>
          cause instanceof errors.JWTExpired ? new TokenExpired({ message: "the token has expired" }) : invalidToken()
      })
      if (protectedHeader.typ === RESUME_TYPE) return yield* invalidToken()
      const claims = yield* decodeClaims(payload).pipe(Effect.catchTag("ParseError", () => Effect.fail(invalidToken())))
      // jose checks a future `iat` only with `maxTokenAge`; a token from the future was not issued by us.
      if (claims.iat > Date.now() / 1000 + ISSUED_AT_LEEWAY_SECONDS) return yield* invalidToken()
      return claims
    })

    return { sign, verify, signResume, verifyResume } as const
  })
}) {}
