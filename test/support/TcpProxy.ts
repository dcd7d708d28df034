import { Effect } from "effect"
import * as Net from "node:net"

/** Long enough for the server to finish (and commit) what it was sent. */
const LOST_ANSWER_CLOSE_MS = 500

/** A TCP proxy to a server that can be switched to accept connections and never answer them. */
export interface TcpProxy {
  readonly port: number
  /** From now on new connections are accepted and left without an answer; open ones are cut. */
  readonly blackhole: () => void
  /** From now on nothing listens on the port (connections are refused); open ones are cut. */
  readonly refuse: () => void
  /**
   * Forwards new connections again (after `refuse`, listening on the same port); after `freeze`,
   * delivers what was held and forwards again.
   */
  readonly restore: () => void
  /**
   * From now on nothing is delivered in either direction, on open and new connections alike, and
   * nothing is cut: a database that stopped answering (a frozen host, a silent link).
   */
  readonly freeze: () => void
  /**
   * The next connection to send bytes containing `marker` delivers them, gets no answer back and
   * is closed shortly after: the server has done the work, the client never hears of it.
   */
  readonly loseAnswerTo: (marker: string) => void
  /**
   * The next connection to send bytes containing `marker` holds them (or, given `from`, its first
   * bytes from then on that contain `from`), and whatever it sends after, until `release`: the
   * server gets the statement late, as from a stalled link or backend. The server side stays open
   * meanwhile, even when the client gives up and closes.
   */
  readonly holdFrom: (marker: string, from?: string) => void
  /**
   * Delivers what `holdFrom` held, and forwards that connection's bytes again (or, if its client
   * closed meanwhile, closes the server side shortly after). False when nothing was held.
   */
  readonly release: () => boolean
}

/** Starts a proxy on a free loopback port to `target`; it closes with the scope. */
export const tcpProxy = (target: { readonly host: string; readonly port: number }) =>
  Effect.acquireRelease(
    Effect.async<{ readonly proxy: TcpProxy; readonly server: Net.Server; readonly sockets: Set<Net.Socket> }>((resume) => {
      const sockets = new Set<Net.Socket>()
      let forwarding = true
      let refusing = false
      let frozen = false
      // While frozen, each connection's bytes wait here in order, per direction.
      const thawing = new Set<() => void>()
      const track = (socket: Net.Socket) => {
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
        socket.on("error", () => socket.destroy())
      }
      let marker: string | undefined
      let holdMarker: string | undefined
      let holdFromText: string | undefined
      let releaseHeld: (() => void) | undefined
      const server = Net.createServer((client) => {
        track(client)
        if (!forwarding) return
        const upstream = Net.connect(target.port, target.host)
        track(upstream)
        let muted = false
        let held: Array<Buffer> | undefined
        /** Set on the connection that sent the hold's marker: the text its held bytes start with. */
        let holdArmed: string | undefined
        let clientClosed = false
        /** Writes `chunk` to `to` now, or once the proxy thaws. */
        const pass = (to: Net.Socket, chunk: Buffer) => {
          if (frozen) thawing.add(() => to.write(chunk))
          else to.write(chunk)
        }
        client.on("data", (chunk: Buffer) => {
          if (holdMarker !== undefined && chunk.includes(holdMarker)) {
            holdArmed = holdFromText ?? holdMarker
            holdMarker = undefined
            holdFromText = undefined
          }
          if (holdArmed !== undefined && chunk.includes(holdArmed)) {
            holdArmed = undefined
            held = []
            releaseHeld = () => {
              for (const part of held ?? []) upstream.write(part)
              held = undefined
              if (clientClosed) setTimeout(() => upstream.destroy(), LOST_ANSWER_CLOSE_MS)
            }
          }
          if (held !== undefined) {
            held.push(chunk)
            return
          }
          pass(upstream, chunk)
          if (marker !== undefined && chunk.includes(marker)) {
            marker = undefined
            muted = true
            setTimeout(() => client.destroy(), LOST_ANSWER_CLOSE_MS)
          }
        })
        upstream.on("data", (chunk: Buffer) => {
          if (!muted) pass(client, chunk)
        })
        // What is held still goes to the server on `release`: the statement arrives late, not never.
        client.on("close", () => {
          clientClosed = true
          muted = true
          if (held === undefined) upstream.destroy()
        })
        upstream.on("close", () => client.destroy())
      })
      server.listen(0, "127.0.0.1", () => {
        const proxy: TcpProxy = {
          port: (server.address() as Net.AddressInfo).port,
          blackhole: () => {
            forwarding = false
            for (const socket of sockets) socket.destroy()
          },
          refuse: () => {
            refusing = true
            server.close()
            for (const socket of sockets) socket.destroy()
          },
          restore: () => {
            if (refusing) server.listen(proxy.port, "127.0.0.1")
            refusing = false
            forwarding = true
            frozen = false
            for (const deliver of thawing) deliver()
            thawing.clear()
          },
          freeze: () => {
            frozen = true
          },
          loseAnswerTo: (text) => {
            marker = text
          },
          holdFrom: (text, from) => {
            holdMarker = text
            holdFromText = from
          },
          release: () => {
            const delivering = releaseHeld
            releaseHeld = undefined
            delivering?.()
            return delivering !== undefined
          }
        }
        resume(Effect.succeed({ proxy, server, sockets }))
      })
    }),
    ({ server, sockets }) =>
      Effect.async<void>((resume) => {
        for (const socket of sockets) socket.destroy()
        server.close(() => resume(Effect.void))
      })
  ).pipe(Effect.map(({ proxy }) => proxy))
