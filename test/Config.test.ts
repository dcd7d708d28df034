import { describe, expect, it } from "@effect/vitest"
import { ConfigError, ConfigProvider, Effect, Layer, Option, Redacted } from "effect"
import { AppConfig } from "../src/config/AppConfig.js"
import type { Cidr } from "../src/config/NetworkList.js"
import { programLines, spawnInRepo } from "./support/Spawn.js"

/** AppConfig read from exactly these variables. */
const load = (env: Record<string, string>) =>
  AppConfig.pipe(
    Effect.provide(
      AppConfig.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))
    )
  )

/**
 * Why `env` is refused. A configuration accepted instead fails the test with a short message: handed
 * the whole service, vitest's error printer spun for minutes and never finished the run.
 */
const refusal = (env: Record<string, string>) => Effect.flip(Effect.as(load(env), "the configuration was accepted"))

const ranges = (cidrs: ReadonlyArray<Cidr>) => cidrs.map(([address, bits]) => `${address.toString()}/${bits}`)

/** Every variable a configuration error names. */
const namedVariables = (error: ConfigError.ConfigError): ReadonlyArray<string> => {
  switch (error._op) {
    case "And":
    case "Or":
      return [...new Set([...namedVariables(error.left), ...namedVariables(error.right)])]
    default:
      return [error.path.join(".")]
  }
}

/** Every variable AppConfig reads. */
const variables = [
  "PORT",
  "HOST",
  "DATABASE_URL",
  "DATABASE_STATEMENT_TIMEOUT_MS",
  "DATA_DIR",
  "ADMIN_API_TOKEN",
  "ADMIN_IP_ALLOWLIST",
  "TRUSTED_PROXIES",
  "TOKEN_SIGNING_KEY",
  "TOKEN_TTL_SECONDS",
  "TOKEN_ROTATION_GRACE_SECONDS",
  "LEGACY_TOKEN_TTL_SECONDS",
  "PUBLISHABLE_RESUME_TTL_SECONDS",
  "API_KEY_ROTATION_GRACE_SECONDS",
  "CONVERSATION_IDLE_CLOSE_SECONDS",
  "CONVERSATION_EXPIRY_CHECK_SECONDS",
  "CONVERSATION_EXPIRY_CLOSES_PER_SECOND",
  "PURGE_INTERVAL_SECONDS",
  "AUDIT_RETENTION_DAYS",
  "SSE_HEARTBEAT_MS",
  "SOCKET_IDLE_TIMEOUT_MS",
  "RATE_LIMITS",
  "RATE_LIMIT_SYNC_MS",
  "WEBHOOK_ALLOWED_HOSTS",
  "CORS_ALLOWED_ORIGINS",
  "UPLOAD_MAX_BYTES",
  "CHANNEL_HEALTH_INTERVAL_SECONDS",
  "DRAIN_REFUSE_MS",
  "DRAIN_BATCH_SIZE",
  "DRAIN_BATCH_INTERVAL_MS",
  "DRAIN_MAX_MS",
  "READINESS_POOL_WAIT_MS",
  "METRICS_TOKEN",
  "LOG_LEVEL",
  "LOG_FORMAT",
  "CLUSTER_RUNNER_HOST",
  "CLUSTER_RUNNER_PORT",
  "CLUSTER_SHARD_LOCK_EXPIRATION_MS",
  "CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS",
  "CLUSTER_STREAM_LIFETIME_MS"
]

describe("AppConfig", () => {
  it.effect("every variable of CONTRACT §1 has its default", () =>
    Effect.gen(function*() {
      const { adminIpAllowlist, trustedProxies, ...config } = yield* load({})
      expect(ranges(adminIpAllowlist)).toEqual(["127.0.0.1/8", "::1/128"])
      expect(trustedProxies).toEqual([])
      expect({ ...config }).toEqual({
        port: 4000,
        host: "0.0.0.0",
        databaseUrl: Option.none(),
        databaseStatementTimeoutMs: 10000,
        dataDir: "./data",
        adminApiToken: Option.none(),
        tokenSigningKey: Option.none(),
        tokenTtlSeconds: 1800,
        tokenRotationGraceSeconds: 30,
        legacyTokenTtlSeconds: 3600,
        publishableResumeTtlSeconds: 604800,
        apiKeyRotationGraceSeconds: 86400,
        conversationIdleCloseSeconds: 86400,
        conversationExpiryCheckSeconds: 3600,
        conversationExpiryClosesPerSecond: 25,
        purgeIntervalSeconds: 10,
        auditRetentionDays: 365,
        sseHeartbeatMs: 30000,
        socketIdleTimeoutMs: 60000,
        rateLimits: Option.none(),
        rateLimitSyncMs: 100,
        webhookAllowedHosts: [],
        corsAllowedOrigins: "*",
        uploadMaxBytes: 10485760,
        channelHealthIntervalSeconds: 300,
        drainRefuseMs: 5000,
        drainBatchSize: 500,
        drainBatchIntervalMs: 1000,
        drainMaxMs: 30000,
        readinessPoolWaitMs: 200,
        metricsToken: Option.none(),
        logLevel: "info",
        logFormat: "json",
        clusterRunnerHost: "127.0.0.1",
        clusterRunnerPort: 5000,
        clusterShardLockExpirationMs: 6000,
        clusterEntityTerminationTimeoutMs: 3000,
        clusterStreamLifetimeMs: 300000
      })
    }))

  it.effect("every variable is read, and CLUSTER_RUNNER_PORT follows PORT unless set", () =>
    Effect.gen(function*() {
      const token = "a".repeat(32)
      const config = yield* load({
        PORT: "4100",
        HOST: "127.0.0.1",
        DATABASE_URL: "postgres://u@db/parley",
        DATA_DIR: "/var/lib/parley",
        ADMIN_API_TOKEN: token,
        ADMIN_IP_ALLOWLIST: "10.0.0.0/8, 192.168.1.7",
        TRUSTED_PROXIES: "172.16.0.0/12",
        TOKEN_SIGNING_KEY: "k".repeat(40),
        TOKEN_TTL_SECONDS: "60",
        TOKEN_ROTATION_GRACE_SECONDS: "0",
        LEGACY_TOKEN_TTL_SECONDS: "61",
        PUBLISHABLE_RESUME_TTL_SECONDS: "62",
        API_KEY_ROTATION_GRACE_SECONDS: "63",
        CONVERSATION_IDLE_CLOSE_SECONDS: "64",
        CONVERSATION_EXPIRY_CHECK_SECONDS: "65",
        CONVERSATION_EXPIRY_CLOSES_PER_SECOND: "66",
        PURGE_INTERVAL_SECONDS: "79",
        AUDIT_RETENTION_DAYS: "0",
        SSE_HEARTBEAT_MS: "66",
        SOCKET_IDLE_TIMEOUT_MS: "67",
        RATE_LIMITS: "{\"upload\":{\"limit\":3,\"scale_ms\":1000}}",
        RATE_LIMIT_SYNC_MS: "68",
        WEBHOOK_ALLOWED_HOSTS: "Hooks.Example.com, *.internal,127.0.0.1",
        CORS_ALLOWED_ORIGINS: "HTTPS://App.Example.com:443, http://localhost:3000",
        UPLOAD_MAX_BYTES: "69",
        CHANNEL_HEALTH_INTERVAL_SECONDS: "70",
        DRAIN_REFUSE_MS: "0",
        DRAIN_BATCH_SIZE: "71",
        DRAIN_BATCH_INTERVAL_MS: "72",
        DRAIN_MAX_MS: "73",
        READINESS_POOL_WAIT_MS: "0",
        METRICS_TOKEN: "metrics-secret",
        LOG_LEVEL: "warning",
        LOG_FORMAT: "pretty",
        CLUSTER_RUNNER_HOST: "node-2",
        CLUSTER_SHARD_LOCK_EXPIRATION_MS: "74",
        CLUSTER_ENTITY_TERMINATION_TIMEOUT_MS: "75",
        CLUSTER_STREAM_LIFETIME_MS: "1000"
      })
      expect(config).toMatchObject({
        port: 4100,
        host: "127.0.0.1",
        dataDir: "/var/lib/parley",
        tokenTtlSeconds: 60,
        tokenRotationGraceSeconds: 0,
        legacyTokenTtlSeconds: 61,
        publishableResumeTtlSeconds: 62,
        apiKeyRotationGraceSeconds: 63,
        conversationIdleCloseSeconds: 64,
        conversationExpiryCheckSeconds: 65,
        conversationExpiryClosesPerSecond: 66,
        purgeIntervalSeconds: 79,
        auditRetentionDays: 0,
        sseHeartbeatMs: 66,
        socketIdleTimeoutMs: 67,
        rateLimitSyncMs: 68,
        webhookAllowedHosts: ["hooks.example.com", "*.internal", "127.0.0.1"],
        // As browsers send Origin: lower case, the default port dropped.
        corsAllowedOrigins: new Set(["https://app.example.com", "http://localhost:3000"]),
        uploadMaxBytes: 69,
        channelHealthIntervalSeconds: 70,
        drainRefuseMs: 0,
        drainBatchSize: 71,
        drainBatchIntervalMs: 72,
        drainMaxMs: 73,
        readinessPoolWaitMs: 0,
        logLevel: "warning",
        logFormat: "pretty",
        clusterRunnerHost: "node-2",
        clusterRunnerPort: 5100,
        clusterShardLockExpirationMs: 74,
        clusterEntityTerminationTimeoutMs: 75,
        clusterStreamLifetimeMs: 1000
      })
      expect(Option.map(config.databaseUrl, Redacted.value)).toEqual(Option.some("postgres://u@db/parley"))
      expect(Option.map(config.adminApiToken, Redacted.value)).toEqual(Option.some(token))
      expect(Option.map(config.tokenSigningKey, Redacted.value)).toEqual(Option.some("k".repeat(40)))
      expect(Option.map(config.metricsToken, Redacted.value)).toEqual(Option.some("metrics-secret"))
      expect(config.rateLimits.pipe(Option.map((table) => table.upload?.limit))).toEqual(Option.some(3))
      expect(ranges(config.adminIpAllowlist)).toEqual(["10.0.0.0/8", "192.168.1.7/32"])
      expect(ranges(config.trustedProxies)).toEqual(["172.16.0.0/12"])
      // Secrets stay redacted wherever the config is printed.
      expect(String(config.adminApiToken)).not.toContain(token)

      expect((yield* load({ PORT: "4100", CLUSTER_RUNNER_PORT: "7000" })).clusterRunnerPort).toBe(7000)
    }))

  it.effect("LOG_LEVEL=warn is the common spelling of warning", () =>
    Effect.gen(function*() {
      expect((yield* load({ LOG_LEVEL: "warn" })).logLevel).toBe("warning")
    }))

  it.effect("an optional variable set to nothing is unset (VAR= in a compose file)", () =>
    Effect.gen(function*() {
      const config = yield* load({ DATABASE_URL: "", METRICS_TOKEN: " ", ADMIN_API_TOKEN: "", TOKEN_SIGNING_KEY: "", RATE_LIMITS: "" })
      expect(config.databaseUrl).toEqual(Option.none())
      expect(config.rateLimits).toEqual(Option.none())
      expect(config.metricsToken).toEqual(Option.none())
      expect(config.adminApiToken).toEqual(Option.none())
      expect(config.tokenSigningKey).toEqual(Option.none())
    }))

  it.effect("every variable set to nothing or blanks takes its default (Number(\"\") is not 0)", () =>
    Effect.gen(function*() {
      const defaults = yield* load({})
      for (const blank of ["", "  "]) {
        const config = yield* load(Object.fromEntries(variables.map((name) => [name, blank])))
        expect({ ...config, adminIpAllowlist: ranges(config.adminIpAllowlist) }).toEqual({
          ...defaults,
          adminIpAllowlist: ranges(defaults.adminIpAllowlist)
        })
      }
      const config = yield* load({
        API_KEY_ROTATION_GRACE_SECONDS: "",
        DRAIN_REFUSE_MS: "",
        TOKEN_ROTATION_GRACE_SECONDS: "",
        DRAIN_BATCH_INTERVAL_MS: "",
        TOKEN_TTL_SECONDS: "",
        PORT: "4100",
        CLUSTER_RUNNER_PORT: ""
      })
      expect(config).toMatchObject({
        apiKeyRotationGraceSeconds: 86400,
        drainRefuseMs: 5000,
        tokenRotationGraceSeconds: 30,
        drainBatchIntervalMs: 1000,
        tokenTtlSeconds: 1800,
        clusterRunnerPort: 5100
      })
    }))

  it.effect("the largest values allowed are read, and PostgreSQL URLs in the forms pg takes", () =>
    Effect.gen(function*() {
      const config = yield* load({
        DRAIN_MAX_MS: "2147483647",
        API_KEY_ROTATION_GRACE_SECONDS: "315360000",
        CONVERSATION_IDLE_CLOSE_SECONDS: "315360000",
        CONVERSATION_EXPIRY_CHECK_SECONDS: "2147483",
        CONVERSATION_EXPIRY_CLOSES_PER_SECOND: "1000",
        UPLOAD_MAX_BYTES: "1000000000",
        DRAIN_BATCH_SIZE: "1000000",
        PORT: "64535"
      })
      expect(config).toMatchObject({
        drainMaxMs: 2147483647,
        apiKeyRotationGraceSeconds: 315360000,
        conversationIdleCloseSeconds: 315360000,
        conversationExpiryCheckSeconds: 2147483,
        conversationExpiryClosesPerSecond: 1000,
        uploadMaxBytes: 1000000000,
        drainBatchSize: 1000000,
        clusterRunnerPort: 65535
      })
      expect((yield* load({ PORT: "65000", CLUSTER_RUNNER_PORT: "6000" })).clusterRunnerPort).toBe(6000)
      const hosts = yield* load({ HOST: "::", CLUSTER_RUNNER_HOST: "node-1.internal", WEBHOOK_ALLOWED_HOSTS: "Hooks.Example.com, *.corp.test,10.0.0.0/8,::1" })
      expect(hosts).toMatchObject({
        host: "::",
        clusterRunnerHost: "node-1.internal",
        webhookAllowedHosts: ["hooks.example.com", "*.corp.test", "10.0.0.0/8", "::1"]
      })
      for (
        const url of [
          "postgresql://u:p@db:5432/parley?sslmode=require",
          "postgres:///parley?host=/var/run/postgresql",
          "postgres://u@/parley?host=/var/run/postgresql"
        ]
      ) {
        expect(Option.map((yield* load({ DATABASE_URL: url })).databaseUrl, Redacted.value)).toEqual(Option.some(url))
      }
    }))

  const invalid: ReadonlyArray<readonly [string, Record<string, string>]> = [
    ["PORT", { PORT: "abc" }],
    ["PORT", { PORT: "70000" }],
    ["TOKEN_TTL_SECONDS", { TOKEN_TTL_SECONDS: "ten" }],
    ["TOKEN_TTL_SECONDS", { TOKEN_TTL_SECONDS: "0" }],
    ["DRAIN_MAX_MS", { DRAIN_MAX_MS: "-1" }],
    ["ADMIN_API_TOKEN", { ADMIN_API_TOKEN: "short" }],
    ["ADMIN_API_TOKEN", { ADMIN_API_TOKEN: "a".repeat(31) }],
    ["TOKEN_SIGNING_KEY", { TOKEN_SIGNING_KEY: "too-short" }],
    ["ADMIN_IP_ALLOWLIST", { ADMIN_IP_ALLOWLIST: "10.0.0.0/33" }],
    ["ADMIN_IP_ALLOWLIST", { ADMIN_IP_ALLOWLIST: "127.0.0.1/8,localhost" }],
    ["TRUSTED_PROXIES", { TRUSTED_PROXIES: "10.0.0.0/8,not-a-cidr" }],
    // Shorthand, octal and hex IPv4 parts mean other addresses than they seem to.
    ["ADMIN_IP_ALLOWLIST", { ADMIN_IP_ALLOWLIST: "127/8" }],
    ["ADMIN_IP_ALLOWLIST", { ADMIN_IP_ALLOWLIST: "127.1" }],
    ["TRUSTED_PROXIES", { TRUSTED_PROXIES: "010.0.0.0/8" }],
    ["TRUSTED_PROXIES", { TRUSTED_PROXIES: "0x7f.0.0.1" }],
    ["RATE_LIMITS", { RATE_LIMITS: "{not json" }],
    ["RATE_LIMITS", { RATE_LIMITS: "{\"upload\":{\"limit\":0,\"scale_ms\":1000}}" }],
    ["RATE_LIMITS", { RATE_LIMITS: "{\"uplaod\":{\"limit\":1,\"scale_ms\":1000}}" }],
    ["RATE_LIMITS", { RATE_LIMITS: "{\"upload\":{\"limit\":1,\"scale_ms\":31536000001}}" }],
    ["LOG_LEVEL", { LOG_LEVEL: "loud" }],
    ["LOG_FORMAT", { LOG_FORMAT: "xml" }],
    ["CLUSTER_RUNNER_PORT", { CLUSTER_RUNNER_PORT: "x" }],
    ["CLUSTER_RUNNER_PORT", { CLUSTER_RUNNER_PORT: "0" }],
    // The derived runner port would be 66000.
    ["CLUSTER_RUNNER_PORT", { PORT: "65000" }],
    ["PORT", { PORT: "1.5" }],
    // Checked before anything starts, not when the listener or the runner fails.
    ["HOST", { HOST: "not_a_host" }],
    ["HOST", { HOST: "256.1.1.1" }],
    // Shorthand IPv4 (a port typed here reads as 0.0.19.136): the listener failed with
    // EADDRNOTAVAIL after the database was migrated, as a JSON log line instead of this one.
    ["HOST", { HOST: "5000" }],
    ["HOST", { HOST: "127.1" }],
    ["CLUSTER_RUNNER_HOST", { CLUSTER_RUNNER_HOST: "two words" }],
    // The address other nodes dial (CONTRACT.md §1): "any address" reaches no node in particular (a
    // peer dialling 0.0.0.0 reaches itself), and a port typed here is such an address (0.0.19.136).
    ["CLUSTER_RUNNER_HOST", { CLUSTER_RUNNER_HOST: "0.0.0.0" }],
    ["CLUSTER_RUNNER_HOST", { CLUSTER_RUNNER_HOST: "::" }],
    ["CLUSTER_RUNNER_HOST", { CLUSTER_RUNNER_HOST: "::ffff:0.0.0.0" }],
    ["CLUSTER_RUNNER_HOST", { CLUSTER_RUNNER_HOST: "5000" }],
    ["CLUSTER_RUNNER_PORT", { PORT: "4723", CLUSTER_RUNNER_PORT: "4723" }],
    ["WEBHOOK_ALLOWED_HOSTS", { WEBHOOK_ALLOWED_HOSTS: "hooks.example.com,10.0.0.0/99" }],
    ["WEBHOOK_ALLOWED_HOSTS", { WEBHOOK_ALLOWED_HOSTS: "ht!tp" }],
    // An origin is scheme://host[:port]: a path, a wildcard or `*` among origins would never match.
    ["CORS_ALLOWED_ORIGINS", { CORS_ALLOWED_ORIGINS: "https://app.example.com/" }],
    ["CORS_ALLOWED_ORIGINS", { CORS_ALLOWED_ORIGINS: "https://*.example.com" }],
    ["CORS_ALLOWED_ORIGINS", { CORS_ALLOWED_ORIGINS: "app.example.com" }],
    ["CORS_ALLOWED_ORIGINS", { CORS_ALLOWED_ORIGINS: "*, https://app.example.com" }],
    ["CORS_ALLOWED_ORIGINS", { CORS_ALLOWED_ORIGINS: " , " }],
    ["DRAIN_REFUSE_MS", { DRAIN_REFUSE_MS: "-5" }],
    // Above setTimeout's limit, a timer fires at once (Node) or never (Effect).
    ["DRAIN_MAX_MS", { DRAIN_MAX_MS: "10000000000" }],
    ["DRAIN_MAX_MS", { DRAIN_MAX_MS: "2147483648" }],
    ["SSE_HEARTBEAT_MS", { SSE_HEARTBEAT_MS: "2147483648" }],
    ["CLUSTER_SHARD_LOCK_EXPIRATION_MS", { CLUSTER_SHARD_LOCK_EXPIRATION_MS: "2147483648" }],
    // A stream shorter than a second would resubscribe all the time; longer than a day, rarely catch a dead listener.
    ["CLUSTER_STREAM_LIFETIME_MS", { CLUSTER_STREAM_LIFETIME_MS: "999" }],
    ["CLUSTER_STREAM_LIFETIME_MS", { CLUSTER_STREAM_LIFETIME_MS: "86400001" }],
    // Added to now, these would not be timestamps (PostgreSQL "timestamp out of range", RangeError).
    ["API_KEY_ROTATION_GRACE_SECONDS", { API_KEY_ROTATION_GRACE_SECONDS: "10000000000000" }],
    ["CONVERSATION_IDLE_CLOSE_SECONDS", { CONVERSATION_IDLE_CLOSE_SECONDS: "10000000000000" }],
    ["TOKEN_TTL_SECONDS", { TOKEN_TTL_SECONDS: "315360001" }],
    // Check intervals are timers: at most 2147483 seconds.
    ["CONVERSATION_EXPIRY_CHECK_SECONDS", { CONVERSATION_EXPIRY_CHECK_SECONDS: "2147484" }],
    ["CONVERSATION_EXPIRY_CLOSES_PER_SECOND", { CONVERSATION_EXPIRY_CLOSES_PER_SECOND: "0" }],
    ["CONVERSATION_EXPIRY_CLOSES_PER_SECOND", { CONVERSATION_EXPIRY_CLOSES_PER_SECOND: "1001" }],
    ["PURGE_INTERVAL_SECONDS", { PURGE_INTERVAL_SECONDS: "3000000" }],
    ["AUDIT_RETENTION_DAYS", { AUDIT_RETENTION_DAYS: "3651" }],
    ["AUDIT_RETENTION_DAYS", { AUDIT_RETENTION_DAYS: "-1" }],
    ["UPLOAD_MAX_BYTES", { UPLOAD_MAX_BYTES: "1000000001" }],
    ["DRAIN_BATCH_SIZE", { DRAIN_BATCH_SIZE: "1000001" }],
    ["DATABASE_URL", { DATABASE_URL: "mysql://x" }],
    ["DATABASE_URL", { DATABASE_URL: "notaurl" }],
    ["DATABASE_URL", { DATABASE_URL: "postgres://u:p@db:port/parley" }],
    // Compared with the one word after `Bearer`: a token with a space could never match.
    ["ADMIN_API_TOKEN", { ADMIN_API_TOKEN: `${"a".repeat(20)} ${"b".repeat(20)}` }],
    ["ADMIN_API_TOKEN", { ADMIN_API_TOKEN: `${"a".repeat(32)}\n` }],
    ["METRICS_TOKEN", { METRICS_TOKEN: "metrics secret" }]
  ]
  for (const [variable, env] of invalid) {
    it.effect(`${variable}=${Object.values(env)[0]} fails naming ${variable}`, () =>
      Effect.gen(function*() {
        const error = yield* refusal(env)
        expect(namedVariables(error)).toEqual([variable])
        expect(String(error)).not.toContain("\n")
      }))
  }

  it.effect("a refused DATABASE_URL is not echoed: it may hold a password", () =>
    Effect.gen(function*() {
      const error = yield* refusal({ DATABASE_URL: "mysql://parley:hunter2@db/parley" })
      expect(String(error)).toContain("must be a postgres:// or postgresql:// URL")
      expect(String(error)).not.toContain("hunter2")
    }))

  it.effect("out of range values are refused with the allowed range", () =>
    Effect.gen(function*() {
      expect(String(yield* refusal({ DRAIN_MAX_MS: "10000000000" }))).toContain(
        "must be an integer from 1 to 2147483647"
      )
      expect(String(yield* refusal({ PORT: "65000" }))).toContain("CLUSTER_RUNNER_PORT")
    }))

  const refusedAtStart: ReadonlyArray<readonly [Record<string, string>, string]> = [
    [{ ADMIN_API_TOKEN: "short" }, "ADMIN_API_TOKEN: must be at least 32 characters"],
    [
      { CORS_ALLOWED_ORIGINS: "https://app.example.com,https://app.example.com/widget" },
      `CORS_ALLOWED_ORIGINS: malformed origin "https://app.example.com/widget" (must be * or origins like https://app.example.com)`
    ]
  ]
  for (const [env, line] of refusedAtStart) {
    it.live(`the process refuses ${Object.keys(env)[0]} with one stderr line naming the variable, exit 1`, () =>
      Effect.gen(function*() {
        const child = yield* spawnInRepo("npx", ["tsx", "src/main.ts"], env)
        expect(yield* child.exited).toBe(1)
        expect(programLines(child.stderr())).toEqual([`parley: invalid configuration: ${line}`])
        expect(child.stdout()).toBe("")
      }).pipe(Effect.scoped))
  }
})
