import { Effect } from "effect"
import { lookup } from "node:dns/promises"

/** Turns a host name into the addresses a request to it may reach. */
export class HostResolver extends Effect.Service<HostResolver>()("parley/HostResolver", {
  succeed: {
    /**
     * Every address of the host, as the system resolver answers. A name that does not resolve
     * (now) has none: the guard decides what that means.
     */
    resolve: (host: string): Effect.Effect<ReadonlyArray<string>> =>
      Effect.tryPromise(() => lookup(host, { all: true, verbatim: true })).pipe(
        Effect.map((entries) => entries.map((entry) => entry.address)),
        Effect.orElseSucceed((): ReadonlyArray<string> => [])
      )
  }
}) {}
