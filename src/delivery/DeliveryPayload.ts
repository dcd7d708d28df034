import { Activity } from "../domain/Activity.js"
import { isSensitiveKey, REDACTED, redactSensitive } from "../domain/Redaction.js"

// An activity's own field names are fixed, so which of them hide their value is decided once;
// only the free-form fields are walked.
const HIDDEN_FIELDS = (Object.keys(Activity.fields) as ReadonlyArray<keyof Activity>).filter(isSensitiveKey)
const FREE_FORM_FIELDS = ["attachments", "metadata", "payload"] as const

/** A delivery's payload: `redactSensitive(activity)`, without looking at the names of the activity's own fields. */
export const redactedActivity = (activity: Activity): Record<string, unknown> => {
  const out: Record<string, unknown> = { ...activity }
  for (const field of FREE_FORM_FIELDS) out[field] = redactSensitive(activity[field])
  for (const field of HIDDEN_FIELDS) if (out[field] !== null) out[field] = REDACTED
  return out
}
