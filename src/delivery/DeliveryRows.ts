import type { Activity } from "../domain/Activity.js"
import { redactedActivity } from "./DeliveryPayload.js"

/** A delivery row planned for a new activity; its payload is the stored activity, redacted. */
export interface PlannedDelivery {
  readonly id: string
  readonly activityId: string
  readonly channelId: string
}

/** A planned delivery as a `deliveries` row of the activity it carries (its `inserted_at` is the writer's to fill in). */
export const deliveryRow = (delivery: PlannedDelivery, activity: Activity) => ({
  id: delivery.id,
  tenant_id: activity.tenant_id,
  activity_id: delivery.activityId,
  conversation_id: activity.conversation_id,
  channel_id: delivery.channelId,
  payload: redactedActivity(activity)
})
