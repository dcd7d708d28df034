import { Effect } from "effect"
import { type FieldErrors, InvalidMessage, ValidationFailed } from "./ApiError.js"

/** Collects per-field validation messages, then fails once with all of them. */
export class Problems {
  private readonly fields: Record<string, Array<string>> = {}

  add(field: string, message: string): this {
    ;(this.fields[field] ??= []).push(message)
    return this
  }

  get isEmpty(): boolean {
    return Object.keys(this.fields).length === 0
  }

  get errors(): FieldErrors {
    return this.fields
  }

  /** 422 `validation_failed` when anything was added. */
  check(message = "validation failed"): Effect.Effect<void, ValidationFailed> {
    return this.isEmpty ? Effect.void : Effect.fail(new ValidationFailed({ message, fields: this.fields }))
  }

  /** 422 `invalid_message` when anything was added. */
  checkMessage(message = "invalid activity"): Effect.Effect<void, InvalidMessage> {
    return this.isEmpty ? Effect.void : Effect.fail(new InvalidMessage({ message, fields: this.fields }))
  }
}
