import { describe, expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { request as httpRequest } from "node:http"
import { TokenSigner } from "../src/auth/TokenSigner.js"
import { BlobStore } from "../src/db/BlobStore.js"
import type { ChannelId } from "../src/domain/Channel.js"
import type { ConversationId } from "../src/domain/Conversation.js"
import type { TenantId } from "../src/domain/Tenant.js"
import { contentDisposition, safeFileName } from "../src/http/UploadRoutes.js"
import { chat, generateToken, randomIp } from "./support/ClientApi.js"
import { expectError } from "./support/Envelope.js"
import { rawRequest } from "./support/RawHttp.js"
import { insertChannel, insertConversation, tenantWithConversation } from "./support/Fixtures.js"
import { holdTable, query } from "./support/TestDatabase.js"
import { createTenant, type Reply, TestNode, TestNodeLive } from "./support/TestNode.js"
import { TestSigner } from "./support/TestSigner.js"

/**
 * The node's file limit in this file: above the edge's 1 MiB limit for JSON bodies (which an upload
 * must not meet), small enough that "far over it" is quick to send.
 */
const MAX_BYTES = 1_100_000

const PNG = Buffer.from(
  "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
  "base64"
)

/** A Windows executable's head: `MZ`, and `PE` where its header points. */
const EXE = (() => {
  const bytes = Buffer.alloc(512)
  bytes.write("MZ", 0)
  bytes.writeUInt32LE(128, 60)
  bytes.write("PE\0\0", 128)
  return bytes
})()

interface FilePart {
  readonly bytes: Uint8Array
  readonly name: string
  /** The type the client claims; the node never trusts it. */
  readonly type?: string
}

/** A multipart upload as a browser sends it (fetch and FormData). */
const upload = (
  bearer: string | undefined,
  conversationId: string,
  parts: { readonly file?: FilePart; readonly text?: string; readonly extra?: string } = {}
) =>
  Effect.flatMap(TestNode, ({ baseUrl }) =>
    Effect.promise(async (): Promise<Reply> => {
      const form = new FormData()
      if (parts.file !== undefined) form.append("file", new Blob([parts.file.bytes], { type: parts.file.type ?? "image/png" }), parts.file.name)
      if (parts.text !== undefined) form.append("text", parts.text)
      if (parts.extra !== undefined) form.append("extra", parts.extra)
      const response = await fetch(`${baseUrl}/api/v1/chat/conversations/${conversationId}/upload`, {
        method: "POST",
        headers: { "x-forwarded-for": randomIp(), ...(bearer === undefined ? {} : { authorization: `Bearer ${bearer}` }) },
        body: form
      })
      const text = await response.text()
      return { status: response.status, headers: response.headers, body: text === "" ? null : JSON.parse(text) }
    }))

/** A conversation on a fresh tenant's channel and a token of that channel for `user-1`. */
const setUp = Effect.gen(function*() {
  const fixture = yield* tenantWithConversation
  const token = yield* generateToken(fixture.channel.secret, { user: { id: "user-1" } })
  return { ...fixture, token }
})

/** A token bound to one conversation, as conversation create and reconnect issue them; expired with a negative lifetime. */
const boundToken = (tenantId: TenantId, channelId: ChannelId, conversationId: ConversationId, ttlSeconds = 600) =>
  Effect.flatMap(TokenSigner, (signer) =>
    signer.sign({ tid: tenantId, cid: channelId, fam: crypto.randomUUID(), conversation_id: conversationId, user_id: "user-1" }, ttlSeconds)).pipe(
      Effect.provide(TestSigner())
    )

/** `GET` of an attachment's URL, its body as bytes. */
const download = (contentUrl: string, bearer: string | undefined, headers: Record<string, string> = {}) =>
  Effect.promise(async () => {
    const response = await fetch(contentUrl, { headers: { ...(bearer === undefined ? {} : { authorization: `Bearer ${bearer}` }), ...headers } })
    const bytes = Buffer.from(await response.arrayBuffer())
    const isJson = response.headers.get("content-type")?.startsWith("application/json") === true
    return { status: response.status, headers: response.headers, bytes, body: isJson ? JSON.parse(bytes.toString()) : null }
  })

const storedActivities = (conversationId: string) =>
  query<{ type: string; sender: string; text: string | null; attachments: unknown }>(
    "SELECT type, sender, text, attachments FROM activities WHERE conversation_id = $1 ORDER BY seq",
    [conversationId]
  )

const blobCount = (conversationId: string) =>
  Effect.map(query<{ n: string }>("SELECT count(*) AS n FROM blobs WHERE conversation_id = $1", [conversationId]), (rows) => Number(rows[0]!.n))

// A short statement timeout: a store held up by a lock fails soon (502).
layer(TestNodeLive({ UPLOAD_MAX_BYTES: String(MAX_BYTES), DATABASE_STATEMENT_TIMEOUT_MS: "2000" }), { excludeTestServices: true })("uploads", (it) => {
  describe("BlobStore", () => {
    it.effect("stores the bytes with tenant and conversation; found only within the tenant, and while its conversation exists", () =>
      Effect.gen(function*() {
        const blobs = yield* BlobStore
        const { channel, conversationId, tenant } = yield* tenantWithConversation
        const bytes = new Uint8Array([0, 1, 2, 255, 254, 0x89, 0x50])
        const id = yield* blobs.put({ tenantId: tenant.id, conversationId, contentType: "image/png", name: "a.png", bytes })
        const found = yield* blobs.find(tenant.id, id)
        expect(Option.map(found, (blob) => ({ ...blob, bytes: [...blob.bytes] }))).toEqual(Option.some({
          id,
          tenant_id: tenant.id,
          conversation_id: conversationId,
          channel_id: channel.id,
          content_type: "image/png",
          name: "a.png",
          size: bytes.length,
          bytes: [...bytes]
        }))
        expect(yield* blobs.find(crypto.randomUUID(), id)).toEqual(Option.none())
        yield* query("DELETE FROM conversations WHERE id = $1", [conversationId])
        expect(yield* blobs.find(tenant.id, id)).toEqual(Option.none())
      }).pipe(Effect.provide(BlobStore.Default)))
  })

  describe("POST /conversations/:id/upload", () => {
    it.effect("stores the file and posts a message whose attachment it is, typed by its bytes", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        // The client's claimed type and the name say nothing: the bytes decide.
        const reply = yield* upload(token, conversationId, { file: { bytes: PNG, name: "../../etc/dot.txt", type: "text/plain" }, text: "a dot" })
        expect(reply.status).toBe(201)
        const { baseUrl } = yield* TestNode
        const attachment = {
          contentType: "image/png",
          contentUrl: expect.stringMatching(new RegExp(`^${baseUrl}/api/v1/chat/attachments/[0-9a-f-]{36}$`)),
          name: "dot.txt",
          size: PNG.length
        }
        expect(reply.body).toEqual({ id: expect.any(String), attachment })
        expect(yield* storedActivities(conversationId)).toEqual([{ type: "message", sender: "user-1", text: "a dot", attachments: [attachment] }])
        expect(yield* blobCount(conversationId)).toBe(1)
      }))

    it.effect("UTF-8 text is text/plain; bytes that are not UTF-8 (and of no known type) are 415", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const text = yield* upload(token, conversationId, { file: { bytes: Buffer.from("héllo\n"), name: "note.txt" } })
        expect(text.status).toBe(201)
        expect(text.body.attachment.contentType).toBe("text/plain")
        // A lone continuation byte and an overlong encoding of "/".
        const latin1 = yield* upload(token, conversationId, { file: { bytes: Buffer.from([0x68, 0x80, 0xc0, 0xaf]), name: "note.txt", type: "text/plain" } })
        expectError(latin1, 415, "unsupported_media_type", { content_type: "application/octet-stream" })
        expect(yield* blobCount(conversationId)).toBe(1)
      }))

    it.effect("a disguised executable (an EXE named .png, sent as image/png) is 415 and nothing is stored", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const reply = yield* upload(token, conversationId, { file: { bytes: EXE, name: "cat.png", type: "image/png" } })
        expectError(reply, 415, "unsupported_media_type", { content_type: "application/x-msdownload" })
        expect(yield* storedActivities(conversationId)).toEqual([])
        expect(yield* blobCount(conversationId)).toBe(0)
      }))

    it.effect("the tenant's allowed_upload_types replace the default list", () =>
      Effect.gen(function*() {
        const { conversationId, tenant, token } = yield* setUp
        yield* query("UPDATE tenants SET allowed_upload_types = $1 WHERE id = $2", [["application/pdf"], tenant.id])
        const png = yield* upload(token, conversationId, { file: { bytes: PNG, name: "a.png" } })
        expectError(png, 415, "unsupported_media_type", { content_type: "image/png" })
        const pdf = yield* upload(token, conversationId, { file: { bytes: Buffer.from("%PDF-1.4\n%\xe2\xe3\n"), name: "a.pdf" } })
        expect(pdf.status).toBe(201)
        expect(pdf.body.attachment.contentType).toBe("application/pdf")
      }))

    it.effect("a form without its file part, or with another part, is 400", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        expectError(yield* upload(token, conversationId, { text: "no file" }), 400, "bad_request")
        expectError(yield* upload(token, conversationId, { file: { bytes: PNG, name: "a.png" }, extra: "x" }), 400, "bad_request")
        expectError(yield* upload(token, conversationId, { file: { bytes: new Uint8Array(0), name: "empty.png" } }), 400, "bad_request")
        expect(yield* blobCount(conversationId)).toBe(0)
      }))

    it.effect("a file of exactly UPLOAD_MAX_BYTES is taken; one byte more is 413 with details.max_bytes", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const fits = yield* upload(token, conversationId, { file: { bytes: Buffer.alloc(MAX_BYTES, "a"), name: "a.txt" } })
        expect(fits.status).toBe(201)
        const over = yield* upload(token, conversationId, { file: { bytes: Buffer.alloc(MAX_BYTES + 1, "a"), name: "a.txt" } })
        expectError(over, 413, "payload_too_large", { max_bytes: MAX_BYTES })
        expect(yield* blobCount(conversationId)).toBe(1)
      }))

    it.effect("a chunked body far over the limit is refused while it streams: the answer comes before the client has sent it", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const { baseUrl } = yield* TestNode
        const boundary = "----parley-test-boundary"
        const chunk = Buffer.alloc(65_536, "a")
        const chunks = 512 // 32 MiB, 512 times the limit
        const result = yield* Effect.async<{ status: number; body: any; sentChunks: number }, Error>((resume) => {
          // No content-length: the node learns the size only by reading.
          const req = httpRequest(`${baseUrl}/api/v1/chat/conversations/${conversationId}/upload`, {
            method: "POST",
            headers: {
              authorization: `Bearer ${token}`,
              "content-type": `multipart/form-data; boundary=${boundary}`,
              "x-forwarded-for": randomIp()
            }
          })
          let sent = 0
          let sentAtAnswer = -1
          req.on("response", (response) => {
            sentAtAnswer = sent
            const parts: Array<Buffer> = []
            response.on("data", (part: Buffer) => parts.push(part))
            response.on("end", () =>
              resume(Effect.succeed({ status: response.statusCode ?? 0, body: JSON.parse(Buffer.concat(parts).toString()), sentChunks: sentAtAnswer })))
          })
          req.on("error", (error) => {
            if (sentAtAnswer < 0) resume(Effect.fail(error))
          })
          void (async () => {
            req.write(`--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="big.txt"\r\ncontent-type: text/plain\r\n\r\n`)
            for (; sent < chunks && sentAtAnswer < 0 && !req.destroyed; sent++) {
              if (!req.write(chunk)) await new Promise((resolve) => req.once("drain", resolve))
            }
            if (!req.destroyed) req.end(`\r\n--${boundary}--\r\n`)
          })()
          return Effect.sync(() => req.destroy())
        })
        expectError(result, 413, "payload_too_large", { max_bytes: MAX_BYTES })
        expect(result.sentChunks).toBeLessThan(chunks / 2)
        expect(yield* blobCount(conversationId)).toBe(0)
      }))

    it.effect("a declared content-length over the limit is 413 before the body is read", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const { baseUrl } = yield* TestNode
        // Only a few bytes follow the header: the answer cannot wait for the body.
        const reply = yield* rawRequest(baseUrl, {
          method: "POST",
          path: `/api/v1/chat/conversations/${conversationId}/upload`,
          headers: {
            authorization: `Bearer ${token}`,
            "content-type": "multipart/form-data; boundary=x",
            "content-length": String(MAX_BYTES * 8),
            "x-forwarded-for": randomIp()
          },
          chunks: ["--x\r\n"]
        })
        expectError({ status: reply.status, body: JSON.parse(reply.text) }, 413, "payload_too_large", { max_bytes: MAX_BYTES })
      }))

    it.effect("a text the store refuses (U+0000) is 422 after the file was stored, and the file goes with it", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const reply = yield* upload(token, conversationId, { file: { bytes: PNG, name: "a.png" }, text: "a\u0000b" })
        expect({ status: reply.status, code: reply.body.error.code, fields: Object.keys(reply.body.error.details) }).toEqual({
          status: 422,
          code: "invalid_message",
          fields: ["text"]
        })
        expect(yield* blobCount(conversationId)).toBe(0)
      }))

    it.effect("a closed conversation is 409 conversation_closed, and nothing is stored", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        yield* query("UPDATE conversations SET status = 'closed', closed_at = now() WHERE id = $1", [conversationId])
        expectError(yield* upload(token, conversationId, { file: { bytes: PNG, name: "a.png" } }), 409, "conversation_closed")
        expect(yield* blobCount(conversationId)).toBe(0)
        expect(yield* storedActivities(conversationId)).toEqual([])
      }))

    it.effect("token rules: 401 without a valid token, 403 for another conversation or without write, 404 for another channel's or tenant's", () =>
      Effect.gen(function*() {
        const { channel, conversationId, tenant, token } = yield* setUp
        const file = { file: { bytes: PNG, name: "a.png" } }
        expect((yield* upload(token, conversationId, file)).status).toBe(201)
        expectError(yield* upload(undefined, conversationId, file), 401, "unauthorized")
        expectError(yield* upload(channel.secret, conversationId, file), 401, "unauthorized")
        expectError(yield* upload(yield* boundToken(tenant.id, channel.id, conversationId, -60), conversationId, file), 401, "token_expired")
        const sibling = yield* insertConversation(tenant.id, channel.id)
        expectError(yield* upload(yield* boundToken(tenant.id, channel.id, sibling), conversationId, file), 403, "forbidden")
        const readOnly = yield* generateToken(channel.secret, { user: { id: "user-1" }, permissions: ["read"] })
        expectError(yield* upload(readOnly, conversationId, file), 403, "insufficient_permission", { required: ["write"] })
        const otherChannel = yield* insertChannel(tenant.id)
        expectError(yield* upload(yield* generateToken(otherChannel.secret), conversationId, file), 404, "not_found")
        expectError(yield* upload((yield* setUp).token, conversationId, file), 404, "not_found")
        expect(yield* blobCount(conversationId)).toBe(1)
      }))

    it.effect("the upload bucket counts per tenant, with the tenant's override: 429 with details.retry_after_ms", () =>
      Effect.gen(function*() {
        // A window of a day, as the rate-limit tests use: the three uploads fall in one window.
        const tenant = yield* createTenant({ limits: { upload: { limit: 2, scale_ms: 86_400_000 } } })
        const channel = yield* insertChannel(tenant.id)
        const conversationId = yield* insertConversation(tenant.id, channel.id)
        const token = yield* generateToken(channel.secret)
        const file = { file: { bytes: PNG, name: "a.png" } }
        expect((yield* upload(token, conversationId, file)).status).toBe(201)
        // Another conversation and token of the same tenant share the bucket.
        const sibling = yield* insertConversation(tenant.id, channel.id)
        expect((yield* upload(yield* boundToken(tenant.id, channel.id, sibling), sibling, file)).status).toBe(201)
        const limited = yield* upload(token, conversationId, file)
        expectError(limited, 429, "rate_limited", { retry_after_ms: expect.any(Number) })
        expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1)
        expect(yield* blobCount(conversationId)).toBe(1)
        // Another tenant's bucket is its own.
        const other = yield* setUp
        expect((yield* upload(other.token, other.conversationId, file)).status).toBe(201)
      }))

    it.effect("a store that fails is 502 upstream_unavailable, and no message is posted", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        yield* holdTable("blobs")
        expectError(yield* upload(token, conversationId, { file: { bytes: PNG, name: "a.png" } }), 502, "upstream_unavailable")
        expect(yield* storedActivities(conversationId)).toEqual([])
      }).pipe(Effect.scoped))
  })

  describe("GET /attachments/:id", () => {
    it.effect("answers the stored bytes with the sniffed type, as an attachment with a safe name, never sniffed by the browser", () =>
      Effect.gen(function*() {
        const { conversationId, token } = yield* setUp
        const uploaded = yield* upload(token, conversationId, { file: { bytes: PNG, name: "n\u00e4me (1).png", type: "text/html" } })
        expect(uploaded.status).toBe(201)
        // Whatever the client accepts: it cannot know the type of a file before it has it.
        const reply = yield* download(uploaded.body.attachment.contentUrl, token, { accept: "image/png" })
        expect(reply.status).toBe(200)
        expect(reply.bytes.equals(PNG)).toBe(true)
        expect(reply.headers.get("content-type")).toBe("image/png")
        expect(reply.headers.get("content-disposition")).toBe(`attachment; filename="n_me (1).png"; filename*=UTF-8''n%C3%A4me%20%281%29.png`)
        expect(reply.headers.get("x-content-type-options")).toBe("nosniff")
      }))

    it.effect("the offered name cannot break out of its header parameter", () =>
      Effect.sync(() => {
        expect(contentDisposition(`a"; filename="evil.html\\%.png`)).toBe(
          `attachment; filename="a_; filename=_evil.html__.png"; filename*=UTF-8''a%22%3B%20filename%3D%22evil.html%5C%25.png`
        )
        expect(safeFileName("C:\\Users\\me\\\u0000cat\u202e.png")).toBe("cat.png")
        expect(safeFileName("../")).toBe("file")
      }))

    it.effect("a file of another conversation (bound token), channel or tenant is 404, as an unknown one", () =>
      Effect.gen(function*() {
        const { channel, conversationId, tenant, token } = yield* setUp
        const sibling = yield* insertConversation(tenant.id, channel.id)
        const own = yield* upload(token, conversationId, { file: { bytes: PNG, name: "own.png" } })
        const other = yield* upload(token, sibling, { file: { bytes: PNG, name: "other.png" } })
        const bound = yield* boundToken(tenant.id, channel.id, conversationId)
        expect((yield* download(own.body.attachment.contentUrl, bound)).status).toBe(200)
        expectError(yield* download(other.body.attachment.contentUrl, bound), 404, "not_found")
        // Unscoped tokens reach every conversation of their channel, and only those.
        expect((yield* download(other.body.attachment.contentUrl, token)).status).toBe(200)
        const otherChannel = yield* insertChannel(tenant.id)
        expectError(yield* download(own.body.attachment.contentUrl, yield* generateToken(otherChannel.secret)), 404, "not_found")
        const stranger = yield* setUp
        expectError(yield* download(own.body.attachment.contentUrl, stranger.token), 404, "not_found")
        expectError(yield* chat("GET", `/attachments/${crypto.randomUUID()}`, { bearer: token }), 404, "not_found")
        expectError(yield* chat("GET", "/attachments/not-a-uuid", { bearer: token }), 400, "bad_request")
      }))

    it.effect("needs a valid token with read: 401 without one, 403 insufficient_permission without read", () =>
      Effect.gen(function*() {
        const { channel, conversationId, token } = yield* setUp
        const uploaded = yield* upload(token, conversationId, { file: { bytes: PNG, name: "a.png" } })
        const url = uploaded.body.attachment.contentUrl
        expectError(yield* download(url, undefined), 401, "unauthorized")
        expectError(yield* download(url, channel.secret), 401, "unauthorized")
        const writeOnly = yield* generateToken(channel.secret, { user: { id: "user-1" }, permissions: ["write"] })
        expectError(yield* download(url, writeOnly), 403, "insufficient_permission", { required: ["read"] })
      }))
  })
})
