import { Effect } from "effect"
import { Counter, Gauge, Histogram, Registry } from "prom-client"

/**
 * The node's Prometheus registry (CONTRACT.md §9). Other services register their own series here;
 * the registry is per node instance, never global, so several nodes can share one process in tests.
 */
export class Metrics extends Effect.Service<Metrics>()("parley/Metrics", {
  sync: () => {
    const registry = new Registry()
    const httpRequests = new Counter({
      name: "parley_http_requests_total",
      help: "HTTP requests by route template, method and status",
      labelNames: ["route", "method", "status"] as const,
      registers: [registry]
    })
    const httpDuration = new Histogram({
      name: "parley_http_request_duration_seconds",
      help: "HTTP request duration by route template, method and status",
      labelNames: ["route", "method", "status"] as const,
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registers: [registry]
    })
    /** A gauge read from `read` at every scrape. */
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [registry],
        collect() {
          this.set(read())
        }
      })
    const observeRequest = (route: string, method: string, status: number, seconds: number) => {
      const labels = { route, method, status: String(status) }
      httpRequests.inc(labels)
      httpDuration.observe(labels, seconds)
    }
    /** A request answered before any route saw it (no duration: it was never timed). */
    const countUnrouted = (route: "unparsed" | "stopping", method: string, status: number) =>
      httpRequests.inc({ route, method, status: String(status) })
    const render = Effect.promise(() => registry.metrics())
    return { registry, gauge, observeRequest, countUnrouted, render, contentType: registry.contentType } as const
  }
}) {}
