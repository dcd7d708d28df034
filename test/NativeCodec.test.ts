import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import { pack, unpack } from "msgpackr"
import { decodeClientFrame, encodeServerFrame, formatOf } from "../src/realtime/native/NativeCodec.js"

const json = (value: unknown) => decodeClientFrame("json", Buffer.from(JSON.stringify(value)), false)
const msgpack = (bytes: Uint8Array) => decodeClientFrame("msgpack", Buffer.from(bytes), true)
const refusal = (result: ReturnType<typeof json>) => {
  if (Either.isRight(result)) throw new Error(`decoded: ${JSON.stringify(result.right)}`)
  return result.left
}

describe("NativeCodec", () => {
  it("takes every client frame in both formats", () => {
    const frames = [
      { type: "hello" },
      { type: "hello", watermark: 12 },
      { type: "send", clientId: "c-1.a:b~", activity: { text: "hi" } },
      { type: "typing" },
      { type: "read", seq: 3 },
      { type: "ping" },
      { type: "auth", token: "t" }
    ]
    for (const frame of frames) {
      expect(json(frame)).toEqual(Either.right(frame))
      expect(msgpack(pack(frame))).toEqual(Either.right(frame))
    }
    expect(json({ type: "ping", extra: 1 })).toEqual(Either.right({ type: "ping" }))
  })

  it("names the format of each subprotocol; none is JSON", () => {
    expect([formatOf("chat.v1"), formatOf("chat.v1+json"), formatOf("chat.v1+msgpack"), formatOf("")]).toEqual(["json", "json", "msgpack", "json"])
  })

  it("refuses garbage as bad_request, never throws", () => {
    const bad: Array<readonly [Buffer, boolean, "json" | "msgpack"]> = [
      [Buffer.from("{not json"), false, "json"],
      [Buffer.from("[1,2]"), false, "json"],
      [Buffer.from("null"), false, "json"],
      [Buffer.from("\"hello\""), false, "json"],
      [Buffer.from(JSON.stringify({ type: "hello" })), true, "json"],
      [Buffer.from(pack({ type: "ping" })), false, "msgpack"],
      [Buffer.concat([pack({ type: "ping" }), Buffer.from([1])]), true, "msgpack"],
      [Buffer.from(pack({ type: "ping" })).subarray(0, 3), true, "msgpack"],
      [Buffer.from([0xd4, 0x05, 0x01]), true, "msgpack"],
      [Buffer.from([0xd6, 0xff, 0, 0, 0, 1]), true, "msgpack"],
      [Buffer.from([0xc4, 1, 7]), true, "msgpack"],
      [Buffer.alloc(0), true, "msgpack"],
      [Buffer.alloc(131072, 0x91), true, "msgpack"],
      [Buffer.from("[".repeat(100000) + "]".repeat(100000)), false, "json"],
      [Buffer.from([0x81, 0x01, 0xa4, 0x70, 0x69, 0x6e, 0x67]), true, "msgpack"],
      [Buffer.from([0xdd, 0xff, 0xff, 0xff, 0xff]), true, "msgpack"]
    ]
    for (const [data, binary, format] of bad) {
      expect(refusal(decodeClientFrame(format, data, binary)).code).toBe("bad_request")
    }
  })

  it("refuses unknown types and wrong shapes with details", () => {
    expect(refusal(json({ type: "subscribe" }))).toMatchObject({ code: "bad_request", details: { type: [expect.any(String)] } })
    expect(refusal(json({ kind: "hello" }))).toMatchObject({ code: "bad_request" })
    expect(refusal(json({ type: "read", seq: -1 }))).toMatchObject({ code: "bad_request", details: { seq: [expect.any(String)] } })
    expect(refusal(json({ type: "read", seq: 1.5 }))).toMatchObject({ code: "bad_request" })
    expect(refusal(json({ type: "auth", token: "" }))).toMatchObject({ code: "bad_request" })
    expect(refusal(json({ type: "send", clientId: "has space", activity: {} }))).toMatchObject({ code: "bad_request" })
    expect(refusal(json({ type: "send", clientId: "x".repeat(129), activity: {} }))).not.toHaveProperty("clientId")
    expect(refusal(json({ type: "send", clientId: "ok", activity: "text" }))).toEqual({
      code: "invalid_message",
      message: "the activity is invalid",
      clientId: "ok",
      details: { activity: ["must be an object"] }
    })
  })

  it("keeps a __proto__ key a plain key", () => {
    const frame = msgpack(Buffer.from([0x82, 0xa4, ...Buffer.from("type"), 0xa4, ...Buffer.from("ping"), 0xa9, ...Buffer.from("__proto__"), 0x80]))
    expect(Either.isRight(frame)).toBe(true)
    expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined()
    const sent = json(JSON.parse("{\"type\":\"send\",\"clientId\":\"a\",\"activity\":{\"__proto__\":{\"polluted\":1}}}"))
    expect(Either.isRight(sent)).toBe(true)
    expect(({} as Record<string, unknown>)["polluted"]).toBeUndefined()
  })

  it("encodes server frames as JSON text or msgpack binary", () => {
    const frame = { type: "pong", timestamp: 1 }
    expect(encodeServerFrame("json", frame)).toBe("{\"type\":\"pong\",\"timestamp\":1}")
    const bytes = encodeServerFrame("msgpack", frame)
    expect(bytes).toBeInstanceOf(Uint8Array)
    expect(unpack(bytes as Uint8Array)).toEqual(frame)
  })
})
