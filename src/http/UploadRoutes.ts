import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as Multipart from "@effect/platform/Multipart"
import { Effect, Layer, Option, Schema, Stream } from "effect"
import { CurrentClient, requireConversationBinding, requirePermission } from "../auth/ClientAccess.js"
import { ClientTokens } from "../auth/ClientTokens.js"
import { AppConfig } from "../config/AppConfig.js"
import { Limits } from "../conversations/ActivityRules.js"
import { Conversations } from "../conversations/Conversations.js"
import { BadRequest, ConversationClosed, InvalidMessage, NotFound, PayloadTooLarge, Unauthorized } from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { type UploadedFile, Uploads } from "../uploads/Uploads.js"
import { bearerCredential } from "./BearerCredential.js"
import { RequestArrival } from "./RequestId.js"
import type { RouteSpec } from "./RouteTable.js"
import { httpUrl } from "./PublicUrl.js"

const UPLOAD_PATH = "/api/v1/chat/conversations/:id/upload"

/** The download route: it answers a file's bytes, whatever the request's `Accept` names. */
export const ATTACHMENT_PATH = "/api/v1/chat/attachments/:id"

/** The client API's upload routes, for the route table. */
export const uploadRoutes: ReadonlyArray<RouteSpec> = [
  { method: "POST", path: UPLOAD_PATH },
  { method: "GET", path: ATTACHMENT_PATH }
]

/** Room in a form beside its file: the `text` field and the parts' headers and boundaries. */
const FORM_OVERHEAD_BYTES = Limits.text + 65_536

/** A form has a `file` part and a `text` field; a third part is refused before it is read. */
const MAX_PARTS = 2

/** Longest file name kept, in characters. */
const MAX_NAME_CHARS = 255

/** A form as read so far. */
interface Form {
  readonly file: UploadedFile | null
  readonly text: string | null
}

const malformed = (message: string) => new BadRequest({ message })

/**
 * The name a file is kept and offered under: its last path segment, without control characters,
 * at most `MAX_NAME_CHARS` characters; `file` when nothing is left.
 */
export const safeFileName = (sent: string) => {
  const name = Array.from(sent.split(/[/\\]/).pop()!.replace(/[\p{Cc}\p{Cf}]/gu, "").trim()).slice(0, MAX_NAME_CHARS).join("")
  return name === "" || name === "." || name === ".." ? "file" : name
}

/**
 * Reads a `multipart/form-data` upload as it streams in: the file's bytes are counted as they
 * arrive and reading stops at the first byte over `maxBytes` (413), so no oversize body is held.
 */
const readForm = (request: HttpServerRequest.HttpServerRequest, maxBytes: number) => {
  const tooLarge = () => new PayloadTooLarge({ message: `the file is larger than ${maxBytes} bytes`, max_bytes: maxBytes })
  const readFile = (part: Multipart.File) =>
    part.content.pipe(
      Stream.runFoldEffect({ chunks: [] as Array<Uint8Array>, size: 0 }, (read, chunk) => {
        if (read.size + chunk.byteLength > maxBytes) return Effect.fail(tooLarge())
        read.chunks.push(chunk)
        return Effect.succeed({ chunks: read.chunks, size: read.size + chunk.byteLength })
      }),
      Effect.map((read): UploadedFile => ({ bytes: Buffer.concat(read.chunks, read.size), name: safeFileName(part.name) }))
    )
  const addPart = (form: Form, part: Multipart.Part): Effect.Effect<Form, BadRequest | PayloadTooLarge | Multipart.MultipartError> =>
    part._tag === "File" && part.key === "file" && form.file === null
      ? Effect.map(readFile(part), (file) => ({ ...form, file }))
      : part._tag === "Field" && part.key === "text" && form.text === null
      ? Effect.succeed({ ...form, text: part.value })
      : Effect.fail(malformed(`unexpected part ${JSON.stringify(part.key)}: send one file part named file and at most one text field`))
  const declared = Number(request.headers["content-length"])
  if (declared > maxBytes + FORM_OVERHEAD_BYTES) return Effect.fail(tooLarge())
  if (!/^multipart\/form-data\s*;/i.test(request.headers["content-type"] ?? "")) {
    return Effect.fail(malformed("an upload is multipart/form-data with a part named file"))
  }
  return request.multipartStream.pipe(
    Multipart.withLimitsStream({
      maxParts: Option.some(MAX_PARTS),
      maxFieldSize: Limits.text,
      maxFileSize: Option.none(),
      // Replaces the edge's limit for JSON bodies.
      maxTotalSize: Option.some(maxBytes + FORM_OVERHEAD_BYTES)
    }),
    Stream.runFoldEffect({ file: null, text: null } as Form, addPart),
    Effect.catchTag("MultipartError", (error) =>
      Effect.fail(
        error.reason === "BodyTooLarge" || error.reason === "FileTooLarge"
          ? tooLarge()
          : error.reason === "FieldTooLarge"
          ? new InvalidMessage({ message: "the activity is invalid", fields: { text: [`at most ${Limits.text} bytes`] } })
          : malformed(error.reason === "TooManyParts" ? "send one file part named file and at most one text field" : "malformed multipart body")
      )),
    Effect.flatMap(({ file, text }) =>
      file === null
        ? Effect.fail(malformed("a file part named file is required"))
        : file.bytes.byteLength === 0
        ? Effect.fail(malformed("the file is empty"))
        : Effect.succeed({ file, text })
    )
  )
}

/**
 * `Content-Disposition: attachment` offering a file's name: an ASCII stand-in in `filename` (quotes,
 * backslashes and non-ASCII replaced) and the exact name in `filename*` (RFC 6266).
 */
export const contentDisposition = (name: string) => {
  const ascii = name.replace(/[^\x20-\x7e]|["\\%]/g, "_")
  const exact = encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  return `attachment; filename="${ascii}"; filename*=UTF-8''${exact}`
}

/** The client token of a raw route's request, as `ClientAuth` finds it on the API's routes. */
const authenticate = (tokens: ClientTokens, request: HttpServerRequest.HttpServerRequest) => {
  const token = bearerCredential(request)
  return token === undefined ? Effect.fail(new Unauthorized({ message: "missing Authorization: Bearer token" })) : tokens.authenticate(token)
}

const conversationPath = HttpLayerRouter.schemaPathParams(Schema.Struct({ id: ConversationId })).pipe(
  Effect.mapError(() => malformed("malformed conversation id"))
)

const attachmentPath = HttpLayerRouter.schemaPathParams(Schema.Struct({ id: Schema.UUID })).pipe(
  Effect.mapError(() => malformed("malformed attachment id"))
)

/**
 * `POST /api/v1/chat/conversations/:id/upload` and `GET /api/v1/chat/attachments/:id` (client-api.md,
 * CONTRACT.md §7).
 */
const UploadRoutesWithoutUploads = HttpLayerRouter.addAll(Effect.gen(function*() {
  const config = yield* AppConfig
  const tokens = yield* ClientTokens
  const conversations = yield* Conversations
  const uploads = yield* Uploads
  const limiter = yield* RateLimiter

  /** The upload once its client is known (`CurrentClient`). */
  const uploadAs = (request: HttpServerRequest.HttpServerRequest, id: ConversationId, arrivedAt: number) =>
    Effect.gen(function*() {
      const client = yield* requireConversationBinding(id)
      yield* requirePermission("write")
      yield* limiter.consume("upload", client.tenantId, client.tenantId)
      // Refused before the body is read: a closed or foreign conversation takes no upload.
      const conversation = yield* conversations.get({ tenantId: client.claims.tid, channelId: client.claims.cid }, id, { channels: false })
      if (conversation.status === "closed") return yield* new ConversationClosed({ message: "the conversation is closed" })
      const form = yield* readForm(request, config.uploadMaxBytes)
      const attachmentUrl = (blobId: string) =>
        httpUrl(request, config.trustedProxies, `${config.host}:${config.port}`, ATTACHMENT_PATH.replace(":id", blobId))
      const uploaded = yield* uploads.attach(client, id, form.file, form.text, attachmentUrl, arrivedAt)
      return HttpServerResponse.unsafeJson(uploaded, { status: 201 })
    })

  const upload = Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const arrivedAt = (yield* RequestArrival) ?? Date.now()
    const { id } = yield* conversationPath
    const client = yield* authenticate(tokens, request)
    return yield* uploadAs(request, id, arrivedAt).pipe(Effect.provideService(CurrentClient, client))
  })

  /**
   * A file within the client's reach: its tenant and channel, and for a conversation-bound token its
   * conversation; any other is 404, as a missing one (its existence is not revealed).
   */
  const download = Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const { id } = yield* attachmentPath
    const client = yield* authenticate(tokens, request)
    yield* requirePermission("read").pipe(Effect.provideService(CurrentClient, client))
    const found = yield* uploads.find(client.tenantId, id)
    if (
      Option.isNone(found) || found.value.channel_id !== client.channelId ||
      (client.conversationId !== null && found.value.conversation_id !== client.conversationId)
    ) return yield* new NotFound({ message: `attachment ${id} not found` })
    return HttpServerResponse.uint8Array(found.value.bytes, {
      contentType: found.value.content_type,
      headers: { "content-disposition": contentDisposition(found.value.name), "x-content-type-options": "nosniff" }
    })
  })

  return [HttpLayerRouter.route("POST", UPLOAD_PATH, upload), HttpLayerRouter.route("GET", ATTACHMENT_PATH, download)]
}))

/** The upload routes with their `Uploads` service; the node provides the rest. */
export const UploadRoutes = UploadRoutesWithoutUploads.pipe(Layer.provide(Uploads.Default))
