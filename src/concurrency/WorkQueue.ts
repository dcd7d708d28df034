import { Effect, Exit, FiberId } from "effect"

/**
 * Completes a waiting caller. Only the first completion counts (a timeout and a late answer may
 * both arrive).
 */
export type Reply<A, E> = (exit: Exit.Exit<A, E>) => void

/**
 * Waits for the reply that `register` hands on (to a queue's consumer): `Effect.async` with no
 * `Deferred`, which the append path would create several of per request (ADR 0006).
 */
export const awaitReply = <A, E>(register: (reply: Reply<A, E>) => void): Effect.Effect<A, E> =>
  Effect.async<A, E>((resume) => register(replyOnce(resume)))

/**
 * The first completion resumes the waiting fiber and drops it, so a reply kept afterwards retains
 * neither that fiber nor what `register` captured.
 */
const replyOnce = <A, E>(resume: (effect: Effect.Effect<A, E>) => void): Reply<A, E> => {
  let waiting: typeof resume | undefined = resume
  return (exit) => {
    const first = waiting
    waiting = undefined
    first?.(exit)
  }
}

/**
 * Runs `effect` in its own fiber and answers `onTimeout()` after `ms`, interrupting it in the background:
 * cheaper than `Effect.timeout`, and in time even when the caller cannot be interrupted.
 */
export const answerWithin = <A, E, E2>(effect: Effect.Effect<A, E>, ms: number, onTimeout: () => E2) =>
  Effect.flatMap(Effect.forkDaemon(Effect.interruptible(effect)), (fiber) =>
    awaitReply<A, E | E2>((reply) => {
      const timer = setTimeout(() => {
        reply(Exit.fail(onTimeout()))
        fiber.unsafeInterruptAsFork(FiberId.none)
      }, Math.max(0, ms))
      fiber.addObserver((exit) => {
        clearTimeout(timer)
        reply(exit)
      })
    }))

/**
 * An unbounded queue whose consumer fibers take everything waiting, up to a maximum, in one go:
 * work that arrives while they are busy forms the next batch (group commit).
 */
export class WorkQueue<T> {
  private items: Array<T> = []
  private readonly idle: Array<() => void> = []

  /** Adds an item and wakes one idle consumer. */
  offer(item: T): void {
    this.items.push(item)
    this.idle.shift()?.()
  }

  /** Waits for at least one item, then takes up to `max` of those waiting. */
  take(max: number): Effect.Effect<Array<T>> {
    return Effect.suspend(() =>
      this.items.length > 0 ? Effect.succeed(this.items.splice(0, max)) : Effect.zipRight(this.wakeUp, this.take(max))
    )
  }

  /** Puts items taken back at the head of the queue, in order, and wakes an idle consumer. */
  putBack(items: ReadonlyArray<T>): void {
    this.items.unshift(...items)
    this.idle.shift()?.()
  }

  /** Removes and returns everything waiting. */
  drain(): Array<T> {
    return this.items.splice(0)
  }

  // Another consumer may take the items first: `take` then waits again. Items are looked at again
  // where the consumer registers: an offer between `take`'s check and here would wake no one.
  private readonly wakeUp = Effect.async<void>((resume) => {
    if (this.items.length > 0) return resume(Effect.void)
    const wake = () => resume(Effect.void)
    this.idle.push(wake)
    return Effect.sync(() => {
      const at = this.idle.indexOf(wake)
      if (at >= 0) this.idle.splice(at, 1)
    })
  })
}
