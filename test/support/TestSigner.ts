import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { TokenSigner } from "../../src/auth/TokenSigner.js"
import { AppConfig } from "../../src/config/AppConfig.js"
import { TestDatabase } from "./TestDatabase.js"

/**
 * A TokenSigner of its own (not the node's) on the test file's database, configured by `env`:
 * each provide builds a new one, as another node would.
 */
export const TestSigner = (env: Record<string, string> = {}) =>
  Layer.unwrapEffect(
    Effect.map(TestDatabase, ({ url }) =>
      url === undefined
        ? Layer.die("a second signer needs DATABASE_URL")
        : TokenSigner.Default.pipe(
          Layer.provide(AppConfig.Default),
          Layer.provide(PgClient.layer({ url: Redacted.make(url), maxConnections: 2 })),
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
        ))
  )
