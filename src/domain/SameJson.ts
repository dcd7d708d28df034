import { isDeepStrictEqual } from "node:util"

/** A value as jsonb keeps it: no key order, no class instances, nothing undefined. */
const asStored = (value: unknown): unknown => (value === undefined ? null : JSON.parse(JSON.stringify(value)))

/** Whether two values are equal once stored as JSON (a repeated change compared with the row). */
export const sameJson = (a: unknown, b: unknown): boolean => isDeepStrictEqual(asStored(a), asStored(b))
