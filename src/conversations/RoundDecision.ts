import { Exit } from "effect"
import type { Activity, ActivityDraft } from "../domain/Activity.js"
import { clusterUnavailable, ConversationClosed, databaseUnavailable, InvalidMessage, type Unavailable } from "../domain/ApiError.js"
import { DELETED_TARGET, refusedOnDeletedTarget } from "./ActivityRules.js"
import type { PlannedDelivery } from "../delivery/DeliveryRows.js"
import { MAX_STATEMENT_JSON } from "./ActivityWriter.js"
import type { TenantId } from "../domain/Tenant.js"
import type { Planner } from "../routing/RoutingPlan.js"
import type { ConversationState } from "./ConversationState.js"

/**
 * An append as a round decides it. `arrivedLate`: it reached the core past its deadline, delayed on
 * the way (shard move, lost owner) rather than in the inbox, and its 503 says so.
 */
export interface AppendCommand {
  readonly _tag: "Append"
  readonly tenantId: TenantId
  readonly draft: ActivityDraft
  readonly deadline: number
  readonly keyCheck?: string | null | undefined
  readonly arrivedLate: boolean
}

/** A close or reopen as a round decides it. */
export interface StatusCommand {
  readonly _tag: "SetStatus"
  readonly arrivedLate: boolean
  readonly tenantId: TenantId
  readonly status: "active" | "closed"
  readonly reason: "manual" | "expired"
  readonly idleSince: string | null
  readonly deadline: number
}

export type RoundCommand = AppendCommand | StatusCommand

/** Commands taken from the inbox in one round; they share one write group. */
const MAX_COMMANDS_PER_ROUND = 256
/**
 * The round's JSON cap past its first command: a group and its delivery copies must fit one statement,
 * or a round of large appends outlasts the statement timeout and re-forms from the same retries.
 */
const MAX_ROUND_JSON = MAX_STATEMENT_JSON / 2

/** How many commands from the head of those waiting the next round takes: at least one, within the bounds above. */
export const roundSize = (waiting: ReadonlyArray<RoundCommand>) => {
  let taken = 0
  let size = 0
  for (const command of waiting) {
    if (taken === MAX_COMMANDS_PER_ROUND) break
    if (command._tag === "Append") size += JSON.stringify(command.draft).length
    if (taken > 0 && size > MAX_ROUND_JSON) break
    taken++
  }
  return taken
}

/** The 503 for a command past its deadline: where the time went decides the reason. */
const lateFailure = (command: RoundCommand) => (command.arrivedLate ? clusterUnavailable() : databaseUnavailable())

const NO_TARGETS: ReadonlyArray<string> = []
const NO_KEY_CHECKS: ReadonlyArray<string> = []

/** The messages a round's edits and reactions name; a round without any (most) allocates nothing. */
export const editTargets = (commands: ReadonlyArray<RoundCommand>): ReadonlyArray<string> => {
  let targets: Array<string> | undefined
  for (const c of commands) {
    if (c._tag === "Append" && c.draft.reply_to_id !== null && refusedOnDeletedTarget(c.draft.type)) {
      (targets ??= []).push(c.draft.reply_to_id)
    }
  }
  return targets ?? NO_TARGETS
}

/**
 * Whether a round looks up what of its appends is stored before writing. First attempts write blind
 * (the write refuses stored keys and draft ids); ADR 0004 lists the cases that look up first.
 */
export const looksUpFirst = (
  commands: ReadonlyArray<RoundCommand>,
  current: ConversationState,
  targets: ReadonlyArray<string>,
  attempt: number,
  now: number
) =>
  attempt > 0 || current.status === "closed" || targets.length > 0 ||
  commands.some((c) => c._tag === "SetStatus" || c.deadline < now)

/**
 * What may be stored when a round reads nothing: an append past its deadline or after a conflict.
 * Status changes are decided on the loaded state, so a re-sent one is never written twice.
 */
export const appendMayBeStored = (attempt: number, now: number) => (command: RoundCommand) =>
  command._tag === "Append" && (attempt > 0 || command.deadline < now)

/** The `conversationUpdate` a real close or reopen appends, from `system`. */
const statusEvent = (status: "active" | "closed", reason: "manual" | "expired"): ActivityDraft => ({
  id: crypto.randomUUID(),
  type: "conversationUpdate",
  sender: "system",
  text: null,
  attachments: [],
  metadata: {
    event: status === "closed" ? "conversation_closed" : "conversation_reopened",
    status,
    reason
  },
  idempotency_key: null,
  reply_to_id: null,
  message_type: null,
  payload: null,
  source_channel_id: null
})

/**
 * The deliveries of a group's drafts (server-apis.md "Routing rules"): to the origin channel and to the
 * targets of the origin's matching rules, each with that channel's copy. The write still drops those
 * to a channel that only receives (its mode is read at write time).
 */
export const planDeliveries = (
  state: ConversationState,
  drafts: ReadonlyArray<ActivityDraft>,
  planOne: Planner,
  at: Date
): Array<PlannedDelivery> => {
  const planned: Array<PlannedDelivery> = []
  for (const draft of drafts) {
    for (const delivery of planOne(draft, state, state.participant, at).deliveries) {
      planned.push({
        id: crypto.randomUUID(),
        activityId: draft.id,
        channelId: delivery.channel_id,
        copy: delivery.activity,
        routed: delivery.rule_id !== null
      })
    }
  }
  return planned
}

/** The answer to a command a round settles without writing it. */
export type RoundAnswer =
  | Exit.Exit<Activity, InvalidMessage | ConversationClosed | Unavailable>
  | Exit.Exit<{ readonly changed: boolean }, Unavailable>

/** What a round does with its commands (see `decide`). */
export interface RoundDecision<C extends RoundCommand> {
  /** Commands settled without a write, with their answers, in the order taken. */
  readonly answered: ReadonlyArray<readonly [C, RoundAnswer]>
  /** The group to write, in order. */
  readonly drafts: ReadonlyArray<ActivityDraft>
  /** Commands waiting for the write, each with the id of the draft that answers it (null: a status change). */
  readonly waiting: ReadonlyArray<readonly [C, string | null]>
  /** The conversation's status once the group is written, and the change the group makes, if any. */
  readonly status: "active" | "closed"
  readonly statusChange: "active" | "closed" | null
  /** The group is written only while every command in it may still be. */
  readonly deadline: number
  /** API keys the write checks for the appends it carries. */
  readonly keyChecks: ReadonlyArray<string>
}

const NO_ANSWERS: ReadonlyArray<never> = []

/**
 * Decides a round: settles what it can at once and collects the drafts to write as one group. Each
 * command sees the state the earlier ones leave, so an append after a close in the round is refused.
 */
export const decide = <C extends RoundCommand>(
  commands: ReadonlyArray<C>,
  current: ConversationState,
  existing: ReadonlyArray<Activity>,
  deletedBefore: ReadonlySet<string>,
  now: number
): RoundDecision<C> => {
  // What is stored already, by id and key (most rounds look nothing up: no maps then).
  const byId = existing.length === 0 ? undefined : new Map<string, Activity>()
  const byKey = existing.length === 0 ? undefined : new Map<string, Activity>()
  for (const activity of existing) {
    byId!.set(activity.id, activity)
    if (activity.idempotency_key !== null) byKey!.set(activity.idempotency_key, activity)
  }
  // Made for the first command settled at once (most rounds settle none).
  let answered: Array<readonly [C, RoundAnswer]> | undefined
  const drafts: Array<ActivityDraft> = []
  const waiting: Array<readonly [C, string | null]> = []
  // Keys of drafts of this round (made for the first one).
  let newKeys: Map<string, string> | undefined
  // Messages a delete earlier in this round deletes (made only when a round has one).
  let deletedInRound: Set<string> | undefined
  let status = current.status
  let statusChange: "active" | "closed" | null = null
  let deadline = Infinity
  // Most rounds have none.
  let keyChecks: Array<string> | undefined

  for (const command of commands) {
    if (command._tag === "Append") {
      const { draft } = command
      const key = draft.idempotency_key
      const known = byId?.get(draft.id) ?? (key === null ? undefined : byKey?.get(key))
      const sameKey = key === null ? undefined : newKeys?.get(key)
      if (known !== undefined) (answered ??= []).push([command, Exit.succeed(known)])
      else if (sameKey !== undefined) waiting.push([command, sameKey])
      else if (draft.reply_to_id !== null && refusedOnDeletedTarget(draft.type) &&
        (deletedBefore.has(draft.reply_to_id) || deletedInRound?.has(draft.reply_to_id) === true)
      ) {
        (answered ??= []).push([
          command,
          Exit.fail(new InvalidMessage({ message: "the activity is invalid", fields: { reply_to_id: [DELETED_TARGET] } }))
        ])
      } else if (status === "closed") {
        (answered ??= []).push([command, Exit.fail(new ConversationClosed({ message: "the conversation is closed" }))])
      } else if (command.deadline < now) {
        (answered ??= []).push([command, Exit.fail(lateFailure(command))])
      } else {
        drafts.push(draft)
        if (draft.type === "messageDelete" && draft.reply_to_id !== null) (deletedInRound ??= new Set()).add(draft.reply_to_id)
        if (key !== null) (newKeys ??= new Map()).set(key, draft.id)
        waiting.push([command, draft.id])
        deadline = Math.min(deadline, command.deadline)
        if (command.keyCheck != null && keyChecks?.includes(command.keyCheck) !== true) (keyChecks ??= []).push(command.keyCheck)
      }
    } else if (
      command.status === status ||
      // An expiry is void once anything happened since its idle mark, in this round too.
      (command.idleSince !== null && (drafts.length > 0 || Date.parse(current.updated_at) > Date.parse(command.idleSince)))
    ) {
      (answered ??= []).push([command, Exit.succeed({ changed: false })])
    } else if (command.deadline < now) {
      (answered ??= []).push([command, Exit.fail(lateFailure(command))])
    } else {
      drafts.push(statusEvent(command.status, command.reason))
      status = command.status
      statusChange = status
      waiting.push([command, null])
      deadline = Math.min(deadline, command.deadline)
    }
  }
  return {
    answered: answered ?? NO_ANSWERS,
    drafts,
    waiting,
    status,
    statusChange,
    deadline,
    keyChecks: keyChecks ?? NO_KEY_CHECKS
  }
}
