import { Context } from "effect"

/** Who is making a change, as the audit log records it. */
export interface Actor {
  readonly type: "tenant_api" | "admin_api" | "system"
  readonly id: string
}

/** The actor of the current request, provided by the auth middleware. */
export class CurrentActor extends Context.Tag("parley/CurrentActor")<CurrentActor, Actor>() {}

/** `<actor type>:<actor id>`, as `retried_by` and similar fields spell an actor. */
export const actorLabel = (actor: Actor): string => `${actor.type}:${actor.id}`
