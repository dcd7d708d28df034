import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { dryRun } from "../routing/DryRun.js"
import type { RoutingRuleId, RoutingRuleInput } from "../routing/RoutingRule.js"
import { RoutingRules } from "../routing/RoutingRules.js"
import { ParleyApi } from "./ParleyApi.js"
import { requireScope } from "./TenantAuth.js"

/** The `routingRules` group: `manage` to write, `read` to read and dry-run; the tenant comes from the credential. */
export const RoutingRulesHandlers = HttpApiBuilder.group(ParleyApi, "routingRules", (handlers) =>
  Effect.gen(function*() {
    const rules = yield* RoutingRules
    const sql = yield* SqlClient.SqlClient
    const update = ({ path, payload }: {
      readonly path: { readonly id: RoutingRuleId }
      readonly payload: { readonly routing_rule: RoutingRuleInput }
    }) =>
      Effect.gen(function*() {
        const credential = yield* requireScope("manage")
        return { data: yield* rules.update(credential, path.id, payload.routing_rule) }
      })
    return handlers
      .handle("listRoutingRules", () =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          return { data: yield* rules.list(credential) }
        }))
      .handle("createRoutingRule", ({ payload }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("manage")
          return { data: yield* rules.create(credential, payload.routing_rule) }
        }))
      .handle("dryRunRoutingRules", ({ payload }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          const data = yield* dryRun(credential, payload).pipe(
            Effect.provideService(RoutingRules, rules),
            Effect.provideService(SqlClient.SqlClient, sql)
          )
          return { data }
        }))
      .handle("getRoutingRule", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("read")
          return { data: yield* rules.get(credential, path.id) }
        }))
      .handle("putRoutingRule", update)
      .handle("patchRoutingRule", update)
      .handle("deleteRoutingRule", ({ path }) =>
        Effect.gen(function*() {
          const credential = yield* requireScope("manage")
          yield* rules.remove(credential, path.id)
        }))
  }))
