import { Effect } from "effect"

/** An acknowledged append: the key it was sent with and what the node answered. */
export interface Ack {
  readonly conversationId: string
  readonly key: string
  readonly id: string
  readonly seq: number
  /** When the successful attempt was sent, and when it was answered. */
  readonly sentAt: number
  readonly at: number
}

const attempt = async (baseUrl: string, apiKey: string, conversationId: string, key: string, text: string) => {
  try {
    const response = await fetch(`${baseUrl}/api/v1/conversations/${conversationId}/activities`, {
      method: "POST",
      headers: { "x-api-key": apiKey, "x-idempotency-key": key, "content-type": "application/json" },
      body: JSON.stringify({ text }),
      signal: AbortSignal.timeout(15_000)
    })
    const body = (await response.json().catch(() => null)) as { data?: { id: string; seq: number } } | null
    return response.status === 201 && body?.data !== undefined ? body.data : undefined
  } catch {
    return undefined
  }
}

/**
 * Sends one message like a careful client: the same idempotency key on every retry, moving to the
 * next node after a failure (503, refused connection, timeout), until it is acknowledged.
 */
export const deliver = (
  nodes: () => ReadonlyArray<string>,
  apiKey: string,
  conversationId: string,
  key: string,
  start: number
) =>
  Effect.promise(async (): Promise<Ack> => {
    const deadline = Date.now() + 120_000
    for (let i = start; Date.now() < deadline; i++) {
      const list = nodes()
      const sentAt = Date.now()
      const data = await attempt(list[i % list.length]!, apiKey, conversationId, key, `message ${key}`)
      if (data !== undefined) return { conversationId, key, id: data.id, seq: data.seq, sentAt, at: Date.now() }
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    throw new Error(`message ${key} was never acknowledged`)
  })
