/** U+0000, or half of a surrogate pair: PostgreSQL stores neither in text or jsonb. */
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

export const UNSTORABLE_PROBLEM = "must be Unicode text without U+0000 or unpaired surrogates"

/**
 * Where in a JSON value a string (or a key) holds a character PostgreSQL cannot store: the path of
 * keys and indexes to it, or undefined when there is none.
 */
export const unstorablePath = (value: unknown): ReadonlyArray<string | number> | undefined => {
  if (typeof value === "string") return UNSTORABLE.test(value) ? [] : undefined
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const inner = unstorablePath(value[i])
      if (inner !== undefined) return [i, ...inner]
    }
    return undefined
  }
  if (typeof value !== "object" || value === null) return undefined
  for (const [key, item] of Object.entries(value)) {
    if (UNSTORABLE.test(key)) return [key]
    const inner = unstorablePath(item)
    if (inner !== undefined) return [key, ...inner]
  }
  return undefined
}
