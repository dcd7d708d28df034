import { describe, expect, it } from "@effect/vitest"
import { applyTransformations, truncateUtf8 } from "../src/routing/Transformations.js"
import { validateTransformations } from "../src/routing/TransformationValidation.js"
import { type PlannedRule, planRouting } from "../src/routing/RoutingPlan.js"
import { compileCondition } from "../src/routing/Conditions.js"
import { MAX_REGEX_INPUT } from "../src/routing/RegexScreen.js"

const activity = { type: "message", sender: "user", message_type: null, text: "card 4111 and 4222", metadata: { a: 1, b: 2 }, source_channel_id: null as string | null }

describe("transformations", () => {
  it("apply in order to a copy", () => {
    const original = structuredClone(activity)
    const out = applyTransformations(activity, [
      { type: "set_metadata", key: "c", value: { x: 1 } },
      { type: "remove_metadata", key: "a" },
      { type: "redact_text", pattern: "\\d{4}", replacement: "####" },
      { type: "prefix_text", value: "[fwd] " },
      { type: "truncate_text", max_bytes: 15 }
    ])
    expect(out.text).toBe("[fwd] card ####")
    expect(out.metadata).toEqual({ b: 2, c: { x: 1 } })
    expect(activity).toEqual(original)
  })

  it("truncate_text never splits a character", () => {
    expect(truncateUtf8("aé", 2)).toBe("a")
    expect(truncateUtf8("a😀b", 4)).toBe("a")
    expect(truncateUtf8("a😀b", 5)).toBe("a😀")
    expect(truncateUtf8("abc", 3)).toBe("abc")
  })

  it("redact_text works on long text in bounded slices", () => {
    const text = "x".repeat(MAX_REGEX_INPUT * 2 + 10) + " 1234"
    expect(applyTransformations({ ...activity, text }, [{ type: "redact_text", pattern: "\\d+", replacement: "#" }]).text).toBe("x".repeat(MAX_REGEX_INPUT * 2 + 10) + " #")
  })

  it("validation screens redact_text patterns like regex conditions", () => {
    const problems: Array<string> = []
    validateTransformations([
      { type: "redact_text", pattern: "(a*)*b", replacement: "" },
      { type: "redact_text", pattern: "x".repeat(257), replacement: "" },
      { type: "redact_text", pattern: "\\d+", replacement: "#" },
      { type: "shout" }
    ], (path, message) => problems.push(`${path}: ${message}`))
    expect(problems).toEqual([
      expect.stringMatching(/^\[0\]\.pattern: may backtrack/),
      expect.stringMatching(/^\[1\]\.pattern: must be at most 256 bytes/),
      expect.stringMatching(/^\[3\]\.type: must be one of/)
    ])
  })
})

const rule = (over: Partial<PlannedRule> & { id: string }): PlannedRule => ({
  name: over.id,
  source_channel_id: "origin",
  target_channel_ids: ["t1"],
  enabled: true,
  priority: 100,
  stop_processing: false,
  conditions: {},
  condition: compileCondition(over.conditions ?? {}, () => undefined),
  transformations: [],
  ...over
})
const channel = (id: string, over: Record<string, unknown> = {}) =>
  [id, { id, mode: "duplex" as const, status: "active" as const, transformations: [], ...over }] as const

describe("routing plan", () => {
  const channels = new Map([
    channel("origin"),
    channel("t1", { transformations: [{ type: "prefix_text", value: "A:" }] }),
    channel("t2"),
    channel("t3", { status: "inactive" }),
    channel("in", { mode: "inbound" })
  ])
  const base = { conversation: { origin_channel_id: "origin", metadata: {} }, participant: null, at: new Date(), channels }

  it("orders by priority, applies the channel's chain then the rule's, stops on stop_processing", () => {
    const plan = planRouting({
      ...base,
      activity,
      rules: [
        rule({ id: "late", priority: 200, target_channel_ids: ["t2"] }),
        rule({ id: "first", priority: -5, transformations: [{ type: "prefix_text", value: "B:" }], stop_processing: true }),
        rule({ id: "never", priority: 0, conditions: { field: "activity.type", op: "eq", value: "event" }, target_channel_ids: ["t2"] }),
        rule({ id: "off", priority: -10, enabled: false, target_channel_ids: ["t2"] }),
        rule({ id: "other", source_channel_id: "t2", target_channel_ids: ["t1"] })
      ]
    })
    expect(plan.direction).toBe("inbound")
    expect(plan.rule_source_channel_id).toBe("origin")
    expect(plan.rules.map((r) => [r.rule.id, r.result])).toEqual([["first", "matched"], ["never", "skipped"], ["late", "skipped"]])
    expect(plan.deliveries.map((d) => [d.channel_id, d.rule_id, d.activity.text])).toEqual([
      ["origin", null, activity.text],
      ["t1", "first", "B:A:" + activity.text]
    ])
  })

  it("skips inactive, inbound-only and duplicate targets and the source", () => {
    const plan = planRouting({
      ...base,
      activity: { ...activity, source_channel_id: "origin" },
      rules: [rule({ id: "r", target_channel_ids: ["t3", "in", "t1", "gone"] }), rule({ id: "s", target_channel_ids: ["t1"] })]
    })
    expect(plan.deliveries.map((d) => d.channel_id)).toEqual(["t1"])
    expect(plan.rules[0]!.targets.map((t) => t.result)).toEqual(["inactive", "inbound_only", "delivered", "unknown_channel"])
    expect(plan.rules[1]!.targets.map((t) => t.result)).toEqual(["duplicate"])
  })

  it("a reply from another channel goes back to the origin only, never through rules", () => {
    const plan = planRouting({ ...base, activity: { ...activity, source_channel_id: "t1" }, rules: [rule({ id: "r", target_channel_ids: ["t2"] })] })
    expect(plan.direction).toBe("outbound")
    expect(plan.rule_source_channel_id).toBeNull()
    expect(plan.rules).toEqual([])
    expect(plan.deliveries.map((d) => d.channel_id)).toEqual(["origin"])
  })
})
