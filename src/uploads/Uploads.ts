import { Effect } from "effect"
import type { ClientPrincipal } from "../auth/ClientAccess.js"
import { Conversations } from "../conversations/Conversations.js"
import { BlobStore } from "../db/BlobStore.js"
import { StorageUnavailable, UnsupportedMediaType } from "../domain/ApiError.js"
import type { ConversationId } from "../domain/Conversation.js"
import { Tenants } from "../tenants/Tenants.js"
import { isAllowedUploadType, sniffUploadType } from "./UploadTypes.js"

/** A file as it arrived: all its bytes (within `UPLOAD_MAX_BYTES`) and the name it came with. */
export interface UploadedFile {
  readonly bytes: Uint8Array
  readonly name: string
}

/** The attachment object of an uploaded file (CONTRACT.md §7). */
export interface UploadAttachment {
  readonly contentType: string
  readonly contentUrl: string
  readonly name: string
  readonly size: number
}

const storageUnavailable = () => new StorageUnavailable({ message: "the file could not be stored, retry later" })

/**
 * Uploaded files: each stored in the `BlobStore` and posted as a `message` whose attachment is the
 * file, through the same append as every other activity (seq, closed check, conversation core).
 */
export class Uploads extends Effect.Service<Uploads>()("parley/Uploads", {
  effect: Effect.gen(function*() {
    const blobs = yield* BlobStore
    const conversations = yield* Conversations
    const tenants = yield* Tenants

    /** Drops a stored file whose message was not stored; a failure leaves an unreachable row, worth a line. */
    const forget = (blobId: string) =>
      blobs.remove(blobId).pipe(
        Effect.catchTag("StorageFailed", () =>
          Effect.logWarning("uploaded file left without its message").pipe(Effect.annotateLogs({ blob_id: blobId })))
      )

    /**
     * Checks the sniffed type (415), stores the file (502 on failure) and appends the message. A refused
     * message takes the file with it; one with an unknown outcome (502) keeps it, as it may be stored.
     */
    const attach = Effect.fn("Uploads.attach")(function*(
      client: ClientPrincipal,
      conversationId: ConversationId,
      file: UploadedFile,
      text: string | null,
      attachmentUrl: (id: string) => string,
      arrivedAt: number
    ) {
      const tenant = yield* tenants.get(client.claims.tid)
      const contentType = yield* sniffUploadType(file.bytes)
      if (!isAllowedUploadType(tenant.allowed_upload_types, contentType)) {
        return yield* new UnsupportedMediaType({ message: `files of type ${contentType} are not accepted`, content_type: contentType })
      }
      const blobId = yield* blobs.put({
        tenantId: client.tenantId,
        conversationId,
        contentType,
        name: file.name,
        bytes: file.bytes
      }).pipe(Effect.catchTag("StorageFailed", () => Effect.fail(storageUnavailable())))
      const attachment: UploadAttachment = { contentType, contentUrl: attachmentUrl(blobId), name: file.name, size: file.bytes.byteLength }
      const activity = yield* conversations.append(
        { tenantId: client.claims.tid, channelId: client.claims.cid },
        conversationId,
        { type: "message", text, attachments: [attachment], sender: client.userId ?? "user" },
        { idempotencyKey: null, sourceChannelId: null, arrivedAt }
      ).pipe(Effect.tapError((error) => error._tag === "OutcomeUnknown" ? Effect.void : forget(blobId)))
      return { id: activity.id, attachment }
    })

    /** The tenant's file of that id; the caller applies the client's reach to its conversation. */
    const find = (tenantId: string, id: string) =>
      blobs.find(tenantId, id).pipe(Effect.catchTag("StorageFailed", () => Effect.fail(storageUnavailable())))

    return { attach, find } as const
  }),
  dependencies: [BlobStore.Default]
}) {}
