import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { decodeWatermark, encodeWatermark, Position } from "../src/domain/Watermark.js"
import { encodePhoenixMessage, parsePhoenixMessage, phoenixReply } from "../src/realtime/phoenix/PhoenixMessage.js"

describe("PhoenixMessage", () => {
  it("reads the five-element array of protocol 2.0.0 and writes it back unchanged", () => {
    const text = JSON.stringify(["3", "7", "chat:conversation:abc", "phx_join", { watermark: "x" }])
    const parsed = parsePhoenixMessage(text)
    expect(parsed).toEqual(Either.right({ joinRef: "3", ref: "7", topic: "chat:conversation:abc", event: "phx_join", payload: { watermark: "x" } }))
    expect(encodePhoenixMessage(Either.getOrThrow(parsed))).toBe(text)
  })

  it("takes null refs (heartbeats, server events)", () => {
    expect(parsePhoenixMessage(JSON.stringify([null, "1", "phoenix", "heartbeat", {}]))).toEqual(
      Either.right({ joinRef: null, ref: "1", topic: "phoenix", event: "heartbeat", payload: {} })
    )
  })

  it("refuses every malformed shape without throwing, keeping the ref and topic when they were readable", () => {
    const cases: ReadonlyArray<readonly [string, string, string | null, string | null]> = [
      ["not json", "invalid_json", null, null],
      ["", "invalid_json", null, null],
      ["{}", "not_a_message", null, null],
      ["null", "not_a_message", null, null],
      ["[]", "not_a_message", null, null],
      ['[null, "1", "t", "e"]', "not_a_message", null, null],
      ['[null, "1", "t", "e", {}, 6]', "not_a_message", null, null],
      ['[1, "1", "t", "e", {}]', "invalid_ref", "1", "t"],
      ['[null, 1, "t", "e", {}]', "invalid_ref", null, null],
      ['[null, "1", 5, "e", {}]', "invalid_topic", "1", null],
      ['[null, "1", "", "e", {}]', "invalid_topic", "1", null],
      ['[null, "1", "t", null, {}]', "invalid_event", "1", "t"],
      ['[null, "1", "t", "e", []]', "invalid_payload", "1", "t"],
      ['[null, "1", "t", "e", "text"]', "invalid_payload", "1", "t"],
      ['[null, "1", "t", "e", null]', "invalid_payload", "1", "t"],
      [JSON.stringify([null, "1", "t".repeat(300), "e", {}]), "invalid_topic", "1", null],
      [JSON.stringify([null, "9".repeat(100), "t", "e", {}]), "invalid_ref", null, null]
    ]
    for (const [text, reason, ref, topic] of cases) {
      const parsed = parsePhoenixMessage(text)
      expect(Either.isLeft(parsed), text).toBe(true)
      expect(Either.getLeft(parsed).pipe((left) => left._tag === "Some" ? left.value : undefined), text).toMatchObject({ reason, ref, topic })
    }
  })

  it("survives random bytes and random arrays", () => {
    for (let i = 0; i < 2000; i++) {
      const bytes = Buffer.from(Array.from({ length: Math.floor(Math.random() * 40) }, () => Math.floor(Math.random() * 256)))
      expect(() => parsePhoenixMessage(bytes.toString("utf8"))).not.toThrow()
      const pick = () => [null, 1, "x", {}, [], true, "phx_join", -0.5][Math.floor(Math.random() * 8)]
      expect(() => parsePhoenixMessage(JSON.stringify(Array.from({ length: 5 }, pick)))).not.toThrow()
    }
  })

  it("a reply answers the push's refs on its topic", () => {
    expect(encodePhoenixMessage(phoenixReply({ joinRef: "1", ref: "2", topic: "t" }, "ok", { a: 1 }))).toBe(
      JSON.stringify(["1", "2", "t", "phx_reply", { status: "ok", response: { a: 1 } }])
    )
  })
})

describe("encodeWatermark", () => {
  it("is URL-safe Base64 of seq:<n>, read back by decodeWatermark", () => {
    expect(encodeWatermark(42)).toBe(Buffer.from("seq:42").toString("base64url"))
    for (const seq of [0, 1, 99, 1000000, Number.MAX_SAFE_INTEGER]) {
      expect(decodeWatermark(encodeWatermark(seq))).toEqual(Either.right(Position.Seq({ seq })))
    }
  })
})
