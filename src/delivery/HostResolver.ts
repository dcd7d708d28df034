import { Duration, Effect, Fiber } from "effect"
import { lookup, Resolver } from "node:dns/promises"
import { isIP } from "node:net"

/** Every lookup ends within this: a name whose DNS server never answers is a name that did not resolve. */
export const LOOKUP_BOUND = Duration.seconds(5)
/** c-ares asks each server twice, waiting this long and then twice as long. */
const QUERY_TIMEOUT_MS = 1000
const QUERY_TRIES = 2

/** `servers` (`host:port`): the DNS servers to ask instead of the system's (a test's, say). */
export interface HostResolverOptions {
  readonly servers?: ReadonlyArray<string>
}

/**
 * Names are asked over DNS through c-ares (event loop, time limit); one DNS cannot answer goes to
 * `getaddrinfo`, which holds a libuv pool thread, so one such lookup at a time (ADR 0017).
 */
export const hostResolver = (options: HostResolverOptions) =>
  Effect.gen(function*() {
    const dns = new Resolver({ timeout: QUERY_TIMEOUT_MS, tries: QUERY_TRIES })
    if (options.servers !== undefined) dns.setServers([...options.servers])
    const systemLookups = yield* Effect.makeSemaphore(1)

    const viaDns = (host: string) =>
      Effect.promise(() => Promise.allSettled([dns.resolve4(host), dns.resolve6(host)])).pipe(
        Effect.map((answers) => answers.flatMap((answer) => answer.status === "fulfilled" ? answer.value : []))
      )

    // The permit is given back when getaddrinfo returns, not when the caller stops waiting.
    const viaSystem = (host: string) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.zipRight(
          restore(systemLookups.take(1)),
          Effect.forkDaemon(
            Effect.tryPromise(() => lookup(host, { all: true, verbatim: true })).pipe(
              Effect.map((entries) => entries.map((entry) => entry.address)),
              Effect.ensuring(systemLookups.release(1))
            )
          )
        )
      ).pipe(Effect.flatMap(Fiber.join))

    /**
     * Every address of the host. A name that does not resolve (now), or not within the bound, has
     * none: the caller decides what that means.
     */
    const resolve = (host: string): Effect.Effect<ReadonlyArray<string>> =>
      isIP(host) !== 0 ? Effect.succeed([host]) : viaDns(host).pipe(
        Effect.filterOrFail((addresses) => addresses.length > 0),
        Effect.orElse(() => viaSystem(host)),
        Effect.timeout(LOOKUP_BOUND),
        Effect.orElseSucceed((): ReadonlyArray<string> => [])
      )
    return { resolve } as const
  })

/** Turns a host name into the addresses a request to it may reach, within a time limit. */
export class HostResolver extends Effect.Service<HostResolver>()("parley/HostResolver", {
  effect: hostResolver({})
}) {}
