import { Effect, Layer } from "effect"
import { makeNativeBinding } from "./native/NativeSocket.js"
import { makeLegacyBinding, makePhoenixBinding } from "./phoenix/PhoenixBinding.js"
import { SocketBindings } from "./SocketEndpoints.js"

/** The socket bindings the node serves. */
export const SocketBindingsLive = Layer.effect(SocketBindings, Effect.all([makePhoenixBinding, makeNativeBinding, makeLegacyBinding]))
