import { describe, expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { query, serverUrl } from "./support/TestDatabase.js"
import { expectError, fieldDetails } from "./support/Envelope.js"
import { conversationRoutes, insertChannel, insertConversation, storedState, tenantApi, tenantWithConversation } from "./support/Fixtures.js"
import { admin, request, TestNodeLive } from "./support/TestNode.js"

const countActivities = (conversationId: string) =>
  Effect.map(query<{ n: string }>("SELECT count(*) AS n FROM activities WHERE conversation_id = $1", [conversationId]), (r) =>
    Number(r[0]!.n))

/** A string of exactly `n` bytes of UTF-8: as many `wide` characters as fit, then ASCII. */
const ofBytes = (n: number, wide: string) => {
  const count = Math.floor(n / Buffer.byteLength(wide))
  return wide.repeat(count) + "x".repeat(n - count * Buffer.byteLength(wide))
}

/** An http URL of exactly `n` characters. */
const urlOf = (n: number) => `https://x.test/${"a".repeat(n - "https://x.test/".length)}`

/** `wrap(s)` with `s` chosen so that its JSON is exactly `n` bytes, mostly of `wide` characters. */
const jsonOfBytes = <A>(n: number, wrap: (s: string) => A, wide = "€"): A =>
  wrap(ofBytes(n - Buffer.byteLength(JSON.stringify(wrap(""))), wide))

// Appends are served by the lean route ahead of the router (ADR 0006) and, when it is off, by the
// router: both ways answer alike.
describe.each([{ way: "lean route", lean: true }, { way: "router only", lean: false }])("$way", ({ lean }) => {
  layer(TestNodeLive({}, { leanAppendRoute: lean }), { excludeTestServices: true })("tenant API: activities", (it) => {
    describe("append", () => {
      it.effect("stores a message with seq 1, 2, 3 and the documented fields", () =>
        Effect.gen(function*() {
          const { conversationId, key, tenant } = yield* tenantWithConversation
          const first = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "hi" })
          expect(first.status).toBe(201)
          expect(first.body.data).toMatchObject({
            type: "message",
            sender: "user",
            text: "hi",
            attachments: [],
            metadata: {},
            seq: 1,
            conversation_id: conversationId,
            tenant_id: tenant.id,
            source_channel_id: null,
            idempotency_key: null
          })
          const second = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, {
            text: "again",
            sender: "agent",
            seq: 99,
            tenant_id: "ignored"
          })
          expect(second.body.data).toMatchObject({ seq: 2, sender: "agent" })
        }))

      it.effect("concurrent appends get gap-free seqs", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const replies = yield* Effect.forEach(
            Array.from({ length: 40 }, (_, i) => i),
            (i) => tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: `m${i}` }),
            { concurrency: 40 }
          )
          expect(replies.filter((r) => r.status !== 201).map((r) => JSON.stringify(r.body))).toEqual([])
          expect(replies.map((r) => r.body.data.seq).sort((a, b) => a - b)).toEqual(Array.from({ length: 40 }, (_, i) => i + 1))
        }))

      it.effect("a repeated idempotency key returns the original and stores nothing", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const headers = { "x-idempotency-key": "k-1" }
          const first = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "once" }, headers)
          const again = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "twice" }, headers)
          expect(again.status).toBe(201)
          expect(again.body.data).toEqual(first.body.data)
          expect(yield* countActivities(conversationId)).toBe(1)
        }))

      it.effect("repeats among new appends: each repeat gets its original, each new key one activity", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          const post = (k: string) => tenantApi(key, "POST", path, { text: k }, { "x-idempotency-key": k })
          const originals = yield* Effect.forEach(["a", "b"], post)
          // Sent together, so repeats and new keys share rounds and write batches.
          const replies = yield* Effect.forEach(["a", "c", "b", "d", "a", "e"], post, { concurrency: "unbounded" })
          expect(replies.map((r) => r.status)).toEqual([201, 201, 201, 201, 201, 201])
          expect(replies[0]!.body.data).toEqual(originals[0]!.body.data)
          expect(replies[2]!.body.data).toEqual(originals[1]!.body.data)
          expect(replies[4]!.body.data).toEqual(originals[0]!.body.data)
          expect(new Set(replies.map((r) => r.body.data.text))).toEqual(new Set(["a", "b", "c", "d", "e"]))
          expect(yield* countActivities(conversationId)).toBe(5)
        }))

      it.effect("a repeat after the conversation closed still returns the original", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          const headers = { "x-idempotency-key": "before-close" }
          const first = yield* tenantApi(key, "POST", path, { text: "kept" }, headers)
          expect((yield* tenantApi(key, "POST", `/conversations/${conversationId}/close`)).status).toBe(200)
          const again = yield* tenantApi(key, "POST", path, { text: "kept" }, headers)
          expect(again.status).toBe(201)
          expect(again.body.data).toEqual(first.body.data)
          const fresh = yield* tenantApi(key, "POST", path, { text: "new" }, { "x-idempotency-key": "after-close" })
          expect(fresh.status).toBe(409)
          expect(fresh.body.error.code).toBe("conversation_closed")
          expect(yield* countActivities(conversationId)).toBe(2)
        }))

      it.effect("invalid activities are 422 invalid_message per field and store nothing, by key or by channel token", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key, tenant } = yield* tenantWithConversation
          // Refused appends count against activity_create too: these cases, sent twice, would pass its 100 a second.
          yield* admin("PATCH", `/tenants/${tenant.id}`, { tenant: { limits: { activity_create: { limit: 100_000, scale_ms: 1000 } } } })
          const cases: Array<[unknown, string]> = [
            [{ type: "deliveryReceipt" }, "type"],
            [{ type: "bogus" }, "type"],
            [{ type: 5 }, "type"],
            [{ type: "Message" }, "type"],
            [{ text: "x".repeat(65_537) }, "text"],
            [{ type: "messageReaction", text: "x".repeat(65), reply_to_id: crypto.randomUUID() }, "text"],
            // A reaction is its emoji.
            [{ type: "messageReaction", reply_to_id: crypto.randomUUID() }, "text"],
            [{ type: "messageReaction", text: "", reply_to_id: crypto.randomUUID() }, "text"],
            [{ attachments: Array.from({ length: 11 }, () => ({ contentType: "image/png" })) }, "attachments"],
            [{ attachments: [{ name: "no type" }] }, "attachments"],
            [{ attachments: [{ contentType: "" }] }, "attachments"],
            [{ attachments: [{ contentType: 5 }] }, "attachments"],
            [{ attachments: [null] }, "attachments"],
            [{ attachments: [{ contentType: "text/plain", content: "x".repeat(4100) }] }, "attachments"],
            [{ attachments: ["image/png"] }, "attachments"],
            [{ attachments: { contentType: "image/png" } }, "attachments"],
            [{ metadata: { big: "x".repeat(16_400) } }, "metadata"],
            [{ metadata: [1] }, "metadata"],
            [{ metadata: "note" }, "metadata"],
            [{ reply_to_id: crypto.randomUUID(), text: "re" }, "reply_to_id"],
            [{ reply_to_id: "not-a-uuid", text: "re" }, "reply_to_id"],
            [{ type: "messageUpdate", text: "x" }, "reply_to_id"],
            [{ type: "messageDelete" }, "reply_to_id"],
            [{ type: "messageReaction", text: "👍" }, "reply_to_id"],
            // Typed messages: both fields, on `message` only, the name a renderer name, the payload an
            // object within its limit that passes its schema (one case per documented schema).
            [{ payload: { text: "no type" } }, "message_type"],
            [{ message_type: "card" }, "payload"],
            [{ type: "event", message_type: "image", payload: { url: "https://x.test/a.png" } }, "message_type"],
            [{ type: "typing", message_type: "card", payload: { title: "t" } }, "message_type"],
            [{ type: "event", payload: { a: 1 } }, "message_type"],
            [{ message_type: "9lives", payload: {} }, "message_type"],
            [{ message_type: `m${"x".repeat(64)}`, payload: {} }, "message_type"],
            [{ message_type: "my widget", payload: {} }, "message_type"],
            [{ message_type: 5, payload: {} }, "message_type"],
            [{ message_type: "my_widget", payload: ["x"] }, "payload"],
            [{ message_type: "my_widget", payload: { blob: "x".repeat(131_073) } }, "payload"],
            [{ message_type: "image", payload: { url: "https://x.test/a.png", seq: 3 } }, "payload"],
            [{ message_type: "my_widget", payload: { type: "card" } }, "payload"],
            [{ message_type: "buttons", payload: { buttons: [] } }, "payload"],
            [{ message_type: "card", payload: { subtitle: "no title" } }, "payload"],
            [{ message_type: "image", payload: { url: "ftp://x.test/a.png" } }, "payload"],
            [{ message_type: "location", payload: { latitude: 91, longitude: 0 } }, "payload"],
            [{ message_type: "tool_call", payload: { arguments: {} } }, "payload"],
            [{ message_type: "genui", payload: { props: {} } }, "payload"],
            [{ message_type: "interrupt", payload: { prompt: "" } }, "payload"],
            [{ text: 42 }, "text"],
            [{ sender: "" }, "sender"],
            [{ sender: 7 }, "sender"],
            // PostgreSQL stores no U+0000 in text or jsonb: refused per field, never a failed write.
            [{ text: "a\u0000b" }, "text"],
            [{ sender: "bot\u0000" }, "sender"],
            [{ metadata: { "k\u0000": 1 } }, "metadata"],
            [{ attachments: [{ contentType: "text/plain", name: "\u0000" }] }, "attachments"],
            [{ message_type: "my_widget", payload: { nested: ["\u0000"] } }, "payload"],
            [{ text: "half a pair \ud800" }, "text"],
            [{ metadata: { k: "\udc00 alone" } }, "metadata"]
          ]
          const before = yield* storedState(conversationId)
          // x-api-key takes the lean append route, x-channel-token the router (ADR 0006): same answers.
          for (const auth of [{ "x-api-key": key }, { "x-channel-token": channel.secret }]) {
            for (const [i, [body, field]] of cases.entries()) {
              const reply = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, {
                body,
                headers: { ...auth, "x-idempotency-key": `refused-${i}` }
              })
              expectError(reply, 422, "invalid_message", fieldDetails(field), JSON.stringify(body).slice(0, 80))
            }
          }
          expect(yield* storedState(conversationId)).toEqual(before)
          // A refused append took no idempotency key: the key stores a new activity.
          const fresh = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "ok" }, {
            "x-idempotency-key": "refused-0"
          })
          expect(fresh.status).toBe(201)
          expect(fresh.body.data).toMatchObject({ seq: 1, text: "ok" })
        }))

      it.effect("byte limits hold to the byte in multi-byte characters: at the limit stored, one byte over refused, nothing stored", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key } = yield* tenantWithConversation
          const target = (yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "react to me" })).body.data.id
          const attachment = (n: number) => jsonOfBytes(n, (s) => ({ contentType: "text/plain", content: s }), "é")
          // Each value is mostly multi-byte: counted in characters (or in UTF-16 units) the one over
          // would pass; counted with escapes (\u20ac) the one at the limit would not.
          const limits: Array<[string, Record<string, unknown>, Record<string, unknown>]> = [
            ["text", { text: ofBytes(65_536, "😀") }, { text: ofBytes(65_537, "😀") }],
            [
              "text",
              { type: "messageReaction", reply_to_id: target, text: ofBytes(64, "😀") },
              { type: "messageReaction", reply_to_id: target, text: ofBytes(65, "😀") }
            ],
            [
              "attachments",
              { attachments: Array.from({ length: 10 }, () => attachment(4_096)) },
              { attachments: Array.from({ length: 11 }, () => ({ contentType: "image/png" })) }
            ],
            ["attachments", { attachments: [attachment(4_096)] }, { attachments: [attachment(4_097)] }],
            ["metadata", { metadata: jsonOfBytes(16_384, (s) => ({ note: s })) }, { metadata: jsonOfBytes(16_385, (s) => ({ note: s })) }],
            [
              "payload",
              { message_type: "my_widget", payload: jsonOfBytes(131_072, (s) => ({ blob: s })) },
              { message_type: "my_widget", payload: jsonOfBytes(131_073, (s) => ({ blob: s })) }
            ]
          ]
          // x-api-key takes the lean append route, x-channel-token the router (ADR 0006): same limits.
          for (const auth of [{ "x-api-key": key }, { "x-channel-token": channel.secret }]) {
            const way = Object.keys(auth)[0]
            const post = (body: Record<string, unknown>) =>
              request("POST", `/api/v1/conversations/${conversationId}/activities`, { body, headers: auth })
            for (const [field, atLimit, over] of limits) {
              const stored = yield* post(atLimit)
              expect(stored.status, `${field} at the limit, ${way}`).toBe(201)
              expect(stored.body.data[field]).toEqual(atLimit[field])
              const before = yield* storedState(conversationId)
              expectError(yield* post(over), 422, "invalid_message", fieldDetails(field), `${field} one over the limit, ${way}`)
              expect(yield* storedState(conversationId)).toEqual(before)
            }
            // An attachment is measured as stored (docs/api-notes.md): keys that are dropped do not count.
            const padded = yield* post({ attachments: [{ ...attachment(4_096), dropped: "x".repeat(1_000) }] })
            expect(padded.status, way).toBe(201)
            expect(padded.body.data.attachments).toEqual([attachment(4_096)])
          }
        }))

      it.effect("a typed payload's problems read one per field, without the value sent; each schema's required fields and types", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const typed = (messageType: string, payload: Record<string, unknown>) => ({ message_type: messageType, payload })
          const pattern = "Expected a string matching the pattern ^https?:\\/\\/\\S+$"
          const anObject = "Expected { readonly [x: string]: unknown }"
          // docs/typed-messages.md, schema by schema: each required field missing, each field of the wrong type or out of range.
          const cases: Array<[unknown, ReadonlyArray<unknown>]> = [
            [typed("buttons", {}), ["buttons: is missing"]],
            [typed("buttons", { buttons: [] }), ["buttons: Expected an array of at least 1 item(s)"]],
            [
              typed("buttons", { buttons: Array.from({ length: 21 }, () => ({ label: "b" })) }),
              ["buttons: Expected an array of at most 20 item(s)"]
            ],
            [typed("buttons", { buttons: [{}] }), ["buttons.0.label: is missing"]],
            [typed("buttons", { buttons: [{ label: "" }] }), ["buttons.0.label: Expected a string of 1 to 256 character(s)"]],
            [typed("buttons", { buttons: [{ label: "b", url: "HTTP://x.test" }] }), [`buttons.0.url: ${pattern}`]],
            [typed("buttons", { text: 5, buttons: [{ label: "b" }] }), ["text: Expected string"]],
            [typed("card", {}), ["title: is missing"]],
            [typed("card", { title: "t", subtitle: 3 }), ["subtitle: Expected string"]],
            [typed("card", { title: "t", imageUrl: "javascript:alert(1)" }), [`imageUrl: ${pattern}`]],
            [typed("card", { title: "t", buttons: [] }), ["buttons: Expected an array of at least 1 item(s)"]],
            [typed("image", {}), ["url: is missing"]],
            [typed("image", { url: urlOf(2_049) }), ["url: Expected a string of at most 2048 character(s)"]],
            [typed("image", { url: "https://x.test/a.png", height: 1.5 }), ["height: Expected an integer"]],
            [typed("image", { url: "https://x.test/a.png", alt: 1 }), ["alt: Expected string"]],
            [typed("location", { longitude: 0 }), ["latitude: is missing"]],
            [typed("location", { latitude: 0 }), ["longitude: is missing"]],
            [typed("location", { latitude: "1", longitude: 0 }), ["latitude: Expected number"]],
            [typed("location", { latitude: -90.5, longitude: 0 }), ["latitude: Expected a number between -90 and 90"]],
            [typed("location", { latitude: 0, longitude: 180.5 }), ["longitude: Expected a number between -180 and 180"]],
            [typed("location", { latitude: 0, longitude: 0, name: 1 }), ["name: Expected string"]],
            [typed("tool_call", {}), ["name: is missing"]],
            [typed("tool_call", { name: "" }), ["name: Expected a string of 1 to 256 character(s)"]],
            [typed("tool_call", { name: "t", callId: 1 }), ["callId: Expected string"]],
            [typed("tool_call", { name: "t", arguments: [1] }), [`arguments: ${anObject}`]],
            [typed("genui", {}), ["component: is missing"]],
            [typed("genui", { component: "" }), ["component: Expected a string of 1 to 256 character(s)"]],
            [typed("genui", { component: "c", props: [1] }), [`props: ${anObject}`]],
            [typed("genui", { component: "c", text: 1 }), ["text: Expected string"]],
            [typed("interrupt", {}), ["prompt: is missing"]],
            [typed("interrupt", { prompt: 5 }), [expect.stringMatching(/^prompt: Expected /)]],
            [typed("interrupt", { prompt: "p", options: "yes" }), [expect.stringMatching(/^options: Expected /)]],
            [typed("interrupt", { prompt: "p", options: [""] }), ["options.0: Expected a string of 1 to 256 character(s)"]],
            [{ message_type: "image", payload: { url: "https://x.test/a.png", width: 0 } }, ["width: Expected a positive number"]],
            [
              { message_type: "tool_call", payload: { name: "t", status: "done" } },
              [`status: Expected "pending", "running", "completed" or "failed"`]
            ],
            [
              { message_type: "interrupt", payload: { prompt: "p", options: Array.from({ length: 21 }, (_, i) => `option-${i}`) } },
              ["options: Expected an array of at most 20 item(s)"]
            ]
          ]
          const before = yield* storedState(conversationId)
          for (const [body, messages] of cases) {
            const reply = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, body)
            expectError(reply, 422, "invalid_message", { payload: messages }, JSON.stringify(body).slice(0, 80))
          }
          expect(yield* storedState(conversationId)).toEqual(before)
        }))

      it.effect("lengths in characters count code points: 256 emoji are a label or a sender, 257 are not", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const emoji = (n: number) => "😀".repeat(n)
          const post = (body: unknown) => tenantApi(key, "POST", `/conversations/${conversationId}/activities`, body)
          const accepted = [
            { text: "x", sender: emoji(256) },
            { message_type: "card", payload: { title: emoji(256) } },
            { message_type: "buttons", payload: { buttons: [{ label: emoji(256), value: emoji(1024) }] } }
          ]
          for (const body of accepted) expect((yield* post(body)).status, JSON.stringify(body).slice(0, 60)).toBe(201)
          const refused: Array<[unknown, string, string]> = [
            [{ text: "x", sender: emoji(257) }, "sender", "must be a string of 1 to 256 characters"],
            [{ message_type: "card", payload: { title: emoji(257) } }, "payload", "title: Expected a string of 1 to 256 character(s)"],
            [
              { message_type: "buttons", payload: { buttons: [{ label: "ok", value: emoji(1025) }] } },
              "payload",
              "buttons.0.value: Expected a string of at most 1024 character(s)"
            ]
          ]
          for (const [body, field, message] of refused) {
            expectError(yield* post(body), 422, "invalid_message", { [field]: [message] })
          }
          expect(yield* countActivities(conversationId)).toBe(accepted.length)
        }))

      it.effect("attachments keep only documented keys; typed messages fill text", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const reply = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, {
            attachments: [{ contentType: "image/png", contentUrl: "https://x.test/a.png", secret: "dropped" }],
            message_type: "card",
            payload: { title: "Hello card" }
          })
          expect(reply.status).toBe(201)
          expect(reply.body.data.attachments).toEqual([{ contentType: "image/png", contentUrl: "https://x.test/a.png" }])
          expect(reply.body.data.text).toBe("Hello card")
          // Each schema at its bounds is stored, its text filled from the documented field when none is sent.
          const labels = (n: number) => Array.from({ length: n }, (_, i) => `option-${i}`)
          const filled: Array<[Record<string, unknown>, string | null]> = [
            [
              { message_type: "buttons", payload: { text: "Pick", buttons: labels(20).map((label) => ({ label, url: urlOf(2_048) })) } },
              "Pick"
            ],
            [{ message_type: "buttons", payload: { buttons: [{ label: "b" }] } }, null],
            [
              { message_type: "card", payload: { title: "Card", subtitle: "s", imageUrl: "http://x.test/a.png", buttons: [{ label: "b" }] } },
              "Card"
            ],
            [{ message_type: "image", payload: { url: urlOf(2_048), alt: "A cat", width: 1, height: 1 } }, "A cat"],
            [{ message_type: "location", payload: { latitude: -90, longitude: 180 } }, "-90,180"],
            [{ message_type: "location", payload: { latitude: 90, longitude: -180, name: "Pole", address: "a" } }, "Pole"],
            [{ message_type: "tool_call", payload: { name: "search", callId: "c1", arguments: {}, status: "completed" } }, "search"],
            [{ message_type: "genui", payload: { component: "Chart", props: {} } }, "Chart"],
            [{ message_type: "genui", payload: { component: "Chart", text: "See the chart" } }, "See the chart"],
            [{ message_type: "interrupt", payload: { prompt: "Go on?", options: labels(20) } }, "Go on?"],
            [{ message_type: `m${"x".repeat(63)}`, payload: { text: "open" } }, "open"],
            [{ message_type: "my_widget", payload: { anything: true } }, null],
            [{ message_type: "card", payload: { title: "Card" }, text: "sent text" }, "sent text"]
          ]
          for (const [body, text] of filled) {
            const stored = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, body)
            expect(stored.status, JSON.stringify(body).slice(0, 80)).toBe(201)
            expect(stored.body.data).toMatchObject({ message_type: body["message_type"], payload: body["payload"], text })
          }
        }))

      it.effect("a __proto__ key in metadata, payload or an attachment is refused on both routes, never stored or answered changed", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key } = yield* tenantWithConversation
          // Raw bodies: JSON.parse makes `__proto__` an own key, which a rebuilt object (a schema's
          // output, a redacted delivery payload, a msgpack cluster call) drops or renames.
          const cases: Array<[string, string]> = [
            [`{"text": "x", "metadata": {"__proto__": {"a": 1}, "k": 2}}`, "metadata"],
            [`{"metadata": {"deep": [{"__proto__": 1}]}}`, "metadata"],
            [`{"message_type": "my_widget", "payload": {"__proto__": {"b": 1}}}`, "payload"],
            [`{"message_type": "card", "payload": {"title": "t", "__proto__": {}}}`, "payload"],
            [`{"attachments": [{"contentType": "text/plain", "content": {"__proto__": "c"}}]}`, "attachments"]
          ]
          const before = yield* storedState(conversationId)
          for (const auth of [{ "x-api-key": key }, { "x-channel-token": channel.secret }]) {
            for (const [raw, field] of cases) {
              const reply = yield* request("POST", `/api/v1/conversations/${conversationId}/activities`, { raw, headers: auth })
              expectError(reply, 422, "invalid_message", fieldDetails(field), raw)
            }
          }
          expect(yield* storedState(conversationId)).toEqual(before)
          // A key merely containing the name is an ordinary key.
          const kept = yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, {
            metadata: { "__proto__x": 1, proto: { __proto: 2 } }
          })
          expect(kept.status).toBe(201)
          expect(kept.body.data.metadata).toEqual({ "__proto__x": 1, proto: { __proto: 2 } })
        }))

      it.effect("text filled from a payload is cut to the text limit between characters", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          const ascii = yield* tenantApi(key, "POST", path, { message_type: "interrupt", payload: { prompt: "p".repeat(70_000) } })
          expect(ascii.status).toBe(201)
          expect(ascii.body.data.text).toBe("p".repeat(65_536))
          // 3-byte characters: 21,845 of them fill 65,535 bytes; the next would not fit.
          const wide = yield* tenantApi(key, "POST", path, { message_type: "my_widget", payload: { text: "€".repeat(30_000) } })
          expect(wide.status).toBe(201)
          expect(wide.body.data.text).toBe("€".repeat(21_845))
          expect(wide.body.data.payload.text).toHaveLength(30_000)
        }))

      it.effect("edits and deletes set edited_at / deleted_at on the target; only one's own", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          const original = (yield* tenantApi(key, "POST", path, { text: "v1", sender: "alice" })).body.data
          /** Each body is refused 422 on `reply_to_id` with `problem`, and nothing is stored or marked. */
          const expectRefused = (bodies: ReadonlyArray<Record<string, unknown>>, problem: string) =>
            Effect.gen(function*() {
              const before = yield* storedState(conversationId)
              for (const body of bodies) {
                const reply = yield* tenantApi(key, "POST", path, body)
                expectError(reply, 422, "invalid_message", { reply_to_id: [problem] }, JSON.stringify(body))
              }
              expect(yield* storedState(conversationId)).toEqual(before)
            })
          // Someone else's message: neither edited nor deleted, and its marks stay unset.
          yield* expectRefused([
            { type: "messageUpdate", text: "v2", sender: "bob", reply_to_id: original.id },
            { type: "messageDelete", sender: "bob", reply_to_id: original.id }
          ], "cannot edit or delete someone else's message")
          const edit = yield* tenantApi(key, "POST", path, { type: "messageUpdate", text: "v2", sender: "alice", reply_to_id: original.id })
          expect(edit.status).toBe(201)
          const del = yield* tenantApi(key, "POST", path, { type: "messageDelete", sender: "alice", reply_to_id: original.id })
          expect(del.status).toBe(201)
          const listed = yield* tenantApi(key, "GET", path)
          const target = listed.body.data.find((a: { id: string }) => a.id === original.id)
          expect(target.edited_at).not.toBeNull()
          expect(target.deleted_at).not.toBeNull()
          expect(target.text).toBe("v1")
          // Only messages are edited or deleted: an event, a reaction or the edit itself is not one.
          const event = (yield* tenantApi(key, "POST", path, { type: "event", sender: "alice", metadata: { e: 1 } })).body.data
          const other = (yield* tenantApi(key, "POST", path, { text: "kept", sender: "bob" })).body.data
          const reaction = (yield* tenantApi(key, "POST", path, { type: "messageReaction", text: "👍", sender: "alice", reply_to_id: other.id }))
            .body.data
          yield* expectRefused(
            [event.id, reaction.id, edit.body.data.id].flatMap((targetId) =>
              ["messageUpdate", "messageDelete"].map((type) => ({ type, text: "x", sender: "alice", reply_to_id: targetId }))
            ),
            "only a message can be edited or deleted"
          )
          expect((yield* tenantApi(key, "GET", path)).body.data).toHaveLength(6)
        }))

      it.effect("a deleted message is not edited or reacted to; replies, a repeated delete and retries still work", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          const original = (yield* tenantApi(key, "POST", path, { text: "v1", sender: "alice" })).body.data
          const retried = { "x-idempotency-key": "edit-1" }
          const edit = { type: "messageUpdate", text: "v2", sender: "alice", reply_to_id: original.id }
          const edited = yield* tenantApi(key, "POST", path, edit, retried)
          expect(edited.status).toBe(201)
          const del = { type: "messageDelete", sender: "alice", reply_to_id: original.id }
          expect((yield* tenantApi(key, "POST", path, del)).status).toBe(201)
          const deletedAt = (yield* tenantApi(key, "GET", path)).body.data[0].deleted_at
          expect(deletedAt).toEqual(expect.any(String))

          const before = yield* storedState(conversationId)
          for (const body of [edit, { type: "messageReaction", text: "👍", sender: "bob", reply_to_id: original.id }]) {
            expectError(yield* tenantApi(key, "POST", path, body), 422, "invalid_message", {
              reply_to_id: ["the message is deleted: it cannot be edited or reacted to"]
            }, body.type)
          }
          // Not stored, and the first edit time stays.
          expect(yield* storedState(conversationId)).toEqual(before)
          // The edit accepted before the deletion is what its retry gets, not a refusal.
          const retry = yield* tenantApi(key, "POST", path, edit, retried)
          expect(retry.status).toBe(201)
          expect(retry.body.data.id).toBe(edited.body.data.id)
          expect((yield* tenantApi(key, "POST", path, { text: "re", sender: "bob", reply_to_id: original.id })).status).toBe(201)
          // A second delete is accepted and keeps the first deletion time.
          expect((yield* tenantApi(key, "POST", path, del)).status).toBe(201)
          const listed = (yield* tenantApi(key, "GET", path)).body.data
          expect(listed.map((a: { type: string }) => a.type)).toEqual(["message", "messageUpdate", "messageDelete", "message", "messageDelete"])
          expect(listed[0].deleted_at).toBe(deletedAt)
        }))

      it.effect("an edit or reaction sent with the delete of its message is never stored after the delete", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          for (let i = 0; i < 10; i++) {
            const original = (yield* tenantApi(key, "POST", path, { text: `v${i}`, sender: "alice" })).body.data
            // Sent together: each passes the look at its target before the delete is written.
            const [del, edit, reaction] = yield* Effect.all([
              tenantApi(key, "POST", path, { type: "messageDelete", sender: "alice", reply_to_id: original.id }),
              tenantApi(key, "POST", path, { type: "messageUpdate", text: "v2", sender: "alice", reply_to_id: original.id }),
              tenantApi(key, "POST", path, { type: "messageReaction", text: "👍", sender: "bob", reply_to_id: original.id })
            ], { concurrency: "unbounded" })
            expect(del!.status).toBe(201)
            for (const reply of [edit!, reaction!]) {
              // Before the delete it is an edit (or reaction) of a live message; after it, refused.
              if (reply.status === 201) expect(reply.body.data.seq, `round ${i}`).toBeLessThan(del!.body.data.seq)
              else {
                expectError(reply, 422, "invalid_message", {
                  reply_to_id: ["the message is deleted: it cannot be edited or reacted to"]
                }, `round ${i}`)
              }
            }
          }
        }))
    })

    describe("bad references", () => {
      it.effect("reply_to_id rules hold however the path spells the id; another tenant's activity is unknown", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const upper = `/conversations/${conversationId.toUpperCase()}/activities`
          const own = (yield* tenantApi(key, "POST", upper, { text: "mine", sender: "alice" })).body.data
          expect((yield* tenantApi(key, "POST", upper, { text: "re", reply_to_id: own.id })).status).toBe(201)
          const edit = yield* tenantApi(key, "POST", upper, { type: "messageUpdate", text: "v2", sender: "alice", reply_to_id: own.id })
          expect(edit.status).toBe(201)

          // Whatever another tenant's ids are, the answer is that of an id nobody stored: nothing leaks.
          const other = yield* tenantWithConversation
          const theirs = (yield* tenantApi(other.key, "POST", `/conversations/${other.conversationId}/activities`, {
            text: "private",
            sender: "vip"
          })).body.data
          const before = [yield* storedState(conversationId), yield* storedState(other.conversationId)]
          for (const [path, body] of [
            [`/conversations/${conversationId}/activities`, { type: "messageUpdate", sender: "vip", reply_to_id: theirs.id }],
            [`/conversations/${other.conversationId}/activities`, { type: "messageUpdate", sender: "guess", reply_to_id: theirs.id }],
            [`/conversations/${other.conversationId}/activities`, { type: "messageUpdate", sender: "vip", reply_to_id: theirs.id }],
            [`/conversations/${crypto.randomUUID()}/activities`, { type: "messageUpdate", sender: "vip", reply_to_id: theirs.id }],
            [`/conversations/${crypto.randomUUID()}/activities`, { type: "messageUpdate", sender: "vip", reply_to_id: crypto.randomUUID() }]
          ] as const) {
            expectError(yield* tenantApi(key, "POST", path, body), 422, "invalid_message", {
              reply_to_id: ["is not an activity of this conversation"]
            }, path)
          }
          // Neither conversation stored anything, and their messages carry no edit mark.
          expect([yield* storedState(conversationId), yield* storedState(other.conversationId)]).toEqual(before)
          expect(before.map((state) => state?.["activities"])).toEqual([3, 1])
        }))

      it.effect("an unknown or another tenant's conversation is 404 on every route and nothing of it changes; a malformed id 400", () =>
        Effect.gen(function*() {
          const { key } = yield* tenantWithConversation
          const other = yield* tenantWithConversation
          // Another tenant's conversations in both states: a close or a reopen must move neither.
          const closedElsewhere = yield* insertConversation(other.tenant.id, other.channel.id)
          expect((yield* tenantApi(other.key, "POST", `/conversations/${closedElsewhere}/close`)).status).toBe(200)
          const foreign = [other.conversationId, closedElsewhere]
          const before = yield* Effect.forEach(foreign, storedState)
          for (const id of [crypto.randomUUID(), ...foreign]) {
            for (const [method, path, body] of conversationRoutes(id)) {
              expectError(yield* tenantApi(key, method, path, body), 404, "not_found", null, `${method} ${path}`)
            }
          }
          for (const [method, path, body] of conversationRoutes("not-a-uuid")) {
            expectError(yield* tenantApi(key, method, path, body), 400, "bad_request", null, `${method} ${path}`)
          }
          expect(yield* Effect.forEach(foreign, storedState)).toEqual(before)
        }))

      it.effect("a reply into another conversation is 422; an idempotency key outside 1 to 255 characters is 400; nothing stored", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const other = yield* tenantWithConversation
          const elsewhere = (yield* tenantApi(other.key, "POST", `/conversations/${other.conversationId}/activities`, { text: "x" }))
            .body.data
          const before = yield* storedState(conversationId)
          const path = `/conversations/${conversationId}/activities`
          expectError(yield* tenantApi(key, "POST", path, { text: "re", reply_to_id: elsewhere.id }), 422, "invalid_message", {
            reply_to_id: ["is not an activity of this conversation"]
          })
          for (const idempotencyKey of ["k".repeat(256), ""]) {
            const reply = yield* tenantApi(key, "POST", path, { text: "k" }, { "x-idempotency-key": idempotencyKey })
            expectError(reply, 400, "bad_request", null, `key of ${idempotencyKey.length}`)
          }
          expect(yield* storedState(conversationId)).toEqual(before)
          expect(before?.["activities"]).toBe(0)
          expect((yield* tenantApi(key, "POST", path, { text: "k" }, { "x-idempotency-key": "k".repeat(255) })).status).toBe(201)
        }))

      it.effect("read, write and scope: a read-only key cannot post, a write-only key cannot list", () =>
        Effect.gen(function*() {
          const { conversationId, tenant } = yield* tenantWithConversation
          const issue = (scopes: ReadonlyArray<string>) =>
            Effect.map(admin("POST", `/tenants/${tenant.id}/api_keys`, { api_key: { name: "k", scopes } }), (r) => r.body.data.key as string)
          const reader = yield* issue(["read"])
          const writer = yield* issue(["write"])
          const before = yield* storedState(conversationId)
          for (const [method, path, body] of [
            ["POST", `/conversations/${conversationId}/activities`, { text: "no" }],
            ["POST", `/conversations/${conversationId}/close`],
            ["POST", `/conversations/${conversationId}/reopen`]
          ] as const) {
            expectError(yield* tenantApi(reader, method, path, body), 403, "insufficient_scope", { required: ["write"] }, path)
          }
          expect(yield* storedState(conversationId)).toEqual(before)
          for (const path of [`/conversations/${conversationId}`, `/conversations/${conversationId}/activities`, "/conversations"]) {
            expectError(yield* tenantApi(writer, "GET", path), 403, "insufficient_scope", { required: ["read"] }, path)
          }
          expect((yield* tenantApi(writer, "POST", `/conversations/${conversationId}/activities`, { text: "yes" })).status).toBe(201)
          expect(yield* countActivities(conversationId)).toBe(1)
        }))
    })

    describe("close and reopen", () => {
      it.effect("a real transition appends a system conversationUpdate; closed refuses appends with 409", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, { text: "hi" })
          const closed = yield* tenantApi(key, "POST", `/conversations/${conversationId}/close`)
          expect(closed.status).toBe(200)
          expect(closed.body.data).toMatchObject({ id: conversationId, status: "closed", participant: null })
          // Closing a closed conversation is no transition: 200, and nothing is written.
          const closedState = yield* storedState(conversationId)
          const again = yield* tenantApi(key, "POST", `/conversations/${conversationId}/close`)
          expect(again.status).toBe(200)
          expect(again.body.data.status).toBe("closed")
          expect(yield* storedState(conversationId)).toEqual(closedState)
          for (const body of [{ text: "late" }, { type: "event", metadata: { e: 1 } }]) {
            expectError(
              yield* tenantApi(key, "POST", `/conversations/${conversationId}/activities`, body),
              409,
              "conversation_closed",
              null,
              JSON.stringify(body)
            )
          }
          expect(yield* storedState(conversationId)).toEqual(closedState)
          const listed = (yield* tenantApi(key, "GET", `/conversations/${conversationId}/activities`)).body
          expect(listed.data.map((a: { seq: number }) => a.seq)).toEqual([1, 2])
          expect(listed.data[1]).toMatchObject({
            type: "conversationUpdate",
            sender: "system",
            metadata: { event: "conversation_closed", status: "closed", reason: "manual" }
          })
          const reopened = yield* tenantApi(key, "POST", `/conversations/${conversationId}/reopen`)
          expect(reopened.body.data.status).toBe("active")
          // Reopening an active conversation is no transition: 200, and nothing is written.
          const activeState = yield* storedState(conversationId)
          const reopenedAgain = yield* tenantApi(key, "POST", `/conversations/${conversationId}/reopen`)
          expect(reopenedAgain.status).toBe(200)
          expect(reopenedAgain.body.data.status).toBe("active")
          expect(yield* storedState(conversationId)).toEqual(activeState)
          const after = (yield* tenantApi(key, "GET", `/conversations/${conversationId}/activities?watermark=2`)).body
          expect(after.data).toHaveLength(1)
          expect(after.data[0].metadata).toEqual({ event: "conversation_reopened", status: "active", reason: "manual" })
        }))

      // The embedded database runs one session: its writes cannot be held up by another one.
      it.effect.runIf(serverUrl !== undefined)("a close or reopen not written in time is 503 and changes nothing; its retry goes through", () =>
        Effect.gen(function*() {
          const { conversationId, key } = yield* tenantWithConversation
          const sql = yield* SqlClient.SqlClient
          for (const [action, status] of [["close", "closed"], ["reopen", "active"]] as const) {
            const send = tenantApi(key, "POST", `/conversations/${conversationId}/${action}`)
            const before = yield* storedState(conversationId)
            // Another session holds the conversation row until the answer has come.
            const held = yield* sql.withTransaction(
              Effect.zipRight(sql`SELECT id FROM conversations WHERE id = ${conversationId} FOR UPDATE`, send)
            )
            expectError(held, 503, "unavailable", { reason: "database_unavailable", retry_after_ms: expect.any(Number) }, action)
            expect(Number(held.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
            expect(yield* storedState(conversationId)).toEqual(before)
            const retried = yield* send
            expect(retried.status).toBe(200)
            expect(retried.body.data.status).toBe(status)
          }
        }))
    })

    describe("listing", () => {
      it.effect("pages by watermark in every accepted form; an empty page echoes the position", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key, tenant } = yield* tenantWithConversation
          const path = `/conversations/${conversationId}/activities`
          const sibling = yield* insertConversation(tenant.id, channel.id)
          const elsewhere: string = (yield* tenantApi(key, "POST", `/conversations/${sibling}/activities`, { text: "there" })).body.data.id
          const ids: Array<string> = []
          for (let i = 0; i < 5; i++) ids.push((yield* tenantApi(key, "POST", path, { text: `m${i}` })).body.data.id)
          const page1 = (yield* tenantApi(key, "GET", `${path}?limit=2`)).body
          expect(page1.meta).toEqual({ watermark: 2, has_more: true, limit: 2 })
          const page2 = (yield* tenantApi(key, "GET", `${path}?limit=2&watermark=${page1.meta.watermark}`)).body
          expect(page2.data.map((a: { seq: number }) => a.seq)).toEqual([3, 4])
          const opaque = Buffer.from("seq:4").toString("base64url")
          const byOpaque = yield* tenantApi(key, "GET", `${path}?watermark=${opaque}`)
          expect(byOpaque.body.data.map((a: { seq: number }) => a.seq)).toEqual([5])
          const legacy = Buffer.from(ids[2]!).toString("base64")
          const byLegacy = yield* tenantApi(key, "GET", `${path}?watermark=${legacy}`)
          expect(byLegacy.body.data[0].seq).toBe(4)
          // Both opaque forms are deprecated (client-api.md "Versioning"); the integer is not.
          for (const reply of [byOpaque, byLegacy]) {
            expect(reply.headers.get("deprecation")).toMatch(/^@\d+$/)
            expect(reply.headers.get("link")).toContain(`rel="deprecation"`)
          }
          expect((yield* tenantApi(key, "GET", `${path}?watermark=3`)).headers.get("deprecation")).toBeNull()
          // A use of the opaque form is marked when the position it names is refused too; garbage is not a use.
          const foreign = yield* tenantApi(key, "GET", `${path}?watermark=${Buffer.from(crypto.randomUUID()).toString("base64url")}`)
          expectError(foreign, 400, "invalid_watermark")
          expect(foreign.headers.get("deprecation")).toMatch(/^@\d+$/)
          expect((yield* tenantApi(key, "GET", `${path}?watermark=%25%25%25`)).headers.get("deprecation")).toBeNull()
          const empty = (yield* tenantApi(key, "GET", `${path}?watermark=5`)).body
          expect(empty).toEqual({ data: [], meta: { watermark: 5, has_more: false, limit: 100 } })
          // Every form echoes the position it names, as an integer; no watermark on an empty page is null.
          const echoed = [[Buffer.from("seq:7").toString("base64url"), 7], [Buffer.from(ids[4]!).toString("base64"), 5]] as const
          for (const [watermark, position] of echoed) {
            const page = (yield* tenantApi(key, "GET", `${path}?watermark=${encodeURIComponent(watermark)}`)).body
            expect(page, watermark).toEqual({ data: [], meta: { watermark: position, has_more: false, limit: 100 } })
          }
          const unwritten = yield* insertConversation(tenant.id, channel.id)
          expect((yield* tenantApi(key, "GET", `/conversations/${unwritten}/activities`)).body).toEqual({
            data: [],
            meta: { watermark: null, has_more: false, limit: 100 }
          })
          // Any exact integer is a position; past 2^53 - 1 a seq can no longer be told apart.
          const largest = (yield* tenantApi(key, "GET", `${path}?watermark=9007199254740991`)).body
          expect(largest.meta.watermark).toBe(9007199254740991)
          for (
            const watermark of [
              "%%%",
              "-1",
              "1.5",
              "",
              "9007199254740992",
              Buffer.from("seq:9007199254740992").toString("base64url"),
              Buffer.from("seq:x").toString("base64url"),
              Buffer.from("seq:").toString("base64url"),
              Buffer.from("seq:-1").toString("base64url"),
              Buffer.from("seq:1.5").toString("base64url"),
              // A character too many or too few: Base64 of no whole number of bytes.
              `${Buffer.from("seq:41").toString("base64url")}M`,
              Buffer.from("seq:123").toString("base64url").slice(0, -1),
              // Base64 of neither form, and a legacy form that holds no activity id.
              Buffer.from("hello").toString("base64"),
              Buffer.from("activity:nope").toString("base64"),
              "1e3",
              " 1",
              "9".repeat(201),
              // The legacy form of another conversation's activity names no position here.
              Buffer.from(elsewhere).toString("base64")
            ]
          ) {
            const reply = yield* tenantApi(key, "GET", `${path}?watermark=${encodeURIComponent(watermark)}`)
            expectError(reply, 400, "invalid_watermark", null, watermark)
          }
          for (const limit of ["abc", "0", "-5", "1.5", ""]) {
            expectError(yield* tenantApi(key, "GET", `${path}?limit=${limit}`), 400, "bad_request", null, `limit=${limit}`)
          }
          for (const [limit, capped] of [["1000", 1000], ["1001", 1000], ["5000", 1000]] as const) {
            expect((yield* tenantApi(key, "GET", `${path}?limit=${limit}`)).body.meta.limit, limit).toBe(capped)
          }
        }))

      it.effect("GET /conversations pages through every conversation newest first by next_cursor, once each", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key, tenant } = yield* tenantWithConversation
          const others = yield* Effect.forEach([1, 2, 3], () => insertConversation(tenant.id, channel.id))
          const newestFirst = yield* query<{ id: string }>(
            "SELECT id FROM conversations WHERE tenant_id = $1 ORDER BY inserted_at DESC, id DESC",
            [tenant.id]
          )
          expect(newestFirst.map((r) => r.id).sort()).toEqual([conversationId, ...others].sort())
          const seen: Array<string> = []
          let cursor: string | null = null
          do {
            const page: { data: Array<{ id: string }>; meta: { next_cursor: string | null; has_more: boolean } } = (yield* tenantApi(
              key,
              "GET",
              `/conversations?limit=1${cursor === null ? "" : `&cursor=${cursor}`}`
            )).body
            expect(page.data).toHaveLength(1)
            seen.push(page.data[0]!.id)
            expect(page.meta.has_more).toBe(page.meta.next_cursor !== null)
            cursor = page.meta.next_cursor
          } while (cursor !== null && seen.length < 10)
          expect(seen).toEqual(newestFirst.map((r) => r.id))
        }))

      it.effect("GET /conversations filters by status, channel_id and external_id and loads the participant; get has it too, close does not", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key, tenant } = yield* tenantWithConversation
          const participantId = crypto.randomUUID()
          // Participants come from inbound resolution (not served yet): stored directly.
          yield* query(
            `INSERT INTO participants (id, tenant_id, channel_id, external_id, display_name, opted_out_at)
             VALUES ($1, $2, $3, 'ext-1', 'Ann', now())`,
            [participantId, tenant.id, channel.id]
          )
          yield* query("UPDATE conversations SET participant_id = $1 WHERE id = $2", [participantId, conversationId])
          yield* query("UPDATE conversation_channels SET participant_id = $1 WHERE conversation_id = $2", [participantId, conversationId])
          const participant = {
            id: participantId,
            external_id: "ext-1",
            display_name: "Ann",
            opted_out_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/)
          }
          const otherChannel = yield* insertChannel(tenant.id)
          const elsewhere = yield* insertConversation(tenant.id, otherChannel.id)
          const closed = yield* insertConversation(tenant.id, channel.id)
          expect((yield* tenantApi(key, "POST", `/conversations/${closed}/close`)).status).toBe(200)
          const ids = (path: string) =>
            Effect.map(tenantApi(key, "GET", path), (reply) => reply.body.data.map((c: { id: string }) => c.id))

          const listed = (yield* tenantApi(key, "GET", "/conversations")).body
          expect(listed.meta).toEqual({ next_cursor: null, has_more: false, limit: 50 })
          const all = listed.data
          expect(all.map((c: { id: string }) => c.id)).toEqual([closed, elsewhere, conversationId])
          expect(all.map((c: { participant: unknown }) => c.participant)).toEqual([null, null, participant])
          expect(all[2].channels).toBeUndefined()
          expect(yield* ids("/conversations?status=closed")).toEqual([closed])
          expect(yield* ids("/conversations?status=active")).toEqual([elsewhere, conversationId])
          expect(yield* ids(`/conversations?channel_id=${otherChannel.id.toUpperCase()}`)).toEqual([elsewhere])
          expect(yield* ids("/conversations?external_id=ext-1")).toEqual([conversationId])
          expect(yield* ids("/conversations?external_id=ext-1&status=closed")).toEqual([])
          expect(yield* ids("/conversations?external_id=nobody")).toEqual([])

          const got = (yield* tenantApi(key, "GET", `/conversations/${conversationId}`)).body.data
          expect(got).toMatchObject({ participant_id: participantId, participant })
          expect(got.channels).toEqual([
            { channel_id: channel.id, role: "origin", participant_id: participantId, inserted_at: expect.any(String) }
          ])
          // Close and reopen answer without loading the participant (server-apis.md: participant null).
          for (const action of ["close", "reopen"]) {
            const reply = (yield* tenantApi(key, "POST", `/conversations/${conversationId}/${action}`)).body.data
            expect(reply, action).toMatchObject({ participant_id: participantId, participant: null })
            expect(reply.channels, action).toBeUndefined()
          }
        }))

      it.effect("GET /conversations pages newest first with a cursor; GET /conversations/:id has channels", () =>
        Effect.gen(function*() {
          const { channel, conversationId, key, tenant } = yield* tenantWithConversation
          const list = (yield* tenantApi(key, "GET", "/conversations?limit=1")).body
          expect(list.data).toHaveLength(1)
          expect(list.meta.limit).toBe(1)
          expect(list.data[0].participant).toBeNull()
          const got = (yield* tenantApi(key, "GET", `/conversations/${conversationId}`)).body.data
          expect(got).toMatchObject({ id: conversationId, tenant_id: tenant.id, channel_id: channel.id, origin_channel_id: channel.id })
          expect(got.channels).toEqual([{ channel_id: channel.id, role: "origin", participant_id: null, inserted_at: expect.any(String) }])
          const cursorOf = (value: unknown) => Buffer.from(JSON.stringify(value)).toString("base64url")
          for (
            const query of [
              "cursor=nope",
              `cursor=${cursorOf([conversationId])}`,
              `cursor=${cursorOf(["2026-01-01T00:00:00Z", "not-a-uuid"])}`,
              // Bad input is 400, never a 503 that invites retries: a date that does not exist, a NUL.
              ...["2026-02-30T00:00:00Z", "2026-01-01T24:00:00Z", "0000-01-01T00:00:00Z"].map((at) =>
                `cursor=${cursorOf([at, conversationId])}`
              ),
              // A character that is not Base64 (Node's decoder skipped it) or padding the cursor never has.
              ...[(c: string) => `${c.slice(0, 10)}.${c.slice(10)}`, (c: string) => `${c}=`].map((spoil) =>
                `cursor=${spoil(cursorOf(["2026-01-01T00:00:00.000Z", conversationId]))}`
              ),
              "channel_id=nope",
              "channel_id=",
              "cursor=",
              "status=open",
              "status=",
              "status=ACTIVE",
              "limit=0",
              "limit=-1",
              "limit=abc",
              "limit=1.5",
              "limit=",
              "external_id=%00abc"
            ]
          ) {
            expectError(yield* tenantApi(key, "GET", `/conversations?${query}`), 400, "bad_request", null, query)
          }
          for (const [limit, capped] of [["500", 500], ["501", 500], ["1234567890", 500]] as const) {
            const reply = yield* tenantApi(key, "GET", `/conversations?limit=${limit}`)
            expect(reply.status, limit).toBe(200)
            expect(reply.body.meta.limit, limit).toBe(capped)
          }
        }))
    })
  })
})
