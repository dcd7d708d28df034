import { RunnerAddress, SingleRunner } from "@effect/cluster"
import { NodeClusterSocket } from "@effect/platform-node"
import { Duration, Effect, Layer, Option } from "effect"
import { isIP, isIPv6 } from "node:net"
import { AppConfig } from "../src/config/AppConfig.js"
import { DatabasePool } from "../src/db/Database.js"
import { HostResolver } from "../src/delivery/HostResolver.js"
import { SerialReservationsLive } from "../src/db/SerialReservations.js"
import { oneNodeAtATime } from "../src/db/SetupLock.js"

const RESOLVE_TIMEOUT = Duration.seconds(5)

const isLoopback = (host: string) => host === "localhost" || host.startsWith("127.") || host === "::1"

/**
 * Where the runner listens, given the advertised host and, for a name, the addresses it resolves
 * to: the host itself on loopback, else every interface of the family peers dial. An IPv6 address,
 * or a name with IPv6 addresses only (an IPv6-only cluster), needs `::`: on 0.0.0.0 (IPv4 only) no
 * peer could reach it. A name that does not resolve (yet) keeps 0.0.0.0.
 */
export const runnerListenHost = (host: string, addresses: ReadonlyArray<string>) =>
  isLoopback(host)
    ? host
    : isIPv6(host) || (isIP(host) === 0 && addresses.length > 0 && addresses.every(isIPv6))
    ? "::"
    : "0.0.0.0"

/**
 * This node's cluster runner. With PostgreSQL: a socket runner on `CLUSTER_RUNNER_PORT` whose shard
 * locks and messages live in the same database. The embedded database serves one node only, so
 * there it is a single runner without sockets or advisory locks.
 */
export const ClusterLive = Layer.unwrapEffect(
  Effect.gen(function*() {
    const config = yield* AppConfig
    const { embedded } = yield* DatabasePool
    const host = config.clusterRunnerHost
    const address = RunnerAddress.make(host, config.clusterRunnerPort)
    // Bounded: a resolver that does not answer must not hold the start up (the name then keeps 0.0.0.0).
    const resolved = isIP(host) === 0 && !isLoopback(host)
      ? yield* (yield* HostResolver).resolve(host).pipe(
        Effect.timeout(RESOLVE_TIMEOUT),
        Effect.orElseSucceed((): ReadonlyArray<string> => [])
      )
      : []
    const shardingConfig = {
      // Explicit: left to the environment, the runner would read the generic HOST and PORT.
      runnerAddress: Option.some(address),
      runnerListenAddress: Option.some(RunnerAddress.make(runnerListenHost(host, resolved), config.clusterRunnerPort)),
      shardLockExpiration: Duration.millis(config.clusterShardLockExpirationMs),
      // Calls to entities on this node skip a msgpack round trip; remote calls are encoded anyway.
      simulateRemoteSerialization: false,
      entityTerminationTimeout: Duration.millis(config.clusterEntityTerminationTimeoutMs)
    }
    return embedded
      ? SingleRunner.layer({ shardingConfig, runnerStorage: "memory" })
      : oneNodeAtATime(
        // Its shard-lock operations share one reserved connection from concurrent fibers (ADR 0013).
        NodeClusterSocket.layer({ storage: "sql", serialization: "msgpack", shardingConfig }).pipe(
          Layer.provide(SerialReservationsLive)
        )
      )
  })
).pipe(Layer.provide(HostResolver.Default))
