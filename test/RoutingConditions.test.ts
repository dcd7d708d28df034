import { describe, expect, it } from "@effect/vitest"
import { compileCondition, evaluate, type RoutingSubject } from "../src/routing/Conditions.js"
import { closesCycle } from "../src/routing/RuleValidation.js"
import { MAX_REGEX_INPUT } from "../src/routing/RegexScreen.js"

const subject = (over: Partial<RoutingSubject> = {}): RoutingSubject => ({
  activity: { type: "message", text: "Hello refund please", sender: "user", message_type: null, metadata: { lang: "fr", n: 5, tags: ["vip"], deep: { a: { b: 1 } } } },
  conversation: { metadata: { plan: "gold" } },
  participant: { external_id: "+331", display_name: "Ana", metadata: { tier: 2 } },
  // A Sunday, 22:30 UTC.
  at: new Date("2026-11-29T22:30:00Z"),
  ...over
})

/** Compiles a condition and returns the reported problems as `path: message`. */
const problemsOf = (input: unknown) => {
  const found: Array<string> = []
  compileCondition(input, (path, message) => found.push(`${path}: ${message}`))
  return found
}

const holds = (input: unknown, s: RoutingSubject = subject()) => {
  expect(problemsOf(input)).toEqual([])
  return evaluate(compileCondition(input, () => undefined), s)
}

describe("routing conditions: validation", () => {
  it("accepts every field and op of CONTRACT.md §8", () => {
    const fields = ["activity.type", "activity.text", "activity.sender", "activity.message_type", "activity.metadata.a.b",
      "conversation.metadata.x", "participant.external_id", "participant.display_name", "participant.metadata.y",
      "time.hour", "time.weekday", "time.date"]
    for (const field of fields) expect(problemsOf({ field, op: "exists" })).toEqual([])
    const ops: Array<[string, unknown]> = [["eq", 1], ["neq", "x"], ["in", [1]], ["not_in", []], ["contains", "a"],
      ["starts_with", "a"], ["ends_with", "a"], ["regex", "^a"], ["exists", false], ["gt", 1], ["gte", "2026-01-01"], ["lt", 3], ["lte", 4]]
    for (const [op, value] of ops) expect(problemsOf({ field: "activity.text", op, value }), op).toEqual([])
  })

  it("reports problems at their path", () => {
    expect(problemsOf({ all: [{ field: "activity.text", op: "eq", value: 1 }, { field: "activity.text", op: "like", value: 1 }] }))
      .toEqual([expect.stringMatching(/^conditions\.all\[1\]\.op: must be one of/)])
    expect(problemsOf([{ field: "activity.nope", op: "eq", value: 1 }])).toEqual([expect.stringMatching(/^conditions\[0\]\.field: must be one of/)])
    expect(problemsOf({ any: [{ not: { field: "activity.text", op: "in", value: "x" } }] }))
      .toEqual(["conditions.any[0].not.value: must be an array"])
    expect(problemsOf({ all: [], any: [] })).toEqual(["conditions: must have only one of all, any, not"])
    expect(problemsOf({ field: "activity.metadata.", op: "exists" })).toEqual([expect.stringMatching(/^conditions\.field: must name a key/)])
    expect(problemsOf({ field: "activity.text" })).toEqual(["conditions.op: is required"])
    expect(problemsOf({ field: "activity.text", op: "eq" })).toEqual(["conditions.value: is required"])
    expect(problemsOf("text")).toEqual(["conditions: must be an object or an array"])
    expect(problemsOf({ bogus: 1 })).toEqual([expect.stringMatching(/^conditions\.bogus: is not a condition key/)])
  })

  it("refuses a regex over 256 bytes, one that does not compile and one that can backtrack catastrophically", () => {
    expect(problemsOf({ field: "activity.text", op: "regex", value: "a".repeat(256) })).toEqual([])
    expect(problemsOf({ field: "activity.text", op: "regex", value: "é".repeat(129) })).toEqual([expect.stringMatching(/at most 256 bytes/)])
    expect(problemsOf({ field: "activity.text", op: "regex", value: "(" })).toEqual([expect.stringMatching(/valid regular expression/)])
    expect(problemsOf({ field: "activity.text", op: "regex", value: "(a+)+$" })).toEqual([expect.stringMatching(/backtrack catastrophically/)])
    expect(problemsOf({ field: "activity.text", op: "regex", value: "^(\\w+\\s?)*$" })).toEqual([expect.stringMatching(/backtrack/)])
  })

  it("bounds nesting and size", () => {
    let deep: unknown = { field: "activity.text", op: "exists" }
    for (let i = 0; i < 12; i++) deep = { not: deep }
    expect(problemsOf(deep)[0]).toMatch(/nest at most/)
    expect(problemsOf({ any: Array.from({ length: 150 }, () => ({ field: "activity.text", op: "exists" })) })[0]).toMatch(/at most 100 parts/)
  })
})

describe("routing conditions: evaluation", () => {
  it("an empty object, an empty array and an empty all match everything; an empty any nothing", () => {
    expect(holds({})).toBe(true)
    expect(holds([])).toBe(true)
    expect(holds({ any: [] })).toBe(false)
  })

  it("evaluates each op", () => {
    expect(holds({ field: "activity.type", op: "eq", value: "message" })).toBe(true)
    expect(holds({ field: "activity.type", op: "neq", value: "message" })).toBe(false)
    expect(holds({ field: "activity.message_type", op: "neq", value: "card" })).toBe(true)
    expect(holds({ field: "activity.metadata.lang", op: "in", value: ["en", "fr"] })).toBe(true)
    expect(holds({ field: "activity.metadata.lang", op: "not_in", value: ["en", "fr"] })).toBe(false)
    expect(holds({ field: "activity.text", op: "contains", value: "refund" })).toBe(true)
    expect(holds({ field: "activity.metadata.tags", op: "contains", value: "vip" })).toBe(true)
    expect(holds({ field: "activity.text", op: "starts_with", value: "Hello" })).toBe(true)
    expect(holds({ field: "activity.text", op: "ends_with", value: "Hello" })).toBe(false)
    expect(holds({ field: "activity.text", op: "regex", value: "ref(u|o)nd" })).toBe(true)
    expect(holds({ field: "activity.metadata.deep.a.b", op: "eq", value: 1 })).toBe(true)
    expect(holds({ field: "activity.metadata.missing", op: "exists" })).toBe(false)
    expect(holds({ field: "activity.metadata.missing", op: "exists", value: false })).toBe(true)
    expect(holds({ field: "activity.metadata.n", op: "gt", value: 4 })).toBe(true)
    expect(holds({ field: "activity.metadata.n", op: "gte", value: 5 })).toBe(true)
    expect(holds({ field: "activity.metadata.n", op: "lt", value: 5 })).toBe(false)
    expect(holds({ field: "activity.metadata.n", op: "lte", value: 5 })).toBe(true)
    // Different types never compare.
    expect(holds({ field: "activity.metadata.n", op: "lt", value: "9" })).toBe(false)
    expect(holds({ field: "conversation.metadata.plan", op: "eq", value: "gold" })).toBe(true)
    expect(holds({ field: "participant.display_name", op: "eq", value: "Ana" })).toBe(true)
    expect(holds({ field: "participant.metadata.tier", op: "gte", value: 2 })).toBe(true)
    expect(holds({ field: "participant.external_id", op: "exists" }, subject({ participant: null }))).toBe(false)
  })

  it("reads time in UTC: hour, weekday 1 Monday to 7 Sunday, date", () => {
    expect(holds({ field: "time.hour", op: "eq", value: 22 })).toBe(true)
    expect(holds({ field: "time.weekday", op: "eq", value: 7 })).toBe(true)
    expect(holds({ field: "time.weekday", op: "eq", value: 1 }, subject({ at: new Date("2026-11-30T00:00:00Z") }))).toBe(true)
    expect(holds({ field: "time.date", op: "eq", value: "2026-11-29" })).toBe(true)
    expect(holds({ field: "time.date", op: "lt", value: "2026-12-01" })).toBe(true)
  })

  it("combines groups", () => {
    const c = { all: [{ field: "activity.type", op: "eq", value: "message" }, { not: { any: [{ field: "time.hour", op: "lt", value: 8 }, { field: "time.hour", op: "gte", value: 23 }] } }] }
    expect(holds(c)).toBe(true)
    expect(holds(c, subject({ at: new Date("2026-11-29T23:10:00Z") }))).toBe(false)
  })

  it("runs a regex on a bounded prefix of the text only", () => {
    const text = "a".repeat(MAX_REGEX_INPUT) + "needle"
    expect(holds({ field: "activity.text", op: "regex", value: "needle" }, subject({ activity: { ...subject().activity, text } }))).toBe(false)
    expect(holds({ field: "activity.text", op: "contains", value: "needle" }, subject({ activity: { ...subject().activity, text } }))).toBe(true)
  })
})

describe("cycle detection", () => {
  it("finds a cycle through other rules and none in a chain", () => {
    expect(closesCycle([{ source: "b", targets: ["c"] }, { source: "c", targets: ["a"] }], "a", ["b"])).toBe(true)
    expect(closesCycle([{ source: "b", targets: ["c"] }], "a", ["b"])).toBe(false)
    expect(closesCycle([{ source: "b", targets: ["a"] }], "a", ["b"])).toBe(true)
  })
})
