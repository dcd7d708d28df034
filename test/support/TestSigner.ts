import { ConfigProvider, Layer } from "effect"
import { TokenSigner } from "../../src/auth/TokenSigner.js"
import { AppConfig } from "../../src/config/AppConfig.js"

/**
 * A TokenSigner of its own (not the node's) on the test node's database, configured by `env`:
 * each provide builds a new one, as another node would.
 */
export const TestSigner = (env: Record<string, string> = {}) =>
  TokenSigner.Default.pipe(
    Layer.provide(AppConfig.Default),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )
