import type { Activity, ActivityDraft } from "../domain/Activity.js"
import { redactedActivity } from "./DeliveryPayload.js"

/** A delivery row planned for a new activity; its payload is the channel's copy of the stored activity, redacted. */
export interface PlannedDelivery {
  readonly id: string
  readonly activityId: string
  readonly channelId: string
  /** The draft as this channel gets it: its transformations applied (the draft itself when there are none). */
  readonly copy: ActivityDraft
  /** A routing rule's target (the conversation is linked to the channel with role `target`), not the origin. */
  readonly routed: boolean
}

/** A planned delivery as a `deliveries` row of the activity it carries (its `inserted_at` is the writer's to fill in). */
export const deliveryRow = (delivery: Pick<PlannedDelivery, "id" | "activityId" | "channelId">, activity: Activity) => ({
  id: delivery.id,
  tenant_id: activity.tenant_id,
  activity_id: delivery.activityId,
  conversation_id: activity.conversation_id,
  channel_id: delivery.channelId,
  payload: redactedActivity(activity)
})
