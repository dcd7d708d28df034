import { Cause, Data, Effect, Either, Option, Schedule } from "effect"
import { answerWithin } from "../concurrency/WorkQueue.js"
import { orUnavailable } from "../db/SqlFailure.js"
import type { Activity, ActivityDraft } from "../domain/Activity.js"
import {
  BadRequest,
  clusterUnavailable,
  databaseUnavailable,
  InvalidMessage,
  NotFound,
  OutcomeUnknown,
  Unavailable
} from "../domain/ApiError.js"
import type { ChannelId } from "../domain/Channel.js"
import type { Conversation, ConversationId } from "../domain/Conversation.js"
import type { TenantId } from "../domain/Tenant.js"
import { decodeWatermark } from "../domain/Watermark.js"
import {
  type ActivityInput,
  checkActivity,
  type CheckedActivity,
  DELETED_TARGET,
  refusedOnDeletedTarget
} from "./ActivityRules.js"
import { ActivityRepo } from "./ActivityRepo.js"
import { type ConversationCore, MOVED_RETRY_MS } from "./ConversationCore.js"
import { ConversationCores } from "./ConversationCores.js"
import { type AppendRequest, ConversationOwners } from "./ConversationOwners.js"
import { type ChannelListFilter, ConversationRepo, type ListFilter } from "./ConversationRepo.js"
import { ANSWER_TIMEOUT_MS, WRITE_DEADLINE_MS, WRITE_SETTLED_AFTER_MS } from "./WriteTimings.js"


/** A guard for the errors among `E` with one of these tags. */
const tagged = <const T extends string>(...tags: ReadonlyArray<T>) =>
<E>(e: E): e is Extract<E, { readonly _tag: T }> =>
  typeof e === "object" && e !== null && "_tag" in e && (tags as ReadonlyArray<unknown>).includes(e._tag)

/** The cluster did not take the message: nothing of it will be done. */
const isRefused = tagged("MailboxFull", "AlreadyProcessingMessage")

/** A write's cluster call that ended without its answer: the write may or may not be stored. */
class Unanswered extends Data.TaggedError("Unanswered")<{}> {}

/**
 * A write through the cluster, bounded by `timeoutMs` (cluster calls retry forever while a shard moves).
 * A refused call did nothing (503); one left without its answer may have committed, so `settle` decides.
 */
const writeThroughCluster = <A, E extends { readonly _tag: string }, R, A2, E2>(
  call: Effect.Effect<A, E, R>,
  timeoutMs: number,
  settle: (notStored: () => Unavailable) => Effect.Effect<A2, E2>
) =>
  call.pipe(
    Effect.timeoutFail({ duration: timeoutMs, onTimeout: () => new Unanswered() }),
    Effect.catchIf(isRefused, () => Effect.fail(clusterUnavailable())),
    Effect.catchIf(tagged("Unanswered", "PersistenceError"), () => settle(clusterUnavailable)),
    Effect.catchIf(tagged("WriteOutcomeUnknown"), () => settle(databaseUnavailable)),
    // A defect or an interruption of the call itself.
    Effect.catchAllCause((cause) =>
      Option.match(Cause.failureOption(cause), { onSome: Effect.fail, onNone: () => settle(clusterUnavailable) })
    )
  )

/** Looks at a settled draft: each bounded, repeated after a pause, all within a budget. */
const SETTLE_LOOKUP_TIMEOUT_MS = 600
const SETTLE_LOOKUP_PAUSE_MS = 250
const SETTLE_LOOKUP_BUDGET_MS = 1_500

/**
 * `lookUp` once no write with this deadline can still start, each look bounded and repeated within a
 * budget; neither bound waits for the query's cancellation, which takes seconds on a silent connection.
 */
const lookUpSettled = <A, E>(deadline: number, lookUp: Effect.Effect<A, E>) =>
  Effect.suspend(() => Effect.sleep(Math.max(0, deadline + WRITE_SETTLED_AFTER_MS - Date.now()))).pipe(
    Effect.zipRight(
      lookUp.pipe(
        (once) => answerWithin(once, SETTLE_LOOKUP_TIMEOUT_MS, () => "slow" as const),
        // A database that answers nothing for a moment: another look, within the budget.
        Effect.retry(Schedule.spaced(SETTLE_LOOKUP_PAUSE_MS)),
        (looks) => answerWithin(looks, SETTLE_LOOKUP_BUDGET_MS, () => "slow" as const),
        Effect.option
      )
    )
  )

/** `x-idempotency-key` is 1 to this many characters. */
const MAX_IDEMPOTENCY_KEY_CHARS = 255
const IDEMPOTENCY_KEY_REFUSED = `x-idempotency-key must be 1 to ${MAX_IDEMPOTENCY_KEY_CHARS} characters`

const notFound = (id: ConversationId) => new NotFound({ message: `conversation ${id} not found` })

/**
 * An API key the append's write checks is still valid (ADR 0015), for a caller that took it from
 * recent lookups; `draftId` names the draft, so that the caller knows an answer about that write.
 */
export interface KeyCheck {
  readonly keyId: string
  readonly draftId: string
}

/**
 * What a caller may reach: a tenant's conversations, or only one channel's (a channel token). With
 * `routedToo`, also the conversations routed to that channel (role `target`): a channel-scoped token
 * on a socket (client-api.md "Token kinds").
 */
export interface ConversationScope {
  readonly tenantId: TenantId
  readonly channelId: ChannelId | null
  readonly routedToo?: boolean
}

/** Whether a found conversation is within the scope's reach (its channels were read when `routedToo`). */
const inReach = (scope: ConversationScope, conversation: Conversation) =>
  scope.channelId === null || conversation.channel_id === scope.channelId ||
  (scope.routedToo === true &&
    conversation.channels?.some((link) => link.channel_id === scope.channelId && link.role === "target") === true)

/** A page of activities and the watermark to continue from. */
export type ActivityPage = { readonly items: ReadonlyArray<Activity>; readonly watermark: number | null; readonly hasMore: boolean }

/** Conversations and their activities: reads from the database, every write through the conversation's owner. */
export class Conversations extends Effect.Service<Conversations>()("parley/Conversations", {
  effect: Effect.gen(function*() {
    const repo = yield* ConversationRepo
    const activityRepo = yield* ActivityRepo
    const owners = yield* ConversationOwners
    const cores = yield* ConversationCores

    /**
     * The answer to an append left without one, looked up once its draft is stored or never will be,
     * so a 503 still means nothing was stored; no answer from the look-up is a 502 (ADR 0004).
     */
    const settleUnanswered = (
      conversationId: ConversationId,
      request: AppendRequest,
      notStored: () => Unavailable
    ): Effect.Effect<Activity, Unavailable | OutcomeUnknown> =>
      // By the key too: a retry's own draft is new, and the append its key names may be stored.
      // Within the caller's tenant: the conversation was never checked against it (the entity does
      // that, and its answer is what was lost). Another tenant's conversation, its activities under
      // the same key and a write of it in flight are then as unknown as a missing conversation.
      lookUpSettled(
        request.deadline,
        activityRepo.findSettled(
          request.tenantId,
          conversationId,
          [request.draft.id],
          request.draft.idempotency_key === null ? [] : [request.draft.idempotency_key]
        )
      ).pipe(
        // Rare (a node lost, a write's connection broken): worth a line for whoever looks into it.
        Effect.tap((found) =>
          Effect.logWarning("append settled after its answer was lost").pipe(
            Effect.annotateLogs({
              conversation_id: conversationId,
              draft_id: request.draft.id,
              stored: Option.match(found, { onNone: () => "unknown", onSome: (rows) => rows.length > 0 })
            })
          )
        ),
        Effect.flatMap((found): Effect.Effect<Activity, Unavailable | OutcomeUnknown> =>
          Option.isNone(found)
            ? Effect.fail(
              new OutcomeUnknown({
                message: "the outcome of this append is unknown (its write could not be confirmed in time); retry with the same x-idempotency-key"
              })
            )
            : found.value.length > 0
            ? Effect.succeed(found.value[0]!)
            : Effect.fail(notStored())
        )
      )

    /**
     * The answer to a close or reopen whose outcome is open, settled as `settleUnanswered` settles an
     * append: the status asked for is the answer, another one a 503 that holds (ADR 0004).
     */
    const settleStatus = (
      tenantId: TenantId,
      conversationId: ConversationId,
      status: "active" | "closed",
      deadline: number,
      notStored: () => Unavailable
    ): Effect.Effect<void, Unavailable | OutcomeUnknown> =>
      lookUpSettled(deadline, activityRepo.statusSettled(tenantId, conversationId)).pipe(
        Effect.flatMap((found): Effect.Effect<void, Unavailable | OutcomeUnknown> =>
          Option.isNone(found)
            ? Effect.fail(
              new OutcomeUnknown({
                message: "the outcome of this change is unknown (its write could not be confirmed in time); retry"
              })
            )
            : found.value === status
            ? Effect.void
            : Effect.fail(notStored())
        )
      )

    /**
     * An append to a conversation this node owns goes straight to its core, others through the cluster;
     * the wait counts from `arrivedAt`, however long the request took to get here.
     */
    const appendTo = (conversationId: ConversationId, request: AppendRequest, arrivedAt: number) => {
      const answerWithinMs = () => Math.max(0, arrivedAt + ANSWER_TIMEOUT_MS - Date.now())
      // Built only when taken: most appends go to a local core. A call made anew for each sending.
      const viaCluster = Effect.suspend(() =>
        writeThroughCluster(
          Effect.suspend(() => owners.append(conversationId, request)).pipe(
            // The owner let go of the shard before taking the command (a handoff, a lost lock). Sent
            // again, it reaches the next owner, which answers with the stored activity if an owner
            // lost before wrote this draft (a crash re-send): that answer must not be a 503. Past the
            // deadline `cluster_unavailable` is a late arrival, looked up and not found: final.
            Effect.retry({
              schedule: Schedule.spaced(MOVED_RETRY_MS),
              while: (error) =>
                error._tag === "Unavailable" && error.reason === "cluster_unavailable" &&
                Date.now() + MOVED_RETRY_MS < request.deadline
            })
          ),
          answerWithinMs(),
          (notStored) => settleUnanswered(conversationId, request, notStored)
        )
      )
      if (!cores.isOwned(conversationId)) return viaCluster
      const onCore = (core: ConversationCore) => core.append(request, { ms: answerWithinMs(), onTimeout: () => new Unanswered() })
      const running = cores.find(conversationId)
      // A running core is taken at once (most appends), without an effect to look it up.
      return (running !== undefined ? onCore(running) : Effect.flatMap(cores.get(conversationId), onCore)).pipe(
        Effect.catchTag("Moved", () => viaCluster),
        // Here the delay or the broken write was the database's.
        Effect.catchIf(tagged("Unanswered", "WriteOutcomeUnknown"), () => settleUnanswered(conversationId, request, databaseUnavailable))
      )
    }

    /** The conversation if it is within the caller's reach; 404 otherwise, as for a missing one. */
    const get = (scope: ConversationScope, id: ConversationId, options: { readonly channels: boolean }) =>
      repo.find(scope.tenantId, id, { participant: true, channels: options.channels || scope.routedToo === true }).pipe(
        orUnavailable,
        Effect.flatMap(Option.match({
          onNone: () => Effect.fail(notFound(id)),
          onSome: (conversation) => (inReach(scope, conversation) ? Effect.succeed(conversation) : Effect.fail(notFound(id)))
        }))
      )

    const list = (filter: ListFilter) => repo.list(filter).pipe(orUnavailable)

    const listForChannel = (filter: ChannelListFilter) => repo.listForChannel(filter).pipe(orUnavailable)

    /**
     * Checks what `reply_to_id` names. Deletion is the one refusal that changes over time, so an append
     * stored under the same idempotency key before the deletion is still the answer.
     */
    const checkTarget = (
      tenantId: TenantId,
      conversationId: ConversationId,
      checked: CheckedActivity,
      key: string | null
    ): Effect.Effect<Option.Option<Activity>, InvalidMessage | BadRequest | Unavailable> => {
      const refuse = (message: string) =>
        Effect.fail(new InvalidMessage({ message: "the activity is invalid", fields: { reply_to_id: [message] } }))
      const modifies = checked.type === "messageUpdate" || checked.type === "messageDelete"
      return repo.findTarget(tenantId, checked.reply_to_id!).pipe(
        orUnavailable,
        Effect.flatMap((found): Effect.Effect<Option.Option<Activity>, InvalidMessage | BadRequest | Unavailable> => {
          if (Option.isNone(found) || found.value.conversation_id !== conversationId) {
            return refuse("is not an activity of this conversation")
          }
          const target = found.value
          if (modifies && target.type !== "message") return refuse("only a message can be edited or deleted")
          if (modifies && target.sender !== checked.sender) return refuse("cannot edit or delete someone else's message")
          if (target.deleted && refusedOnDeletedTarget(checked.type)) {
            const deleted = refuse(DELETED_TARGET)
            return key === null ? deleted : activityRepo.findExisting(tenantId, conversationId, [], [key]).pipe(
              orUnavailable,
              Effect.flatMap((stored) => stored.length > 0 ? Effect.succeed(Option.some(stored[0]!)) : deleted)
            )
          }
          return Effect.succeed(Option.none())
        })
      )
    }

    /**
     * Validates and appends an activity; a repeated idempotency key returns the original, and a failure
     * means nothing was stored. The time budget counts from `arrivedAt`, so authentication is inside it.
     */
    const append = (
      scope: ConversationScope,
      conversationId: ConversationId,
      input: ActivityInput,
      options: {
        readonly idempotencyKey: string | null
        readonly sourceChannelId: ChannelId | null
        readonly arrivedAt: number
        readonly keyCheck?: KeyCheck | undefined
      }
    ) => {
      // On every append: combinators, not a generator (ADR 0006).
      const key = options.idempotencyKey
      const checkedAndWritten = (sourceChannelId: ChannelId | null) => Effect.suspend(() => {
        const checking = checkActivity(input)
        if (Either.isLeft(checking)) return Effect.fail(checking.left)
        const checked = checking.right
        if (key !== null && (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY_CHARS)) {
          return Effect.fail(new BadRequest({ message: IDEMPOTENCY_KEY_REFUSED }))
        }
        const check = options.keyCheck
        // Field by field: a spread with fields added takes V8's slow path.
        const draft: ActivityDraft = {
          id: check?.draftId ?? crypto.randomUUID(),
          type: checked.type,
          sender: checked.sender,
          text: checked.text,
          attachments: checked.attachments,
          metadata: checked.metadata,
          idempotency_key: key,
          reply_to_id: checked.reply_to_id,
          message_type: checked.message_type,
          payload: checked.payload,
          source_channel_id: sourceChannelId
        }
        const request = { tenantId: scope.tenantId, draft, deadline: options.arrivedAt + WRITE_DEADLINE_MS, keyCheck: check?.keyId ?? null }
        const write = appendTo(conversationId, request, options.arrivedAt)
        return checked.reply_to_id === null ? write : checkTarget(scope.tenantId, conversationId, checked, key).pipe(
          Effect.flatMap(Option.match({ onNone: () => write, onSome: Effect.succeed }))
        )
      })
      // The entity checks the tenant itself; only a channel-bound caller needs a look first.
      return scope.channelId === null
        ? checkedAndWritten(options.sourceChannelId)
        : Effect.flatMap(get(scope, conversationId, { channels: false }), (conversation) =>
          // A channel answering a conversation routed to it speaks from that channel: routing sends the
          // answer back to the origin, never to the channel again.
          checkedAndWritten(conversation.channel_id === scope.channelId ? options.sourceChannelId : scope.channelId))
    }

    /**
     * The activity stored under an idempotency key in a conversation within the caller's reach:
     * a retry refused for another reason (a rate limit) still gets the append it repeats.
     */
    const storedUnderKey = (scope: ConversationScope, conversationId: ConversationId, key: string) =>
      get(scope, conversationId, { channels: false }).pipe(
        Effect.zipRight(activityRepo.findExisting(scope.tenantId, conversationId, [], [key]).pipe(orUnavailable)),
        Effect.map((found) => Option.fromNullable<Activity>(found[0])),
        Effect.catchTag("NotFound", () => Effect.succeed(Option.none<Activity>()))
      )

    /** Closes or reopens; idempotent. Returns the conversation as it is afterwards. */
    const setStatus = (scope: ConversationScope, conversationId: ConversationId, status: "active" | "closed") =>
      Effect.gen(function*() {
        yield* get(scope, conversationId, { channels: false })
        const deadline = Date.now() + WRITE_DEADLINE_MS
        // A change left without its answer may have committed: a 503 would say it did not.
        yield* writeThroughCluster(
          owners.setStatus(conversationId, { tenantId: scope.tenantId, status, reason: "manual", idleSince: null, deadline }),
          ANSWER_TIMEOUT_MS,
          (notStored) => settleStatus(scope.tenantId, conversationId, status, deadline, notStored)
        )
        const after = yield* get(scope, conversationId, { channels: false })
        return { ...after, participant: null }
      })

    /** The seq a watermark stands for; Left with why when it is malformed or names no activity of the conversation. */
    const watermarkSeq = (id: ConversationId, watermark: string) => {
      const position = decodeWatermark(watermark)
      if (Either.isLeft(position)) return Effect.succeed(Either.left(position.left))
      if (position.right._tag === "Seq") return Effect.succeed(Either.right(position.right.seq))
      return Effect.map(
        repo.seqOf(id, position.right.id).pipe(orUnavailable),
        Option.match({
          onNone: () => Either.left("the watermark names no activity of this conversation"),
          onSome: (seq) => Either.right(seq)
        })
      )
    }

    /**
     * A page of activities, oldest first, in either direction from the watermark (api-notes.md). A
     * watermark that is malformed or names no activity here is `onInvalidWatermark`'s to answer.
     */
    const activities = <E>(
      scope: ConversationScope,
      id: ConversationId,
      query: {
        readonly watermark: string | undefined
        readonly onInvalidWatermark: (reason: string) => Effect.Effect<number | null, E>
        readonly direction: "forward" | "backward"
        readonly before: number | null
      },
      limit: number
    ) =>
      Effect.gen(function*() {
        yield* get(scope, id, { channels: false })
        let after: number | null = null
        if (query.watermark !== undefined) {
          const seq = yield* watermarkSeq(id, query.watermark)
          after = Either.isRight(seq) ? seq.right : yield* query.onInvalidWatermark(seq.left)
        }
        const newestFirst = query.direction === "backward"
        const rows = yield* activityRepo.readBetween(
          id,
          { after: after ?? 0, before: query.before ?? Number.MAX_SAFE_INTEGER, newestFirst },
          limit + 1
        ).pipe(orUnavailable)
        const page = rows.slice(0, limit)
        const items = newestFirst ? page.reverse() : page
        return {
          items,
          watermark: items.length > 0 ? items[items.length - 1]!.seq : after,
          hasMore: rows.length > limit
        } satisfies ActivityPage
      })

    /** The committed head seq of a conversation (0 when it has none). */
    const headOf = (id: ConversationId) => activityRepo.headOf(id).pipe(orUnavailable)

    /** Creates a conversation on a channel, which becomes its origin; the channel must exist (404) and be active (400). */
    const create = (input: Parameters<typeof repo.create>[0]) => repo.create(input).pipe(orUnavailable)

    return { get, list, listForChannel, append, storedUnderKey, setStatus, activities, watermarkSeq, headOf, create } as const
  }),
  dependencies: [ConversationRepo.Default]
}) {}

