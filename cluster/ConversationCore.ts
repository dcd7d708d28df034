import { Data, Effect, Either, Exit, Option, PubSub, Stream } from "effect"
import { answerWithin, awaitReply, type Reply } from "../src/concurrency/WorkQueue.js"
import { DELETED_TARGET, refusedOnDeletedTarget } from "../src/conversations/ActivityRules.js"
import { ActivityRepo } from "../src/conversations/ActivityRepo.js"
import { ActivityWriter, MAX_STATEMENT_JSON } from "../src/conversations/ActivityWriter.js"
import type { PlannedDelivery } from "../src/delivery/DeliveryRows.js"
import { isOutcomeUnknown, isStatementBug } from "../src/db/SqlErrors.js"
import { inSeqOrder, livePubSub } from "../src/conversations/SeqFollower.js"
import { type ConversationState, ConversationStateRepo } from "../src/conversations/ConversationState.js"
import type { Activity, ActivityDraft } from "../src/domain/Activity.js"
import {
  clusterUnavailable,
  ConversationClosed,
  databaseUnavailable,
  invalidApiKey,
  InvalidMessage,
  NotFound,
  type Unauthorized,
  type Unavailable
} from "../src/domain/ApiError.js"
import { WriteOutcomeUnknown } from "./ConversationEntity.js"

/** This node no longer owns the conversation's shard: the caller goes through the cluster. */
export class Moved extends Data.TaggedError("Moved")<{}> {}

type AppendError = NotFound | ConversationClosed | InvalidMessage | Unavailable | WriteOutcomeUnknown | Unauthorized | Moved
type AppendDone = Reply<Activity, AppendError>
type StatusDone = Reply<{ readonly changed: boolean }, NotFound | Unavailable | WriteOutcomeUnknown | Moved>

/**
 * `arrivedLate`: the command reached the core past its deadline. Its delay was on the way (a shard
 * moving, an owner lost), not in this core's inbox behind slow writes: a 503 for it says so.
 */
type Command =
  | {
    readonly _tag: "Append"
    readonly tenantId: string
    readonly draft: ActivityDraft
    readonly deadline: number
    readonly keyCheck?: string | null | undefined
    readonly arrivedLate: boolean
    readonly done: AppendDone
  }
  | {
    readonly _tag: "SetStatus"
    readonly arrivedLate: boolean
    readonly tenantId: string
    readonly status: "active" | "closed"
    readonly reason: "manual" | "expired"
    readonly idleSince: string | null
    readonly deadline: number
    readonly done: StatusDone
  }

/** Commands taken from the inbox in one round; they share one write group. */
const MAX_COMMANDS_PER_ROUND = 256
/**
 * The drafts of one round as JSON at the most, past its first command. A group is written whole in
 * one statement, with a delivery copy of each activity: so it stays within a statement's JSON
 * (ActivityWriter). Without it, a round of many large appends made one group that outlasted the
 * statement timeout, failed whole, and formed again from the same appends retried.
 */
const MAX_ROUND_JSON = MAX_STATEMENT_JSON / 2
/** How often a round is retried after another writer moved the head (two owners for a moment). */
const MAX_CONFLICT_RETRIES = 5
const REPLAY_PAGE = 500
/** The 503 for a command past its deadline: where the time went decides the reason. */
const lateFailure = (command: Command) => (command.arrivedLate ? clusterUnavailable() : databaseUnavailable())

const NO_IDS: ReadonlySet<string> = new Set()
const NO_TARGETS: ReadonlyArray<string> = []
const NO_KEY_CHECKS: ReadonlyArray<string> = []

/** The messages a round's edits and reactions name; a round without any (most) allocates nothing. */
const editTargets = (commands: ReadonlyArray<Command>): ReadonlyArray<string> => {
  let targets: Array<string> | undefined
  for (const c of commands) {
    if (c._tag === "Append" && c.draft.reply_to_id !== null && refusedOnDeletedTarget(c.draft.type)) {
      (targets ??= []).push(c.draft.reply_to_id)
    }
  }
  return targets ?? NO_TARGETS
}

/** How long a round's read may take when its commands' deadlines have passed already. */
const LATE_READ_MS = 1000

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
 * Deliveries of the inbound direction: back to the origin channel, for activities that did not come
 * from it. The write drops them while the channel only receives (its mode is read there, as it is
 * at that moment).
 */
const planDeliveries = (state: ConversationState, drafts: ReadonlyArray<ActivityDraft>): Array<PlannedDelivery> =>
  drafts
    .filter((draft) => draft.source_channel_id !== state.origin_channel_id)
    .map((draft) => ({ id: crypto.randomUUID(), activityId: draft.id, channelId: state.origin_channel_id }))

/** How long a caller waits for its answer, and what it gets when none comes. */
export interface AnswerWithin<E> {
  readonly ms: number
  readonly onTimeout: () => E
}

/** A conversation's payloads as the entity receives them. */
export interface AppendRequest {
  readonly tenantId: string
  readonly draft: ActivityDraft
  readonly deadline: number
  /** An API key id the write finds valid before it stores the draft (ADR 0015); 401 if not. */
  readonly keyCheck?: string | null | undefined
}
export interface StatusRequest {
  readonly tenantId: string
  readonly status: "active" | "closed"
  readonly reason: "manual" | "expired"
  readonly idleSince: string | null
  readonly deadline: number
}

/**
 * The logic of one conversation, run on the node that owns its shard. Commands queue in an inbox;
 * one fiber takes everything waiting, decides it against the conversation's state (closed,
 * idempotency, tenant) and writes it as one group, so concurrent appends to one conversation share
 * a transaction. The head moves only after commit, and a conflict (another owner wrote first)
 * reloads the state from the database and retries. When `isOwned` turns false the core forgets its
 * state and answers `Moved`. Closing the scope answers `Moved` to whatever still waits.
 */
export const makeConversationCore = (conversationId: string, isOwned: () => boolean) =>
  Effect.gen(function*() {
    const writer = yield* ActivityWriter
    const store = yield* ActivityRepo
    const states = yield* ConversationStateRepo
    // Made for the first stream: most conversations never have one, and the buffer takes memory.
    let live: PubSub.PubSub<Activity> | undefined
    const liveFeed = Effect.suspend(() =>
      live !== undefined
        ? Effect.succeed(live)
        : Effect.map(livePubSub(), (made) => (live ??= made))
    )
    // Commands waiting for the next round, in arrival order.
    const inbox: Array<Command> = []
    // Used only by the round that holds the turn; `undefined` means "load from the database".
    let state: ConversationState | undefined
    // Open `subscribe` streams; each is subscribed to `live` only after it is counted here.
    let subscribers = 0

    /**
     * A read of a round, given up (503) once no command of the round could still be written: a
     * stalled database answers callers in time, including one running the round inline. Rounds
     * are uninterruptible, so the read runs in a fiber of its own, cancelled in the background.
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

    /**
     * What may be stored when a round reads nothing: an append past its deadline or after a conflict
     * (a re-send's first owner may have stored its draft). A status change is decided on the state
     * as loaded, so a re-sent one is not written twice: its 503 is safe.
     */
    const appendMayBeStored = (attempt: number, now: number) => (command: Command) =>
      command._tag === "Append" && (attempt > 0 || command.deadline < now)

    /**
     * What a round does with its commands, given the conversation as loaded, what of them is stored
     * already and which targets of its edits and reactions are deleted messages: answers those it can
     * at once, and collects the drafts to write as one group with the commands waiting for them.
     */
    const decide = (
      commands: ReadonlyArray<Command>,
      current: ConversationState,
      existing: ReadonlyArray<Activity>,
      deletedBefore: ReadonlySet<string>,
      now: number
    ) => {
      // What is stored already, by id and key (most rounds look nothing up: no maps then).
      const byId = existing.length === 0 ? undefined : new Map<string, Activity>()
      const byKey = existing.length === 0 ? undefined : new Map<string, Activity>()
      for (const activity of existing) {
        byId!.set(activity.id, activity)
        if (activity.idempotency_key !== null) byKey!.set(activity.idempotency_key, activity)
      }
      const drafts: Array<ActivityDraft> = []
      const waiting: Array<readonly [Command, string | null]> = []
      // Keys of drafts of this round (made for the first one).
      let newKeys: Map<string, string> | undefined
      // Messages a delete earlier in this round deletes (made only when a round has one).
      let deletedInRound: Set<string> | undefined
      let status = current.status
      let statusChange: "active" | "closed" | null = null
      // The group is written only while every command in it may still be.
      let deadline = Infinity
      // API keys the write checks for the appends it carries (most rounds have none).
      let keyChecks: Array<string> | undefined

      for (const command of commands) {
        if (command._tag === "Append") {
          const { draft } = command
          const key = draft.idempotency_key
          const known = byId?.get(draft.id) ?? (key === null ? undefined : byKey?.get(key))
          const sameKey = key === null ? undefined : newKeys?.get(key)
          if (known !== undefined) command.done(Exit.succeed(known))
          else if (sameKey !== undefined) waiting.push([command, sameKey])
          else if (draft.reply_to_id !== null && refusedOnDeletedTarget(draft.type) &&
            (deletedBefore.has(draft.reply_to_id) || deletedInRound?.has(draft.reply_to_id) === true)
          ) {
            command.done(Exit.fail(new InvalidMessage({ message: "the activity is invalid", fields: { reply_to_id: [DELETED_TARGET] } })))
          } else if (status === "closed") {
            command.done(Exit.fail(new ConversationClosed({ message: "the conversation is closed" })))
          } else if (command.deadline < now) {
            command.done(Exit.fail(lateFailure(command)))
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
          command.done(Exit.succeed({ changed: false }))
        } else if (command.deadline < now) {
          command.done(Exit.fail(lateFailure(command)))
        } else {
          drafts.push(statusEvent(command.status, command.reason))
          status = command.status
          statusChange = status
          waiting.push([command, null])
          deadline = Math.min(deadline, command.deadline)
        }
      }
      return { drafts, waiting, status, statusChange, deadline, keyChecks: keyChecks ?? NO_KEY_CHECKS }
    }

    /** Writes what `decide` collected and answers the commands waiting for it. */
    const writeDecided = (
      current: ConversationState,
      decided: ReturnType<typeof decide>,
      attempt: number
    ): Effect.Effect<void> => {
      const { deadline, drafts, keyChecks, status, statusChange, waiting } = decided
      if (drafts.length === 0) return Effect.void
      return Effect.matchEffect(
        writer.write({
          conversationId,
          tenantId: current.tenant_id,
          oldHead: current.head_seq,
          activities: drafts,
          deliveries: planDeliveries(current, drafts),
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
            if (subscribers > 0 && live !== undefined) return Effect.zipRight(PubSub.publishAll(live, inserted), Effect.sync(answer))
            answer()
            return Effect.void
          }
        }
      )
    }

    /**
     * Decides on the conversation as loaded, looking up first what may be stored already, and writes.
     * Another tenant's commands are answered 404 before anything is looked up, so a failing look-up
     * cannot tell them the conversation exists.
     */
    const decideAndWrite = (all: ReadonlyArray<Command>, current: ConversationState, attempt: number) => {
      const ours = (command: Command) => command.tenantId === current.tenant_id
      const commands = all.every(ours) ? all : all.filter((command) => {
        if (ours(command)) return true
        ;(command.done as StatusDone)(Exit.fail(new NotFound({ message: `conversation ${conversationId} not found` })))
        return false
      })
      // The first attempt on an open conversation writes without looking: the write refuses a group
      // whose key is stored (KeyTaken) or whose draft id is (a crash re-send), and the retry looks
      // both up. A conversation that is or may become closed in this round writes no append, so a
      // repeat there is looked up at once.
      // A command past its deadline is looked up too: a redelivery after its owner crashed may find
      // its draft committed by that owner, and then the answer is the activity, not a 503.
      const now = Date.now()
      // Edits and reactions had their target looked at before they reached the conversation: a
      // delete written since is found here, where its writes are ordered. Such a round looks up
      // what is stored too, so a retry of one accepted before the delete still gets it by its key.
      const targets = editTargets(commands)
      const lookUp = attempt > 0 || current.status === "closed" || targets.length > 0 ||
        commands.some((c) => c._tag === "SetStatus" || c.deadline < now)
      const appends = lookUp ? commands.flatMap((c) => (c._tag === "Append" ? [c.draft] : [])) : []
      if (appends.length === 0) return writeDecided(current, decide(commands, current, [], NO_IDS, now), attempt)
      const keys = appends.flatMap((d) => (d.idempotency_key === null ? [] : [d.idempotency_key]))
      const ids = appends.map((d) => d.id)
      // A late command's draft may be in a write still in flight (a commit held up): the look-up
      // waits for the conversation's row first, and if it cannot, that draft's outcome is unknown.
      const late = commands.some((c) => c.deadline < now)
      const lookup = late
        ? store.findSettled(current.tenant_id, conversationId, ids, keys)
        : store.findExisting(current.tenant_id, conversationId, ids, keys)
      // With edits or reactions, their targets are read at the same time as the drafts.
      const reads = targets.length === 0
        ? Effect.map(lookup, (found) => [found, NO_IDS] as const)
        : Effect.zip(lookup, store.deletedAmong(conversationId, targets), { concurrent: true })
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
            ? failAll(commands, new NotFound({ message: `conversation ${conversationId} not found` }))
            : decideAndWrite(commands, loaded.right.value, attempt))
      })

    /**
     * Runs one round at a time: `busy` is set by whoever runs it, the core's fiber or a caller that
     * found the core idle. A bug in one round answers its commands with the defect and forgets the
     * state; the conversation keeps taking commands.
     */
    let busy = false
    let wakeCore: (() => void) | undefined

    const endTurn = () => {
      busy = false
      wakeCore?.()
    }

    /**
     * One round, then the turn is given back. Its callers (an inline append, the core's fiber) run
     * it uninterruptibly, so it always reaches its end: no `ensuring` (a finalizer scope per round).
     */
    const runRound = (commands: ReadonlyArray<Command>) =>
      Effect.matchCauseEffect(round(commands, 0), {
        onFailure: (cause) =>
          Effect.zipRight(
            Effect.sync(() => {
              state = undefined
              for (const command of commands) (command.done as StatusDone)(Exit.failCause(cause))
              endTurn()
            }),
            Effect.logError("conversation round failed unexpectedly", cause)
          ),
        onSuccess: () => Effect.sync(endTurn)
      })

    /**
     * Waits until no round runs and commands wait. Takes nothing: a fiber interrupted right after
     * it resumed (its core closing) must leave the commands in the inbox for the finalizer.
     */
    const commandsWaiting = Effect.async<void>((resume) => {
      const attempt = () => {
        wakeCore = undefined
        if (busy || inbox.length === 0) {
          wakeCore = attempt
          return
        }
        resume(Effect.void)
      }
      attempt()
      return Effect.sync(() => (wakeCore = undefined))
    })

    /** The commands of the next round, from the head of the inbox: at least one, within the bounds above. */
    const nextRound = () => {
      // A lone command is the whole round, whatever its size: nothing to measure.
      if (inbox.length === 1) return inbox.splice(0, 1)
      let taken = 0
      let size = 0
      for (const command of inbox) {
        if (taken === MAX_COMMANDS_PER_ROUND) break
        if (command._tag === "Append") size += JSON.stringify(command.draft).length
        if (taken > 0 && size > MAX_ROUND_JSON) break
        taken++
      }
      return inbox.splice(0, taken)
    }

    /** Takes the waiting commands and the turn, unless an inline caller took the turn meanwhile. */
    const takeTurn = Effect.suspend(() => {
      if (busy || inbox.length === 0) return Effect.void
      busy = true
      return runRound(nextRound())
    })

    // Once closed (the core dropped or the node stopping), commands are answered `Moved` at once.
    // Registered before the fiber, so it runs after the fiber has stopped, its last round done.
    let closed = false
    yield* Effect.addFinalizer(() =>
      Effect.suspend(() => {
        closed = true
        return failAll(inbox.splice(0), new Moved())
      })
    )
    // Commands taken from the inbox are always run (and so answered): taking and running are one
    // uninterruptible step.
    yield* Effect.forkScoped(
      Effect.forever(Effect.uninterruptibleMask((restore) => Effect.zipRight(restore(commandsWaiting), takeTurn)))
    )

    const enqueue = (command: Command) => {
      if (closed) return (command.done as StatusDone)(Exit.fail(new Moved()))
      inbox.push(command)
      wakeCore?.()
    }

    const submit = <A, E>(command: (done: Reply<A, E>) => Command) =>
      awaitReply<A, E>((reply) => enqueue(command(reply)))

    /** Like `submit`, failing with `onTimeout` if no answer comes in time. */
    const submitWithin = <A, E, E2>(command: (done: Reply<A, E>) => Command, within: AnswerWithin<E2>) =>
      awaitReply<A, E | E2>((reply) => {
        const timer = setTimeout(() => reply(Exit.fail(within.onTimeout())), within.ms)
        enqueue(command((exit) => {
          clearTimeout(timer)
          reply(exit)
        }))
      })

    /**
     * A local append to an idle core runs its round in the caller's fiber, saving the two hops
     * through the core's fiber (most rounds have one command when appends spread over many
     * conversations). The caller has taken the turn (`busy`). Its answer is the round's, however
     * long the write takes; commands that arrive meanwhile queue as usual and keep their deadline.
     */
    const appendInline = (command: (done: AppendDone) => Command) => {
      let answer: Exit.Exit<Activity, AppendError> | undefined
      const commands = [command((exit) => (answer = exit))]
      return Effect.flatMap(runRound(commands), () => answer ?? Exit.die(new Error("the round gave no answer")))
    }

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
          read: (after, limit) => store.readAfter(conversationId, after, limit),
          page: REPLAY_PAGE
        }).pipe(
          Stream.catchAll(() => Stream.fail(databaseUnavailable()))
        )
      }))

    return {
      /** Appends; `within` bounds the wait when the caller has no deadline of its own. */
      append: <E = never>(request: AppendRequest, within?: AnswerWithin<E>) =>
        Effect.uninterruptibleMask((restore) =>
          Effect.suspend(() => {
            const command = (done: AppendDone): Command => ({
              _tag: "Append",
              ...request,
              arrivedLate: request.deadline < Date.now(),
              done
            })
            if (within === undefined) return restore(submit(command))
            if (closed || busy || inbox.length > 0) return restore(submitWithin(command, within))
            // The turn is taken in the same step as the check, and released by the round whatever
            // happens (nothing can interrupt in between).
            busy = true
            return appendInline(command)
          })
        ),
      setStatus: (request: StatusRequest) =>
        submit((done: StatusDone): Command => ({ _tag: "SetStatus", ...request, arrivedLate: request.deadline < Date.now(), done })),
      subscribe,
      /** The streams open on this core (while there are any, it is kept however idle it is). */
      subscribers: () => subscribers
    } as const
  })

/** One conversation's running logic. */
export type ConversationCore = Effect.Effect.Success<ReturnType<typeof makeConversationCore>>
