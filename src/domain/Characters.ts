import { Schema } from "effect"

/**
 * Whether `text` has more than `max` characters, counted as code points ("😀" is one character,
 * not two UTF-16 units), as PostgreSQL's `char_length` counts them.
 */
export const exceedsCharacters = (text: string, max: number): boolean => {
  if (text.length <= max) return false
  let characters = 0
  for (const _ of text) if (++characters > max) return true
  return false
}

/** A string of `min` to `max` characters (code points). */
export const Characters = (min: number, max: number) =>
  Schema.String.pipe(Schema.filter((s) =>
    (s.length >= min && !exceedsCharacters(s, max)) ||
    `Expected a string of ${min === 0 ? "at most" : `${min} to`} ${max} character(s)`
  ))
