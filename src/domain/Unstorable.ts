/** U+0000, or half of a surrogate pair: PostgreSQL stores neither in text or jsonb. */
const UNSTORABLE_TEXT = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

const UNSTORABLE_PROBLEM = "must be Unicode text without U+0000 or unpaired surrogates"
/** `JSON.parse` reads `1e999` as Infinity, which would be stored as `null`: refused instead of changed. */
const UNSTORABLE_NUMBER_PROBLEM = "numbers must be within double precision (at most about 1.8e308)"
/**
 * `JSON.parse` makes `__proto__` an own key, but every object rebuilt on the way (a schema's output,
 * a redacted delivery payload, a msgpack cluster call) drops or renames it.
 */
const PROTO_KEY = "__proto__"
const PROTO_KEY_PROBLEM = "must not use __proto__ as a key"

/** A value of a JSON document that would not be stored as sent: where it is, and why. */
export interface Unstorable {
  readonly path: ReadonlyArray<string | number>
  readonly problem: string
}

const at = (step: string | number, inner: Unstorable): Unstorable => ({ path: [step, ...inner.path], problem: inner.problem })

/**
 * The first value in a JSON document that would not be stored as sent (U+0000 or an unpaired surrogate,
 * a number beyond double precision, a `__proto__` key), or undefined.
 */
export const findUnstorable = (value: unknown): Unstorable | undefined => {
  if (typeof value === "string") return UNSTORABLE_TEXT.test(value) ? { path: [], problem: UNSTORABLE_PROBLEM } : undefined
  if (typeof value === "number") return Number.isFinite(value) ? undefined : { path: [], problem: UNSTORABLE_NUMBER_PROBLEM }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const inner = findUnstorable(value[i])
      if (inner !== undefined) return at(i, inner)
    }
    return undefined
  }
  if (typeof value !== "object" || value === null) return undefined
  for (const [key, item] of Object.entries(value)) {
    if (UNSTORABLE_TEXT.test(key)) return { path: [key], problem: UNSTORABLE_PROBLEM }
    if (key === PROTO_KEY) return { path: [key], problem: PROTO_KEY_PROBLEM }
    const inner = findUnstorable(item)
    if (inner !== undefined) return at(key, inner)
  }
  return undefined
}
