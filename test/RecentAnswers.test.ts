import { describe, expect, it } from "@effect/vitest"
import { makeRecentAnswers } from "../src/auth/RecentAnswers.js"

describe("RecentAnswers", () => {
  it("answers what it remembered until maxAgeMs has passed since the lookup started", () => {
    const answers = makeRecentAnswers<string>({ maxEntries: 10, maxAgeMs: 1000 })
    expect(answers.get("a", 0)).toBeUndefined()
    answers.remember("a", "active", 100)
    expect(answers.get("a", 1099)).toBe("active")
    expect(answers.get("a", 1100)).toBeUndefined()
    // Expired entries are forgotten, not kept for a later, older-looking time.
    expect(answers.get("a", 500)).toBeUndefined()
  })

  it("keeps at most maxEntries, evicting the least recently used", () => {
    const answers = makeRecentAnswers<number>({ maxEntries: 2, maxAgeMs: 1000 })
    answers.remember("a", 1, 0)
    answers.remember("b", 2, 0)
    expect(answers.get("a", 1)).toBe(1)
    answers.remember("c", 3, 2)
    expect(answers.get("b", 3)).toBeUndefined()
    expect(answers.get("a", 3)).toBe(1)
    expect(answers.get("c", 3)).toBe(3)
  })

  it("a new answer for a key replaces the old one and its age", () => {
    const answers = makeRecentAnswers<string>({ maxEntries: 2, maxAgeMs: 1000 })
    answers.remember("a", "active", 0)
    answers.remember("a", "inactive", 900)
    expect(answers.get("a", 1500)).toBe("inactive")
  })
})
