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
import { BadRequest, ConversationClosed, InvalidMessage, PayloadTooLarge, Unauthorized } from "../domain/ApiError.js"
import { ConversationId } from "../domain/Conversation.js"
import { type UploadedFile, Uploads } from "../uploads/Uploads.js"
import { bearerCredential } from "./BearerCredential.js"
import { RequestArrival } from "./RequestId.js"
import type { RouteSpec } from "./RouteTable.js"

const UPLOAD_PATH = "/api/v1/chat/conversations/:id/upload"
const ATTACHMENT_PATH = "/api/v1/chat/attachments/:id"

/** The client API's upload routes, for the route table. */
export const uploadRoutes: ReadonlyArray<RouteSpec> = [{ method: "POST", path: UPLOAD_PATH }]

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

/** The client token of a raw route's request, as `ClientAuth` finds it on the API's routes. */
const authenticate = (tokens: ClientTokens, request: HttpServerRequest.HttpServerRequest) => {
  const token = bearerCredential(request)
  return token === undefined ? Effect.fail(new Unauthorized({ message: "missing Authorization: Bearer token" })) : tokens.authenticate(token)
}

const conversationPath = HttpLayerRouter.schemaPathParams(Schema.Struct({ id: ConversationId })).pipe(
  Effect.mapError(() => malformed("malformed conversation id"))
)

/** `POST /api/v1/chat/conversations/:id/upload` (client-api.md, CONTRACT.md §7). */
const UploadRoutesWithoutUploads = HttpLayerRouter.addAll(Effect.gen(function*() {
  const config = yield* AppConfig
  const tokens = yield* ClientTokens
  const conversations = yield* Conversations
  const uploads = yield* Uploads

  /** The upload once its client is known (`CurrentClient`). */
  const uploadAs = (request: HttpServerRequest.HttpServerRequest, id: ConversationId, arrivedAt: number) =>
    Effect.gen(function*() {
      const client = yield* requireConversationBinding(id)
      yield* requirePermission("write")
      // Refused before the body is read: a closed or foreign conversation takes no upload.
      const conversation = yield* conversations.get({ tenantId: client.claims.tid, channelId: client.claims.cid }, id, { channels: false })
      if (conversation.status === "closed") return yield* new ConversationClosed({ message: "the conversation is closed" })
      const form = yield* readForm(request, config.uploadMaxBytes)
      const base = `http://${request.headers["host"] ?? `${config.host}:${config.port}`}`
      const attachmentUrl = (blobId: string) => `${base}${ATTACHMENT_PATH.replace(":id", blobId)}`
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

  return [HttpLayerRouter.route("POST", UPLOAD_PATH, upload)]
}))

/** The upload routes with their `Uploads` service; the node provides the rest. */
export const UploadRoutes = UploadRoutesWithoutUploads.pipe(Layer.provide(Uploads.Default))
