import { Effect } from "effect"
import { type FieldErrors, InvalidMessage, ValidationFailed } from "./ApiError.js"

/** Collects per-field validation messages, then fails once with all of them. */
export class Problems {
  private readonly fields: Record<string, Array<string>> = {}

  add(field: string, message: string): this {
    ;(this.fields[field] ??= []).push(message)
    return this
  }

  /** A required name, trimmed, of 1 to 200 characters (as the name columns enforce); undefined when reported. */
  requiredName(field: string, value: string | undefined): string | undefined {
    const name = value?.trim() ?? ""
    if (name.length === 0) this.add(field, "is required")
    else if (name.length > 200) this.add(field, "must be at most 200 characters")
    else return name
    return undefined
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
