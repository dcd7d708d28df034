import type { Signal } from "./ConversationSignals.js"

/**
 * The Protocol v1 server frames besides activity frames (`frameOf` in ClientActivityWire), shared by the
 * native socket and the event stream. Fields as client-api.md "Frame" and CONTRACT.md §5 name them; what
 * they leave open is written in docs/api-notes.md "Realtime".
 */
export type ProtocolFrame = { readonly type: string; readonly timestamp: number } & Readonly<Record<string, unknown>>

/** `user` for the viewer's own end user, `bot` for everyone else (client-api.md "Frame"). */
const fromOf = (senderId: string, viewer: string | null) => (viewer !== null && senderId === viewer ? "user" : "bot")

export const heartbeatFrame = (headSeq: number): ProtocolFrame => ({ type: "heartbeat", timestamp: Date.now(), headSeq })

export const typingFrame = (userId: string, viewer: string | null): ProtocolFrame => {
  const from = fromOf(userId, viewer)
  return { type: "typing", from, sender: { id: userId, role: from }, timestamp: Date.now() }
}

export const presenceFrame = (viewers: ReadonlyArray<string>): ProtocolFrame => ({
  type: "presence",
  data: { viewers },
  timestamp: Date.now()
})

export const deliveryStatusFrame = (userId: string, seq: number): ProtocolFrame => ({
  type: "deliveryStatus",
  data: { userId, status: "read", seq },
  timestamp: Date.now()
})

/** The frame of a signal for `viewer`'s listener. */
export const signalFrame = (signal: Signal, viewer: string | null): ProtocolFrame => {
  switch (signal._tag) {
    case "Typing":
      return typingFrame(signal.userId, viewer)
    case "Read":
      return deliveryStatusFrame(signal.userId, signal.seq)
    case "Presence":
      return presenceFrame(signal.viewers)
  }
}

/** The replay cap was reached: the rest is paged over REST from `watermark`. */
export const replayTruncatedFrame = (watermark: number): ProtocolFrame => ({ type: "replayTruncated", watermark, timestamp: Date.now() })

/** What an error frame may carry besides its code and message. */
export interface ErrorExtras {
  readonly retryAfterMs?: number
  readonly clientId?: string
  readonly details?: Readonly<Record<string, unknown>>
}

/** An error frame: `code` is an error code of client-api.md "Errors". */
export const errorFrame = (code: string, message: string, extras: ErrorExtras = {}): ProtocolFrame => ({
  type: "error",
  code,
  message,
  ...(extras.details === undefined ? {} : { details: extras.details }),
  ...(extras.retryAfterMs === undefined ? {} : { retryAfterMs: extras.retryAfterMs }),
  ...(extras.clientId === undefined ? {} : { clientId: extras.clientId }),
  timestamp: Date.now()
})
