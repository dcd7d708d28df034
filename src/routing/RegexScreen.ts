import { Either } from "effect"
import safeRegex from "safe-regex2"

/** The longest pattern, in UTF-8 bytes (CONTRACT.md §8: regex conditions and `redact_text`). */
export const MAX_PATTERN_BYTES = 256

/**
 * The most characters of input a pattern is run on. safe-regex2 refuses exponential patterns only
 * (star height above one); a polynomial one on this much input stays within milliseconds.
 */
export const MAX_REGEX_INPUT = 4096

/**
 * A pattern compiled at save: a message when it is not acceptable. Too long, not compiling, or
 * flagged by safe-regex2 as able to backtrack catastrophically (nested quantifiers).
 */
export const compilePattern = (pattern: unknown, flags = ""): Either.Either<RegExp, string> => {
  if (typeof pattern !== "string") return Either.left("must be a string")
  if (pattern === "") return Either.left("must not be empty")
  if (Buffer.byteLength(pattern, "utf8") > MAX_PATTERN_BYTES) {
    return Either.left(`must be at most ${MAX_PATTERN_BYTES} bytes of UTF-8`)
  }
  // The RegExp constructor throws a SyntaxError on a pattern that does not compile.
  const compiled = Either.try({
    try: () => new RegExp(pattern, flags),
    catch: (error) => `must be a valid regular expression (${error instanceof Error ? error.message : String(error)})`
  })
  if (Either.isLeft(compiled)) return compiled
  return safeRegex(compiled.right) ? compiled : Either.left("may backtrack catastrophically (nested quantifiers)")
}

/** Whether `re` matches the start of `input`, up to `MAX_REGEX_INPUT` characters of it. */
export const boundedTest = (re: RegExp, input: string): boolean => {
  re.lastIndex = 0
  return re.test(input.length > MAX_REGEX_INPUT ? input.slice(0, MAX_REGEX_INPUT) : input)
}
