import { expect } from "@effect/vitest"

/** The error envelope of `code` as the tests expect it: four keys, details null. */
export const envelope = (code: string) => ({
  error: { code, message: expect.any(String), details: null, request_id: expect.any(String) }
})

/** What a client acts on in an error answer: its status and code. */
export const statusAndCode = (reply: { readonly status: number; readonly body: any }) => ({
  status: reply.status,
  code: reply.body?.error?.code
})

/**
 * Asserts a whole error answer: its status and an envelope of `code` whose `details` equal
 * `details` (null unless given; matchers such as `fieldDetails("text")` name the keys). A body that
 * is no envelope (a success) is shown cut short: it may hold a whole activity.
 */
export const expectError = (
  reply: { readonly status: number; readonly body: any },
  status: number,
  code: string,
  details: unknown = null,
  label?: string
) =>
  expect({ status: reply.status, error: reply.body?.error ?? JSON.stringify(reply.body)?.slice(0, 200) }, label).toEqual({
    status,
    error: { code, message: expect.any(String), details, request_id: expect.any(String) }
  })

/** `details` of a 422 that names exactly these fields, each with at least one message. */
export const fieldDetails = (...fields: ReadonlyArray<string>) =>
  Object.fromEntries(fields.map((field) => [field, expect.arrayContaining([expect.any(String)])]))
