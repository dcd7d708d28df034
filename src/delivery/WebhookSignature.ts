import { createHmac } from "node:crypto"

/**
 * The `x-chat-signature` value of server-apis.md: `t=<unix seconds>,v1=<lowercase hex HMAC-SHA256 of
 * "<t>.<raw body>">`, keyed with the channel secret. The body is the exact bytes sent.
 */
export const signatureHeader = (secret: string, body: Uint8Array, nowSeconds: number): string => {
  const t = Math.floor(nowSeconds)
  const mac = createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex")
  return `t=${t},v1=${mac}`
}
