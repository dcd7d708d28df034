import { Schema } from "effect"
import { Activity } from "../domain/Activity.js"

/** Columns of `activities` in the order `Activity` lists them. */
export const ACTIVITY_COLUMNS =
  "id, type, sender, text, attachments, metadata, idempotency_key, seq, reply_to_id, message_type, payload, " +
  "source_channel_id, edited_at, deleted_at, conversation_id, tenant_id, inserted_at"

/** An `activities` row as pg returns it (int8 as a string) decoded into an `Activity`. */
export const ActivityFromRow = Schema.Struct({ ...Activity.fields, seq: Schema.NumberFromString })
