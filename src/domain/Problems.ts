import { Effect } from "effect"
import { type FieldErrors, ValidationFailed } from "./ApiError.js"
import { exceedsCharacters } from "./Characters.js"

/** The longest name of any resource, in characters (code points), as the name columns count them. */
const MAX_NAME_CHARACTERS = 200

/** Whether a name is longer than names may be; "😀" is one character, not two UTF-16 units. */
export const isNameTooLong = (name: string): boolean => exceedsCharacters(name, MAX_NAME_CHARACTERS)

/** A field's path as validation details name it: `config.headers.x-a`, `transformations[0].type`. */
export const fieldPath = (path: string, key: string | number) =>
  typeof key === "number" ? `${path}[${key}]` : path === "" ? key : `${path}.${key}`

/** Reports one problem at a path inside a field (`url`, `headers.Host`, `[0].max_bytes`); `""` is the field itself. */
export type Report = (path: string, message: string) => void

export const NAME_TOO_LONG = `must be at most ${MAX_NAME_CHARACTERS} characters`

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
    else if (isNameTooLong(name)) this.add(field, NAME_TOO_LONG)
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
}
