import { Data, Effect, Either, Exit, Option, PubSub, Stream } from "effect"
import { type AnswerWithin, makeRoundInbox } from "../concurrency/RoundInbox.js"
import { answerWithin, type Reply } from "../concurrency/WorkQueue.js"
import { isOutcomeUnknown, isStatementBug } from "../db/SqlErrors.js"
import type { Activity } from "../domain/Activity.js"
import {
  ConversationClosed,
  databaseUnavailable,
  invalidApiKey,
  InvalidMessage,
  NotFound,
  type Unauthorized,
  type Unavailable
} from "../domain/ApiError.js"
import type { ConversationId } from "../domain/Conversation.js"
import { ChannelDeliveries } from "../delivery/ChannelDeliveries.js"
import type { PlannedDelivery } from "../delivery/DeliveryRows.js"
import { RoutingRules } from "../routing/RoutingRules.js"
import { ActivityRepo } from "./ActivityRepo.js"
import { ActivityWriter } from "./ActivityWriter.js"
import { type AppendRequest, type StatusRequest, WriteOutcomeUnknown } from "./ConversationOwners.js"
import { type ConversationState, ConversationStateRepo } from "./ConversationState.js"
import {
  type AppendCommand,
  appendMayBeStored,
  decide,
  editTargets,
  looksUpFirst,
  planDeliveries,
  type RoundDecision,
  roundSize,
  type StatusCommand
} from "./RoundDecision.js"
import { CATCH_UP_PAGE, inSeqOrder, livePubSub } from "./SeqFollower.js"

/** A moved conversation has its new owner within moments: callers try again this much later. */
export const MOVED_RETRY_MS = 250

/** This node no longer owns the conversation's shard: the caller goes through the cluster. */
class Moved extends Data.TaggedError("Moved")<{}> {}

type AppendError = NotFound | ConversationClosed | InvalidMessage | Unavailable | WriteOutcomeUnknown | Unauthorized | Moved
type AppendDone = Reply<Activity, AppendError>
type StatusDone = Reply<{ readonly changed: boolean }, NotFound | Unavailable | WriteOutcomeUnknown | Moved>

/** A command with the reply its caller waits for. */
type Command = (AppendCommand & { readonly done: AppendDone }) | (StatusCommand & { readonly done: StatusDone })

/** Wakes each channel a group's deliveries go to (most groups: one channel, no set). */
const wakeChannels = (deliveries: typeof ChannelDeliveries.Service, planned: ReadonlyArray<PlannedDelivery>) => {
  const first = planned[0]!.channelId
  if (planned.every((d) => d.channelId === first)) return deliveries.wake(first)
  return Effect.forEach(new Set(planned.map((d) => d.channelId)), (channelId) => deliveries.wake(channelId), { discard: true })
}

/** How often a round is retried after another writer moved the head (two owners for a moment). */
const MAX_CONFLICT_RETRIES = 5
/** How long a round's read may take when its commands' deadlines have passed already. */
const LATE_READ_MS = 1000

const NO_IDS: ReadonlySet<string> = new Set()

/**
 * The logic of one conversation on its shard's owner, a round at a time, each one group (ADR 0004).
 * Once `isOwned` is false it answers `Moved`; a load that finds no conversation calls `onMissing`.
 */
export const makeConversationCore = (conversationId: ConversationId, isOwned: () => boolean, onMissing: () => void) =>
  Effect.gen(function*() {
    const writer = yield* ActivityWriter
    const activityRepo = yield* ActivityRepo
    const states = yield* ConversationStateRepo
    // Optional: a core built without the cluster's delivery loops (a unit test) writes the rows only.
    const deliveries = Option.getOrUndefined(yield* Effect.serviceOption(ChannelDeliveries))
    const routing = yield* RoutingRules
    // Made for the first stream: most conversations never have one, and the buffer takes memory.
    let live: PubSub.PubSub<Activity> | undefined
    const liveFeed = Effect.suspend(() =>
      live !== undefined
        ? Effect.succeed(live)
        : Effect.map(livePubSub(), (made) => (live ??= made))
    )
    // Used only by the round that holds the turn; `undefined` means "load from the database".
    let state: ConversationState | undefined
    // Open `subscribe` streams; each is subscribed to `live` only after it is counted here.
    let subscribers = 0

    /**
     * A round's read, given up (503) once no command of the round could still be written. Rounds are
     * uninterruptible, so the read runs in its own fiber, cancelled in the background.
     */
    const readFor = <A, E>(commands: ReadonlyArray<Command>, read: Effect.Effect<A, E>) =>
      Effect.suspend(() => {
        let deadline = Infinity
        for (const command of commands) deadline = Math.min(deadline, command.deadline)
        // Commands already late (a redelivery) still get a short look at what is stored.
        deadline = Math.max(deadline, Date.now() + LATE_READ_MS)
        return answerWithin(read, deadline - Date.now(), databaseUnavailable)
      })

    /** Reads the conversation's state from the database and keeps it. */
    const loadState = (commands: ReadonlyArray<Command>) =>
      readFor(commands, states.load(conversationId)).pipe(Effect.tap(Option.match({
        onNone: () => Effect.void,
        onSome: (loaded) => Effect.sync(() => (state = loaded))
      })))

    const failAll = (commands: ReadonlyArray<Command>, error: NotFound | Unavailable | Moved) =>
      Effect.sync(() => {
        for (const command of commands) (command.done as StatusDone)(Exit.fail(error))
      })

    /**
     * Commands whose write failed or could not be decided: a 503 where nothing of the command can
     * be stored; one that `mayBeStored` gets "outcome unknown", settled by its caller.
     */
    const failUnwritten = (commands: ReadonlyArray<Command>, mayBeStored: (command: Command) => boolean) =>
      Effect.sync(() => {
        for (const command of commands) {
          if (mayBeStored(command)) command.done(Exit.fail(new WriteOutcomeUnknown()))
          else (command.done as StatusDone)(Exit.fail(databaseUnavailable()))
        }
      })

    /** Writes what `decide` collected and answers the commands waiting for it. */
    const writeDecided = (
      current: ConversationState,
      decided: RoundDecision<Command>,
      attempt: number
    ): Effect.Effect<void> => {
      const { answered, drafts, waiting } = decided
      for (const [command, answer] of answered) (command.done as Reply<unknown, unknown>)(answer)
      if (drafts.length === 0) return Effect.void
      // From the cached rules (no read while the cache is current); a failed read writes nothing.
      const now = Date.now()
      return Effect.matchEffect(routing.planner(current.tenant_id), {
        onFailure: () => failUnwritten(waiting.map(([command]) => command), appendMayBeStored(attempt, now)),
        onSuccess: (planOne) => writePlanned(current, decided, planDeliveries(current, drafts, planOne, new Date(now)), attempt)
      })
    }

    /** Writes a decided group with its planned deliveries, and wakes the channels they go to after the commit. */
    const writePlanned = (
      current: ConversationState,
      decided: RoundDecision<Command>,
      planned: ReadonlyArray<PlannedDelivery>,
      attempt: number
    ): Effect.Effect<void> => {
      const { deadline, drafts, keyChecks, status, statusChange, waiting } = decided
      return Effect.matchEffect(
        writer.write({
          conversationId,
          tenantId: current.tenant_id,
          oldHead: current.head_seq,
          activities: drafts,
          deliveries: planned,
          status: statusChange,
          deadline,
          keyChecks
        }),
        {
          onFailure: (error): Effect.Effect<void> => {
            state = undefined
            const pending = waiting.map(([command]) => command)
            if (error._tag === "KeyNoLongerValid") {
              // The appends that brought a key the write refused get 401; the others go again.
              const others = pending.filter((command) => {
                if (command._tag !== "Append" || command.keyCheck == null) return true
                command.done(Exit.fail(invalidApiKey()))
                return false
              })
              return others.length === 0 ? Effect.void : round(others, attempt)
            }
            if ((error._tag === "SeqTaken" || error._tag === "KeyTaken") && attempt < MAX_CONFLICT_RETRIES) {
              return round(pending, attempt + 1)
            }
            // Refused for its deadline, the group wrote nothing now; but a re-send (its owner lost)
            // decided just in time may have been stored by the first owner. Decided again, past
            // their deadline its commands are looked up: the stored activity, or the 503 as before.
            if (error._tag === "TooLate" && attempt === 0) return round(pending, attempt + 1)
            // Past the first attempt a conflict may be this very draft, stored meanwhile (a re-send).
            // A status change may be stored only by this write: a close whose answer was lost committed.
            const unanswered = error._tag === "WriteFailed" && isOutcomeUnknown(error.cause)
            // A statement the schema refuses is a bug: a 500 for its callers, not a 503 to retry.
            if (error._tag === "WriteFailed" && !unanswered && isStatementBug(error.cause)) {
              return Effect.sync(() => pending.forEach((command) => command.done(Exit.die(error.cause))))
            }
            return failUnwritten(pending, (command) => unanswered || (command._tag === "Append" && attempt > 0))
          },
          onSuccess: (inserted): Effect.Effect<void> => {
            const last = inserted[inserted.length - 1]!
            state = { ...current, head_seq: last.seq, status, updated_at: last.inserted_at }
            const answer = () => {
              // Most rounds write one draft: no map for them.
              const byNewId = inserted.length === 1 ? undefined : new Map(inserted.map((a) => [a.id, a]))
              for (const [command, id] of waiting) {
                if (command._tag === "Append") command.done(Exit.succeed(byNewId === undefined ? inserted[0]! : byNewId.get(id!)!))
                else command.done(Exit.succeed({ changed: true }))
              }
            }
            // Listeners get the activities before their writers' answers. With no stream open nobody
            // is subscribed: publishing would only cost.
            // After the commit and the answers: the channels' loops find the rows. A wake only
            // forks (coalesced per channel).
            const woken = planned.length > 0 && deliveries !== undefined ? wakeChannels(deliveries, planned) : Effect.void
            if (subscribers > 0 && live !== undefined) {
              return Effect.zipRight(Effect.zipRight(PubSub.publishAll(live, inserted), Effect.sync(answer)), woken)
            }
            answer()
            return woken
          }
        }
      )
    }

    /**
     * Decides on the loaded state, looking up first what may be stored, and writes. Other tenants'
     * commands get 404 before any look-up, so a failing look-up cannot reveal the conversation.
     */
    const decideAndWrite = (all: ReadonlyArray<Command>, current: ConversationState, attempt: number) => {
      const ours = (command: Command) => command.tenantId === current.tenant_id
      const commands = all.every(ours) ? all : all.filter((command) => {
        if (ours(command)) return true
        ;(command.done as StatusDone)(Exit.fail(new NotFound({ message: `conversation ${conversationId} not found` })))
        return false
      })
      const now = Date.now()
      // Edits and reactions had their target looked at before they reached the conversation: a
      // delete written since is found here, where its writes are ordered.
      const targets = editTargets(commands)
      const appends = looksUpFirst(commands, current, targets, attempt, now)
        ? commands.flatMap((c) => (c._tag === "Append" ? [c.draft] : [])) : []
      if (appends.length === 0) return writeDecided(current, decide(commands, current, [], NO_IDS, now), attempt)
      const keys = appends.flatMap((d) => (d.idempotency_key === null ? [] : [d.idempotency_key]))
      const ids = appends.map((d) => d.id)
      // A late command's draft may be in a write still in flight (a commit held up): the look-up
      // waits for the conversation's row first, and if it cannot, that draft's outcome is unknown.
      const late = commands.some((c) => c.deadline < now)
      const lookup = late
        ? activityRepo.findSettled(current.tenant_id, conversationId, ids, keys)
        : activityRepo.findExisting(current.tenant_id, conversationId, ids, keys)
      // With edits or reactions, their targets are read at the same time as the drafts.
      const reads = targets.length === 0
        ? Effect.map(lookup, (found) => [found, NO_IDS] as const)
        : Effect.zip(lookup, activityRepo.deletedAmong(conversationId, targets), { concurrent: true })
      return Effect.flatMap(Effect.either(readFor(commands, reads)), (read) =>
        Either.isLeft(read)
          // Nothing was written now, but a late append may have been before, and so may any
          // after a conflict (its draft id or key refused: stored already, by a re-send's first owner).
          ? failUnwritten(commands, appendMayBeStored(attempt, now))
          : writeDecided(current, decide(commands, current, read.right[0], read.right[1], now), attempt))
    }

    const round = (commands: ReadonlyArray<Command>, attempt: number): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (!isOwned()) {
          state = undefined
          return failAll(commands, new Moved())
        }
        // Decisions that write nothing cannot meet the write's head check, so they are not taken
        // on a cached state: a closed conversation may have been reopened through another owner
        // meanwhile, and a status change may already be the conversation's status there.
        if (state !== undefined && (state.status === "closed" || commands.some((c) => c._tag === "SetStatus"))) {
          state = undefined
        }
        if (state !== undefined) return decideAndWrite(commands, state, attempt)
        const now = Date.now()
        return Effect.flatMap(Effect.either(loadState(commands)), (loaded) =>
          Either.isLeft(loaded)
            // As when the look-up fails (`decideAndWrite`): what may be stored already is not a 503.
            ? failUnwritten(commands, appendMayBeStored(attempt, now))
            : Option.isNone(loaded.right)
            ? Effect.zipRight(Effect.sync(onMissing), failAll(commands, new NotFound({ message: `conversation ${conversationId} not found` })))
            : decideAndWrite(commands, loaded.right.value, attempt))
      })

    // Once closed (the core dropped or the node stopping), commands are answered `Moved` at once.
    const inbox = yield* makeRoundInbox<Command>({
      round: (commands) => round(commands, 0),
      take: roundSize,
      refuse: (command) => (command.done as StatusDone)(Exit.fail(new Moved())),
      forget: () => (state = undefined),
      defectMessage: "conversation round failed unexpectedly"
    })

    /**
     * Stored activities above `fromSeq`, then live ones; subscribed first so nothing falls between.
     * A listener too slow for the live buffer reads what it missed from the table.
     */
    const subscribe = (fromSeq: number) =>
      Stream.unwrapScoped(Effect.gen(function*() {
        yield* Effect.acquireRelease(Effect.sync(() => subscribers++), () => Effect.sync(() => subscribers--))
        const subscription = yield* PubSub.subscribe(yield* liveFeed)
        return inSeqOrder({
          fromSeq,
          live: Stream.fromQueue(subscription),
          read: (after, limit) => activityRepo.readAfter(conversationId, after, limit),
          page: CATCH_UP_PAGE
        }).pipe(
          Stream.catchAll(() => Stream.fail(databaseUnavailable()))
        )
      }))

    return {
      /**
       * Appends; `within` bounds the wait when the caller has no deadline. A local append to an idle
       * core runs its round in the caller's fiber, saving two hops through the core's fiber.
       */
      append: <E = never>(request: AppendRequest, within?: AnswerWithin<E>) =>
        inbox.call((done: AppendDone): Command => ({
          _tag: "Append",
          ...request,
          arrivedLate: request.deadline < Date.now(),
          done
        }), within),
      setStatus: (request: StatusRequest) =>
        inbox.call((done: StatusDone): Command => ({ _tag: "SetStatus", ...request, arrivedLate: request.deadline < Date.now(), done })),
      subscribe,
      /** The streams open on this core (while there are any, it is kept however idle it is). */
      subscribers: () => subscribers,
      /** True while no stream is open and no command waits or runs: the core can be dropped. */
      idle: () => subscribers === 0 && inbox.idle()
    } as const
  })

/** One conversation's running logic. */
export type ConversationCore = Effect.Effect.Success<ReturnType<typeof makeConversationCore>>
