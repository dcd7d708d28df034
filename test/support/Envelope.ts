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
