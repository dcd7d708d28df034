import { Config, ConfigError, Effect, Either, Option, ParseResult, Redacted, Schema } from "effect"
import { RateLimitTable } from "../domain/RateLimit.js"
import { type Cidr, parseCidr } from "./NetworkList.js"

const positiveInt = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: "must be a positive integer", validation: (n) => n > 0 }),
    Config.withDefault(fallback)
  )

const nonNegativeInt = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: "must be a non-negative integer", validation: (n) => n >= 0 }),
    Config.withDefault(fallback)
  )

/** A comma-separated list of IPs/CIDRs; one malformed entry stops the node. */
const cidrList = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((text) => {
      const entries = text.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
      const parsed: Array<Cidr> = []
      for (const entry of entries) {
        const cidr = parseCidr(entry)
        if (cidr === undefined) {
          // Behind withDefault, mapOrFail no longer prefixes the variable name: add it here.
          return Either.left(ConfigError.InvalidData([name], `malformed IP or CIDR "${entry}"`))
        }
        parsed.push(cidr)
      }
      return Either.right(parsed as ReadonlyArray<Cidr>)
    })
  )

/**
 * An optional secret or URL. Set-but-empty means unset, as `VAR=` in a compose file or a shell
 * does: an empty `DATABASE_URL` must not become "connect to whatever pg defaults to". A value that
 * is set must be at least `minLength` characters. Validated on the variable itself, before
 * redacting, so that the error names it.
 */
const optionalRedacted = (name: string, minLength = 0) =>
  Config.string(name).pipe(
    Config.validate({
      message: `must be at least ${minLength} characters`,
      validation: (s) => s.trim() === "" || s.length >= minLength
    }),
    Config.option,
    Config.map((value) => Option.filter(value, (s) => s.trim() !== "").pipe(Option.map(Redacted.make)))
  )

/** `RATE_LIMITS` as read; Left is a one-line message naming the first problem. */
const decodeRateLimits = (text: string) =>
  Either.mapLeft(Schema.decodeUnknownEither(RateLimitTable, { onExcessProperty: "error" })(text), (error) => {
    const first = ParseResult.ArrayFormatter.formatErrorSync(error)[0]
    const problem = first === undefined
      ? ""
      : first.path.length > 0
      ? ` (${first.path.join(".")}: ${first.message})`
      : first._tag === "Transformation"
      ? ` (${first.message})`
      : ""
    // Read through Config.option first, so the error names the variable itself.
    return ConfigError.InvalidData(["RATE_LIMITS"], `must be a JSON object {bucket: {limit, scale_ms}} of positive integers${problem}`)
  })

/**
 * `RATE_LIMITS`: JSON `{bucket: {limit, scale_ms}}`; set but empty is unset, like every optional
 * setting. A misspelt bucket is an error rather than silently ignored.
 */
const rateLimits = Config.string("RATE_LIMITS").pipe(
  Config.option,
  Config.map(Option.filter((text) => text.trim() !== "")),
  Config.mapOrFail(Option.match({
    onNone: () => Either.right(Option.none()),
    onSome: (text) => Either.map(decodeRateLimits(text), Option.some)
  }))
)

const port = Config.port("PORT").pipe(Config.withDefault(4000))

const logLevel = Config.literal("trace", "debug", "info", "warning", "error", "fatal", "none")("LOG_LEVEL").pipe(
  Config.withDefault("info" as const)
)

/** Every environment variable of CONTRACT.md §1, read once. */
export class AppConfig extends Effect.Service<AppConfig>()("parley/AppConfig", {
  effect: Config.all({
    port,
    host: Config.string("HOST").pipe(Config.withDefault("0.0.0.0")),
    databaseUrl: optionalRedacted("DATABASE_URL"),
    dataDir: Config.string("DATA_DIR").pipe(Config.withDefault("./data")),
    adminApiToken: optionalRedacted("ADMIN_API_TOKEN", 32),
    adminIpAllowlist: cidrList("ADMIN_IP_ALLOWLIST", "127.0.0.1/8,::1/128"),
    trustedProxies: cidrList("TRUSTED_PROXIES", ""),
    tokenSigningKey: optionalRedacted("TOKEN_SIGNING_KEY", 32),
    tokenTtlSeconds: positiveInt("TOKEN_TTL_SECONDS", 1800),
    tokenRotationGraceSeconds: nonNegativeInt("TOKEN_ROTATION_GRACE_SECONDS", 30),
    legacyTokenTtlSeconds: positiveInt("LEGACY_TOKEN_TTL_SECONDS", 3600),
    publishableResumeTtlSeconds: positiveInt("PUBLISHABLE_RESUME_TTL_SECONDS", 604800),
    apiKeyRotationGraceSeconds: nonNegativeInt("API_KEY_ROTATION_GRACE_SECONDS", 86400),
    conversationIdleCloseSeconds: positiveInt("CONVERSATION_IDLE_CLOSE_SECONDS", 86400),
    conversationExpiryCheckSeconds: positiveInt("CONVERSATION_EXPIRY_CHECK_SECONDS", 3600),
    purgeIntervalSeconds: positiveInt("PURGE_INTERVAL_SECONDS", 10),
    sseHeartbeatMs: positiveInt("SSE_HEARTBEAT_MS", 30000),
    socketIdleTimeoutMs: positiveInt("SOCKET_IDLE_TIMEOUT_MS", 60000),
    rateLimits,
    rateLimitSyncMs: positiveInt("RATE_LIMIT_SYNC_MS", 100),
    webhookAllowedHosts: Config.string("WEBHOOK_ALLOWED_HOSTS").pipe(
      Config.withDefault(""),
      Config.map((text) => text.split(",").map((s) => s.trim().toLowerCase()).filter((s) => s.length > 0))
    ),
    uploadMaxBytes: positiveInt("UPLOAD_MAX_BYTES", 10485760),
    channelHealthIntervalSeconds: positiveInt("CHANNEL_HEALTH_INTERVAL_SECONDS", 300),
    drainRefuseMs: nonNegativeInt("DRAIN_REFUSE_MS", 5000),
    drainBatchSize: positiveInt("DRAIN_BATCH_SIZE", 500),
    drainBatchIntervalMs: nonNegativeInt("DRAIN_BATCH_INTERVAL_MS", 1000),
    drainMaxMs: positiveInt("DRAIN_MAX_MS", 30000),
    metricsToken: optionalRedacted("METRICS_TOKEN"),
    logLevel,
    logFormat: Config.literal("json", "pretty")("LOG_FORMAT").pipe(Config.withDefault("json" as const)),
    clusterRunnerHost: Config.string("CLUSTER_RUNNER_HOST").pipe(Config.withDefault("127.0.0.1")),
    // Config.option is None only when the variable is missing; an invalid value still fails.
    clusterRunnerPort: Config.all([port, Config.option(Config.port("CLUSTER_RUNNER_PORT"))]).pipe(
      Config.map(([p, explicit]) => Option.getOrElse(explicit, () => p + 1000))
    ),
    clusterShardLockExpirationMs: positiveInt("CLUSTER_SHARD_LOCK_EXPIRATION_MS", 6000),
    clusterEntityTerminationTimeoutMs: positiveInt("CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS", 3000)
  })
}) {}
