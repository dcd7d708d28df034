import { Effect, Either } from "effect"
import { BadRequest } from "../../domain/ApiError.js"
import { DeprecationWarnings } from "../../http/DeprecationWarnings.js"
import type { SocketBinding } from "../SocketEndpoints.js"
import { LegacyNames, PhoenixNames } from "./PhoenixDialect.js"
import { makePhoenixSession } from "./PhoenixSession.js"

/** The one Phoenix protocol version spoken (CONTRACT.md §6); the JS client sends it as `?vsn=`. */
export const PHOENIX_VSN = "2.0.0"

/**
 * The upgrade check: a `vsn` other than 2.0.0 is refused 400 `bad_request` before the upgrade (an absent
 * one is taken as 2.0.0). The JS client offers no subprotocol; `phoenix` is taken when offered.
 */
const protocol = (offered: ReadonlyArray<string>, query: URLSearchParams) => {
  const vsn = query.get("vsn")
  if (vsn !== null && vsn !== PHOENIX_VSN) {
    return Either.left(new BadRequest({ message: `unsupported vsn: this endpoint speaks the Phoenix protocol ${PHOENIX_VSN}` }))
  }
  return Either.right(offered.includes("phoenix") ? "phoenix" : "")
}

/** The Phoenix-channel binding at /socket/chat/websocket (client-api.md "Sockets"). */
export const makePhoenixBinding = Effect.map(makePhoenixSession(PhoenixNames), (serve): SocketBinding => ({
  name: "phoenix",
  protocol,
  serve
}))

/**
 * The deprecated binding at /socket/websocket: the same session in the legacy names; each connection
 * logs the deprecation warning (once a minute per channel, as every deprecated surface).
 */
export const makeLegacyBinding = Effect.gen(function*() {
  const serve = yield* makePhoenixSession(LegacyNames)
  const warnings = yield* DeprecationWarnings
  return {
    name: "legacy",
    protocol,
    serve: (socket) => Effect.zipRight(warnings.warn("legacy socket /socket/websocket", socket.principal.channelId), serve(socket))
  } satisfies SocketBinding
})
