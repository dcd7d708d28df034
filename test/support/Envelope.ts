import { expect } from "@effect/vitest"

/** The error envelope of `code` as the tests expect it: four keys, details null. */
export const envelope = (code: string) => ({
  error: { code, message: expect.any(String), details: null, request_id: expect.any(String) }
})
