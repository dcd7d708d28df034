import { Effect } from "effect"
import { Counter, Gauge } from "prom-client"
import { Metrics } from "../ops/Metrics.js"

/** The live transports: the three socket bindings and the event stream. */
export type Binding = "phoenix" | "native" | "legacy" | "sse"

/** The realtime series of CONTRACT.md §9: open sockets and streams, frames, the closes that matter, drops. */
export class RealtimeMetrics extends Effect.Service<RealtimeMetrics>()("parley/RealtimeMetrics", {
  effect: Effect.gen(function*() {
    const { gauge, registry } = yield* Metrics
    const open: Record<Binding, number> = { phoenix: 0, native: 0, legacy: 0, sse: 0 }
    new Gauge({
      name: "parley_open_sockets",
      help: "Open WebSockets by binding",
      labelNames: ["binding"] as const,
      registers: [registry],
      collect() {
        for (const binding of ["phoenix", "native", "legacy"] as const) this.set({ binding }, open[binding])
      }
    })
    gauge("parley_open_sse_streams", "Open Server-Sent Events streams", () => open.sse)
    const frames = new Counter({
      name: "parley_socket_frames_total",
      help: "Frames received (in) and sent (out) by binding",
      labelNames: ["binding", "direction"] as const,
      registers: [registry]
    })
    const closes = new Counter({
      name: "parley_socket_closes_total",
      help: "Sockets the server closed, by close code (4503 slow consumer, 1012 drain, ...)",
      labelNames: ["binding", "code"] as const,
      registers: [registry]
    })
    const dropped = new Counter({
      name: "parley_ephemeral_frames_dropped_total",
      help: "Typing and presence frames dropped for lagging listeners",
      labelNames: ["binding"] as const,
      registers: [registry]
    })
    return {
      opened: (binding: Binding) => {
        open[binding]++
      },
      closed: (binding: Binding) => {
        open[binding]--
      },
      openCount: (binding: Binding) => open[binding],
      frameIn: (binding: Binding) => frames.inc({ binding, direction: "in" }),
      frameOut: (binding: Binding) => frames.inc({ binding, direction: "out" }),
      closedWith: (binding: Binding, code: number) => closes.inc({ binding, code: String(code) }),
      droppedEphemeral: (binding: Binding) => dropped.inc({ binding })
    } as const
  })
}) {}
