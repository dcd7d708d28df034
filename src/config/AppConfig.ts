import { Config, ConfigError, Effect, Either, Option, ParseResult, Redacted, Schema } from "effect"
import { normalizeOrigin } from "../domain/PublishableKey.js"
import { RateLimitTable } from "../domain/RateLimit.js"
import { type Cidr, isHost, isHostName, isUnspecifiedAddress, parseCidr } from "./NetworkList.js"

/**
 * A variable's text; None when it is missing or blank. `VAR=` in a compose file or a shell means
 * unset, so every setting with a default takes its default then.
 */
const setting = (name: string) =>
  Config.string(name).pipe(Config.option, Config.map(Option.filter((text) => text.trim() !== "")))

/** A setting read by `parse` (Left: the rule the value breaks); None when unset. */
const optional = <A>(name: string, parse: (text: string) => Either.Either<A, string>) =>
  setting(name).pipe(
    Config.mapOrFail(Option.match({
      onNone: () => Either.right(Option.none<A>()),
      // After Config.option, mapOrFail no longer prefixes the variable name: add it here.
      onSome: (text) => Either.map(Either.mapLeft(parse(text), (rule) => ConfigError.InvalidData([name], rule)), Option.some)
    }))
  )

/** A setting read by `parse`, or `fallback` when unset. */
const withDefault = <A>(name: string, fallback: A, parse: (text: string) => Either.Either<A, string>) =>
  optional(name, parse).pipe(Config.map(Option.getOrElse(() => fallback)))

/** A decimal integer within `[min, max]`; the message states the range. */
const integerIn = (min: number, max: number, unit = "") => (text: string): Either.Either<number, string> => {
  const digits = text.trim()
  const n = Number(digits)
  return /^\d+$/.test(digits) && n >= min && n <= max
    ? Either.right(n)
    : Either.left(`must be an integer from ${min} to ${max}${unit}`)
}

/** setTimeout's limit: a longer timer fires at once in Node, and never on Effect's clock. */
export const MAX_TIMER_MS = 2_147_483_647
/** A check interval in seconds becomes a timer, so it stays within MAX_TIMER_MS (about 24.8 days). */
const MAX_INTERVAL_SECONDS = Math.floor(MAX_TIMER_MS / 1000)
/**
 * A lifetime is added to now, never a timer: 10 years keeps every expiry a valid JS date and PostgreSQL
 * timestamp. One that becomes a timer moves to `intervalSeconds`.
 */
const MAX_LIFETIME_SECONDS = 315_360_000
/**
 * Far beyond a chat attachment, and below both PostgreSQL's 1 GiB limit on one field and Node's on
 * one Buffer, wherever an upload ends up held whole.
 */
const MAX_UPLOAD_BYTES = 1_000_000_000
/** More sockets than one node holds: a larger batch is the same as closing all at once. */
const MAX_DRAIN_BATCH_SIZE = 1_000_000

const millis = (name: string, fallback: number, min = 1) =>
  withDefault(name, fallback, integerIn(min, MAX_TIMER_MS, " (milliseconds, about 24.8 days)"))

const intervalSeconds = (name: string, fallback: number) =>
  withDefault(name, fallback, integerIn(1, MAX_INTERVAL_SECONDS, " (seconds, about 24.8 days)"))

const lifetimeSeconds = (name: string, fallback: number, min = 1) =>
  withDefault(name, fallback, integerIn(min, MAX_LIFETIME_SECONDS, " (seconds, 10 years)"))

const count = (name: string, fallback: number, max: number) => withDefault(name, fallback, integerIn(1, max))

const portNumber = integerIn(1, 65535)

const stringSetting = (name: string, fallback: string) => withDefault(name, fallback, Either.right)

const oneOf = <const L extends ReadonlyArray<string>>(values: L) => (value: string): Either.Either<L[number], string> =>
  values.includes(value) ? Either.right(value as L[number]) : Either.left(`must be one of ${values.join(", ")}`)

/** A comma-separated list of IPs/CIDRs; one malformed entry stops the node. */
const cidrList = (name: string, fallback: string) =>
  stringSetting(name, fallback).pipe(
    Config.mapOrFail((text) => {
      const entries = text.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
      const parsed: Array<Cidr> = []
      for (const entry of entries) {
        const cidr = parseCidr(entry)
        if (cidr === undefined) {
          return Either.left(ConfigError.InvalidData([name], `malformed IP or CIDR "${entry}"`))
        }
        parsed.push(cidr)
      }
      return Either.right(parsed as ReadonlyArray<Cidr>)
    })
  )

/**
 * An optional secret of at least `minLength` characters; blank is unset, so an empty token never
 * matches. With `oneWord`, whitespace is refused: a bearer token with a space could never match.
 */
const secret = (name: string, minLength: number, oneWord: boolean) =>
  optional(name, (value) =>
    value.length < minLength
      ? Either.left(`must be at least ${minLength} characters`)
      : oneWord && /\s/.test(value)
      ? Either.left("must not contain whitespace (it is sent as one Bearer word)")
      : Either.right(Redacted.make(value)))

/**
 * `DATABASE_URL` must be a `postgres(ql)://` URL, or the node fails later inside the pool. A hostless URL
 * (`postgres://u@/db?host=/run/postgresql`) is checked with a host filled in; the value is never echoed.
 */
const databaseUrl = optional("DATABASE_URL", (value) => {
  const url = value.trim()
  const candidate = url.replace("@/", "@localhost/")
  return URL.canParse(candidate) && ["postgres:", "postgresql:"].includes(new URL(candidate).protocol)
    ? Either.right(Redacted.make(url))
    : Either.left("must be a postgres:// or postgresql:// URL")
})

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
    return `must be a JSON object {bucket: {limit, scale_ms}} of positive integers${problem}`
  })

/** `RATE_LIMITS`: JSON `{bucket: {limit, scale_ms}}`. A misspelt bucket is an error rather than silently ignored. */
const rateLimits = optional("RATE_LIMITS", decodeRateLimits)

const port = withDefault("PORT", 4000, portNumber)

/** An IP address or host name, checked before anything starts (not when the listener fails). */
const hostSetting = (name: string, fallback: string) =>
  withDefault(name, fallback, (text) => {
    const host = text.trim()
    return isHost(host) ? Either.right(host) : Either.left("must be an IP address (IPv4 in four decimal parts) or a host name")
  })

/**
 * `CLUSTER_RUNNER_HOST`, the address peers dial. "Any address" (0.0.0.0, `::`, a port typed here) is
 * refused: a peer dialling it reaches itself, and the cluster misroutes silently.
 */
const runnerHost = hostSetting("CLUSTER_RUNNER_HOST", "127.0.0.1").pipe(
  Config.mapOrFail((host) =>
    isUnspecifiedAddress(host)
      ? Either.left(ConfigError.InvalidData(
        ["CLUSTER_RUNNER_HOST"],
        "must be an address other nodes can dial (this node's name or IP address), not 0.0.0.0 or ::"
      ))
      : Either.right(host)
  )
)

/**
 * Address-guard exceptions: exact host names, `*.` wildcards of them, IPs and CIDRs, lower-cased.
 * A malformed entry stops the node: it would never match, and the host it meant would stay refused.
 */
const allowedHosts = (name: string) =>
  optional(name, (text) => {
    const entries = text.split(",").map((s) => s.trim().toLowerCase()).filter((s) => s.length > 0)
    const bad = entries.find((entry) =>
      !(isHostName(entry.startsWith("*.") ? entry.slice(2) : entry) || parseCidr(entry) !== undefined)
    )
    return bad === undefined ? Either.right(entries) : Either.left(`malformed host, wildcard, IP or CIDR "${bad}"`)
  }).pipe(Config.map(Option.getOrElse((): ReadonlyArray<string> => [])))

/** Origins browsers may call the client API from: any, or these (as browsers send `Origin`). */
export type CorsOrigins = "*" | ReadonlySet<string>

/**
 * `CORS_ALLOWED_ORIGINS`: `*`, or origins normalised like publishable-key origins. A malformed entry
 * stops the node: it would never match, and the site it meant would stay refused.
 */
const corsAllowedOrigins = withDefault<CorsOrigins>("CORS_ALLOWED_ORIGINS", "*", (text) => {
  if (text.trim() === "*") return Either.right("*")
  const origins = new Set<string>()
  for (const entry of text.split(",").map((s) => s.trim()).filter((s) => s.length > 0)) {
    const origin = normalizeOrigin(entry)
    if (Option.isNone(origin)) {
      return Either.left(`malformed origin ${JSON.stringify(entry)} (must be * or origins like https://app.example.com)`)
    }
    origins.add(origin.value)
  }
  return origins.size > 0 ? Either.right(origins) : Either.left("must be * or at least one origin")
})

/**
 * `PORT + 1000` unless `CLUSTER_RUNNER_PORT` is set. A derived port above 65535 stops the node here,
 * naming the variable to set, rather than as a RangeError when the runner listens.
 */
const clusterRunnerPort = Config.all([port, optional("CLUSTER_RUNNER_PORT", portNumber)]).pipe(
  Config.mapOrFail(([p, explicit]) =>
    Option.match(explicit, {
      onSome: (runnerPort) =>
        runnerPort !== p
          ? Either.right(runnerPort)
          : Either.left(ConfigError.InvalidData(["CLUSTER_RUNNER_PORT"], `must differ from PORT (${p})`)),
      onNone: () =>
        p + 1000 <= 65535
          ? Either.right(p + 1000)
          : Either.left(ConfigError.InvalidData(
            ["CLUSTER_RUNNER_PORT"],
            `must be set when PORT is above 64535 (the default PORT + 1000 = ${p + 1000} is not a port)`
          ))
    })
  )
)

/** Every environment variable of CONTRACT.md §1, read once. */
export class AppConfig extends Effect.Service<AppConfig>()("parley/AppConfig", {
  effect: Config.all({
    port,
    host: hostSetting("HOST", "0.0.0.0"),
    databaseUrl,
    databaseStatementTimeoutMs: millis("DATABASE_STATEMENT_TIMEOUT_MS", 10000),
    dataDir: stringSetting("DATA_DIR", "./data"),
    adminApiToken: secret("ADMIN_API_TOKEN", 32, true),
    adminIpAllowlist: cidrList("ADMIN_IP_ALLOWLIST", "127.0.0.1/8,::1/128"),
    trustedProxies: cidrList("TRUSTED_PROXIES", ""),
    // Key material, never sent over the wire: any character counts.
    tokenSigningKey: secret("TOKEN_SIGNING_KEY", 32, false),
    tokenTtlSeconds: lifetimeSeconds("TOKEN_TTL_SECONDS", 1800),
    tokenRotationGraceSeconds: lifetimeSeconds("TOKEN_ROTATION_GRACE_SECONDS", 30, 0),
    legacyTokenTtlSeconds: lifetimeSeconds("LEGACY_TOKEN_TTL_SECONDS", 3600),
    publishableResumeTtlSeconds: lifetimeSeconds("PUBLISHABLE_RESUME_TTL_SECONDS", 604800),
    apiKeyRotationGraceSeconds: lifetimeSeconds("API_KEY_ROTATION_GRACE_SECONDS", 86400, 0),
    conversationIdleCloseSeconds: lifetimeSeconds("CONVERSATION_IDLE_CLOSE_SECONDS", 86400),
    conversationExpiryCheckSeconds: intervalSeconds("CONVERSATION_EXPIRY_CHECK_SECONDS", 3600),
    conversationExpiryClosesPerSecond: count("CONVERSATION_EXPIRY_CLOSES_PER_SECOND", 25, 1000),
    purgeIntervalSeconds: intervalSeconds("PURGE_INTERVAL_SECONDS", 10),
    // server-apis.md "Limits": 365 days by default, 0 keeps the audit log forever.
    auditRetentionDays: withDefault("AUDIT_RETENTION_DAYS", 365, integerIn(0, MAX_LIFETIME_SECONDS / 86_400, " (days; 0 keeps forever)")),
    sseHeartbeatMs: millis("SSE_HEARTBEAT_MS", 30000),
    socketIdleTimeoutMs: millis("SOCKET_IDLE_TIMEOUT_MS", 60000),
    rateLimits,
    rateLimitSyncMs: millis("RATE_LIMIT_SYNC_MS", 100),
    webhookAllowedHosts: allowedHosts("WEBHOOK_ALLOWED_HOSTS"),
    corsAllowedOrigins,
    uploadMaxBytes: count("UPLOAD_MAX_BYTES", 10485760, MAX_UPLOAD_BYTES),
    channelHealthIntervalSeconds: intervalSeconds("CHANNEL_HEALTH_INTERVAL_SECONDS", 300),
    drainRefuseMs: millis("DRAIN_REFUSE_MS", 5000, 0),
    drainBatchSize: count("DRAIN_BATCH_SIZE", 500, MAX_DRAIN_BATCH_SIZE),
    drainBatchIntervalMs: millis("DRAIN_BATCH_INTERVAL_MS", 1000, 0),
    drainMaxMs: millis("DRAIN_MAX_MS", 30000),
    readinessPoolWaitMs: millis("READINESS_POOL_WAIT_MS", 200, 0),
    metricsToken: secret("METRICS_TOKEN", 0, true),
    // `warn` is the common spelling of `warning`, which the logger's level names use.
    logLevel: withDefault("LOG_LEVEL", "info", (text) =>
      oneOf(["trace", "debug", "info", "warning", "error", "fatal", "none"])(text === "warn" ? "warning" : text)),
    logFormat: withDefault("LOG_FORMAT", "json", oneOf(["json", "pretty"])),
    clusterRunnerHost: runnerHost,
    clusterRunnerPort,
    clusterShardLockExpirationMs: millis("CLUSTER_SHARD_LOCK_EXPIRATION_MS", 6000),
    clusterEntityTerminationTimeoutMs: millis("CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS", 3000),
    clusterStreamLifetimeMs: withDefault("CLUSTER_STREAM_LIFETIME_MS", 300000, integerIn(1000, 86_400_000, " (milliseconds, one day)"))
  })
}) {}
