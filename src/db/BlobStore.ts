import { SqlClient, SqlSchema } from "@effect/sql"
import { Data, Effect, Schema } from "effect"

/** A file to store with the conversation it was uploaded to. */
export interface NewBlob {
  readonly tenantId: string
  readonly conversationId: string
  readonly contentType: string
  readonly name: string
  readonly bytes: Uint8Array
}

const StoredBlob = Schema.Struct({
  id: Schema.String,
  tenant_id: Schema.String,
  conversation_id: Schema.String,
  /** The channel of the conversation, for the client API's "own channel" rule. */
  channel_id: Schema.String,
  content_type: Schema.String,
  name: Schema.String,
  size: Schema.Number,
  bytes: Schema.Uint8ArrayFromSelf
})

/** A stored file and where it belongs. */
export type StoredBlob = typeof StoredBlob.Type

/** The store did not answer or refused the file: the caller answers 502 `upstream_unavailable`. */
export class StorageFailed extends Data.TaggedError("StorageFailed")<{ readonly cause: unknown }> {}

const storageFailed = (cause: unknown) => Effect.fail(new StorageFailed({ cause }))

/** Uploaded files in PostgreSQL (a `bytea` per file), so that every node serves every file. */
export class BlobStore extends Effect.Service<BlobStore>()("parley/BlobStore", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const findBlob = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: Schema.String, id: Schema.String }),
      Result: StoredBlob,
      execute: ({ id, tenantId }) =>
        sql`SELECT b.id, b.tenant_id, b.conversation_id, c.channel_id, b.content_type, b.name, b.size, b.bytes
            FROM blobs b JOIN conversations c ON c.id = b.conversation_id
            WHERE b.id = ${id} AND b.tenant_id = ${tenantId}`
    })

    /** Stores the file; its new id. */
    const put = (blob: NewBlob) =>
      Effect.suspend(() => {
        const id = crypto.randomUUID()
        return sql`
          INSERT INTO blobs (id, tenant_id, conversation_id, content_type, name, size, bytes)
          VALUES (${id}, ${blob.tenantId}, ${blob.conversationId}, ${blob.contentType}, ${blob.name},
                  ${blob.bytes.byteLength}, ${Buffer.from(blob.bytes.buffer, blob.bytes.byteOffset, blob.bytes.byteLength)})
        `.pipe(Effect.as(id))
      }).pipe(Effect.catchTag("SqlError", storageFailed))

    /** The tenant's file of that id, if there is one. */
    const find = (tenantId: string, id: string) =>
      findBlob({ tenantId, id }).pipe(
        Effect.catchTag("SqlError", storageFailed),
        // A row that breaks its schema is a bug.
        Effect.catchTag("ParseError", Effect.die)
      )

    /** Drops a file whose activity was not stored. */
    const remove = (id: string) => sql`DELETE FROM blobs WHERE id = ${id}`.pipe(Effect.asVoid, Effect.catchTag("SqlError", storageFailed))

    return { put, find, remove } as const
  })
}) {}
