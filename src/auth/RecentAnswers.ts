/**
 * Answers remembered for at most `maxAgeMs`, `maxEntries` of them at the most, the least recently
 * used going first: a bounded, short-lived stand-in for a lookup repeated on every request.
 */
export interface RecentAnswers<V> {
  /** The answer remembered for `key` less than `maxAgeMs` before `nowMs`, if any. */
  readonly get: (key: string, nowMs: number) => V | undefined
  /** Remembers `value` for `key` as of `nowMs` (the time the lookup started, not when it ended). */
  readonly remember: (key: string, value: V, nowMs: number) => void
}

export const makeRecentAnswers = <V>(options: { readonly maxEntries: number; readonly maxAgeMs: number }): RecentAnswers<V> => {
  // A Map iterates in insertion order: re-inserting on use keeps the least recently used first.
  const entries = new Map<string, { readonly value: V; readonly at: number }>()
  return {
    get: (key, nowMs) => {
      const entry = entries.get(key)
      if (entry === undefined) return undefined
      entries.delete(key)
      if (nowMs - entry.at >= options.maxAgeMs) return undefined
      entries.set(key, entry)
      return entry.value
    },
    remember: (key, value, nowMs) => {
      entries.delete(key)
      entries.set(key, { value, at: nowMs })
      if (entries.size > options.maxEntries) entries.delete(entries.keys().next().value!)
    }
  }
}
