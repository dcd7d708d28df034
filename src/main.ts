import { NodeRuntime } from "@effect/platform-node"
import { Cause, ConfigError, Console, Effect, Layer, Runtime } from "effect"
import { AppConfig } from "./config/AppConfig.js"
import { LoggingLive, NodeLive } from "./NodeLive.js"

/** One entry per problem: `PORT: Expected an integer value but received abc`. */
const problems = (error: ConfigError.ConfigError): ReadonlyArray<string> => {
  switch (error._op) {
    case "And":
    case "Or":
      return [...problems(error.left), ...problems(error.right)]
    case "InvalidData":
    case "MissingData":
    case "SourceUnavailable":
    case "Unsupported":
      return [`${error.path.join(".")}: ${error.message.replace(/\s*\n\s*/g, " ")}`]
  }
}

/**
 * After a stop signal the process exits within `DRAIN_MAX_MS`. The listeners stay: `runMain` takes the
 * first signal only, and a repeated one would end the process mid-drain with 143 or 130, not 0.
 */
const armDrainDeadline = Effect.gen(function*() {
  const { drainMaxMs } = yield* AppConfig
  let armed = false
  const arm = () => {
    if (armed) return
    armed = true
    setTimeout(() => process.exit(0), drainMaxMs).unref()
  }
  process.on("SIGTERM", arm)
  process.on("SIGINT", arm)
})

/**
 * An uncaught exception or unhandled rejection ends the process with exit 1, logged in our format first;
 * its state is unknown then, so it does not drain and the cluster fails its conversations over.
 */
const exitOnUncaughtException = Effect.gen(function*() {
  const runSync = Runtime.runSync(yield* Effect.runtime<never>())
  process.on("uncaughtException", (error) => {
    runSync(Effect.logFatal("uncaught exception, the process exits", Cause.die(error)))
    process.exit(1)
  })
}).pipe(Effect.provide(LoggingLive))

const program = Effect.gen(function*() {
  yield* armDrainDeadline
  yield* exitOnUncaughtException
  return yield* Layer.launch(NodeLive.pipe(Layer.provide(LoggingLive)))
}).pipe(
  // No trace exporter is configured, so spans (the HTTP server's, the cluster's) would only cost
  // allocations on every request.
  Effect.withTracerEnabled(false),
  Effect.provide(AppConfig.Default),
  Effect.catchIf(ConfigError.isConfigError, (error) =>
    // One line, each problem once: a variable read by two settings (PORT) fails in both.
    Console.error(`parley: invalid configuration: ${[...new Set(problems(error))].join("; ")}`).pipe(
      Effect.zipRight(Effect.sync(() => process.exit(1)))
    ))
)

// A variable set to nothing or blanks counts as unset (docs/configuration.md). Libraries that read the
// environment themselves see it the same way: the cluster reads HOST and PORT, and an empty HOST
// stopped the node.
for (const [name, value] of Object.entries(process.env)) {
  if (value !== undefined && value.trim() === "") delete process.env[name]
}

NodeRuntime.runMain(program, { disablePrettyLogger: true })
