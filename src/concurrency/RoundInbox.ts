import { type Cause, Effect, Exit, type Scope } from "effect"
import { awaitReply, type Reply } from "./WorkQueue.js"

/** How long a caller waits for its answer, and what it gets when none comes. */
export interface AnswerWithin<E> {
  readonly ms: number
  readonly onTimeout: () => E
}

/** A command that carries the reply its caller waits for (any reply takes a defect). */
export interface Answerable {
  readonly done: Reply<never, never>
}

/** What an inbox does with the commands it takes. */
export interface RoundInboxOptions<C> {
  /** Runs one round: answers every command it is given, and fails only with a defect. */
  readonly round: (commands: ReadonlyArray<C>) => Effect.Effect<void>
  /** How many of the (two or more) commands waiting, from the head, the next round takes: at least one. */
  readonly take: (waiting: ReadonlyArray<C>) => number
  /** Answers a command the inbox no longer takes, once it is closed. */
  readonly refuse: (command: C) => void
  /** Runs first when a round ends with a defect: forget what the round may have left half-done. */
  readonly forget: () => void
  /** Logged (an error) with the defect of a round. */
  readonly defectMessage: string
}

/** Commands queued for one worker, taken in rounds (see `makeRoundInbox`). */
export interface RoundInbox<C> {
  /**
   * Queues a command and waits for its answer. With `within`, the wait is bounded, and a command
   * sent to an idle inbox runs its round in the caller's fiber: no hops through the inbox's fiber.
   */
  readonly call: <A, E, E2 = never>(command: (done: Reply<A, E>) => C, within?: AnswerWithin<E2>) => Effect.Effect<A, E | E2>
  /** True while no round runs and no command waits. */
  readonly idle: () => boolean
}

/**
 * An inbox taken in rounds by its own fiber or by a caller that found it idle. A defect answers only
 * its round's commands; closing the scope refuses whatever waits and every later command.
 */
export const makeRoundInbox = <C extends Answerable>(
  options: RoundInboxOptions<C>
): Effect.Effect<RoundInbox<C>, never, Scope.Scope> =>
  Effect.gen(function*() {
    // Commands waiting for the next round, in arrival order.
    const inbox: Array<C> = []
    // Set by whoever runs the round: the inbox's fiber or a caller that found it idle.
    let busy = false
    let wake: (() => void) | undefined

    const endTurn = () => {
      busy = false
      wake?.()
    }

    /**
     * One round, then the turn is given back. Its callers (an inline call, the inbox's fiber) run
     * it uninterruptibly, so it always reaches its end: no `ensuring` (a finalizer scope per round).
     */
    const runRound = (commands: ReadonlyArray<C>) =>
      Effect.matchCauseEffect(options.round(commands), {
        onFailure: (cause: Cause.Cause<never>) =>
          Effect.zipRight(
            Effect.sync(() => {
              options.forget()
              for (const command of commands) command.done(Exit.failCause(cause))
              endTurn()
            }),
            Effect.logError(options.defectMessage, cause)
          ),
        onSuccess: () => Effect.sync(endTurn)
      })

    /**
     * Waits until no round runs and commands wait. Takes nothing: a fiber interrupted right after
     * it resumed (its inbox closing) must leave the commands in the inbox for the finalizer.
     */
    const commandsWaiting = Effect.async<void>((resume) => {
      const attempt = () => {
        wake = undefined
        if (busy || inbox.length === 0) {
          wake = attempt
          return
        }
        resume(Effect.void)
      }
      attempt()
      return Effect.sync(() => (wake = undefined))
    })

    // A lone command is the whole round, whatever its size: nothing to measure.
    const nextRound = () => inbox.splice(0, inbox.length === 1 ? 1 : options.take(inbox))

    /** Takes the waiting commands and the turn, unless an inline caller took the turn meanwhile. */
    const takeTurn = Effect.suspend(() => {
      if (busy || inbox.length === 0) return Effect.void
      busy = true
      return runRound(nextRound())
    })

    // Registered before the fiber, so it runs after the fiber has stopped, its last round done.
    let closed = false
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        closed = true
        for (const command of inbox.splice(0)) options.refuse(command)
      })
    )
    // Commands taken from the inbox are always run (and so answered): taking and running are one
    // uninterruptible step.
    yield* Effect.forkScoped(
      Effect.forever(Effect.uninterruptibleMask((restore) => Effect.zipRight(restore(commandsWaiting), takeTurn)))
    )

    const enqueue = (command: C) => {
      if (closed) return options.refuse(command)
      inbox.push(command)
      wake?.()
    }

    const submit = <A, E>(command: (done: Reply<A, E>) => C) => awaitReply<A, E>((reply) => enqueue(command(reply)))

    /** Like `submit`, failing with `onTimeout` if no answer comes in time. */
    const submitWithin = <A, E, E2>(command: (done: Reply<A, E>) => C, within: AnswerWithin<E2>) =>
      awaitReply<A, E | E2>((reply) => {
        const timer = setTimeout(() => reply(Exit.fail(within.onTimeout())), within.ms)
        enqueue(command((exit) => {
          clearTimeout(timer)
          reply(exit)
        }))
      })

    /**
     * The caller has taken the turn (`busy`) and runs the round in its own fiber. Its answer is the
     * round's, however long that takes; commands that arrive meanwhile queue as usual.
     */
    const runInline = <A, E>(command: (done: Reply<A, E>) => C) => {
      let answer: Exit.Exit<A, E> | undefined
      const commands = [command((exit) => (answer = exit))]
      return Effect.flatMap(runRound(commands), () => answer ?? Exit.die(new Error("the round gave no answer")))
    }

    const call = <A, E, E2 = never>(command: (done: Reply<A, E>) => C, within?: AnswerWithin<E2>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend((): Effect.Effect<A, E | E2> => {
          if (within === undefined) return restore(submit(command))
          if (closed || busy || inbox.length > 0) return restore(submitWithin(command, within))
          // The turn is taken in the same step as the check, and released by the round whatever
          // happens (nothing can interrupt in between).
          busy = true
          return runInline(command)
        })
      )

    return { call, idle: () => !busy && inbox.length === 0 }
  })
