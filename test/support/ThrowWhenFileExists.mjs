// Preloaded into a node under test (NODE_OPTIONS=--import=<this file>): once the file named by
// PARLEY_TEST_THROW_WHEN exists, a timer's callback throws, as a library's callback might. Only in
// the node itself, not in npm, which runs with the same NODE_OPTIONS.
import { existsSync } from "node:fs"

const trigger = process.env.PARLEY_TEST_THROW_WHEN
if (trigger !== undefined && process.argv[1]?.endsWith("dist/src/main.js")) {
  const timer = setInterval(() => {
    if (!existsSync(trigger)) return
    clearInterval(timer)
    throw new Error("thrown in a callback nothing catches")
  }, 100)
  timer.unref()
}
