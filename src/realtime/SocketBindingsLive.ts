import { Layer } from "effect"
import { SocketBindings } from "./SocketEndpoints.js"

/** The socket bindings the node serves. */
export const SocketBindingsLive = Layer.succeed(SocketBindings, [])
