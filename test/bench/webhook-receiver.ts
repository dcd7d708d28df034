/**
 * The webhook receiver of test/bench/delivery.ts, a child process of its own so that neither Parley
 * nor the floor shares a thread with it. A node:http server on 127.0.0.1 (`RECEIVER_PORT`) that
 * answers every request 200 as soon as its body has arrived, keeps the first receive time of each
 * `x-chat-delivery-id` (CLOCK_MONOTONIC, the bench's clock too), and checks the `x-chat-signature`
 * of one request in `SIGNATURE_SAMPLE` as a receiver does (server-apis.md) with the secret of the
 * channel named by the path (`/hook/<channel id>`). The bench drives it over IPC (`ReceiverCommand`).
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer } from "node:http"
import { monotonicMs } from "./measure.js"

export type ReceiverCommand =
  | { readonly op: "secrets"; readonly secrets: Readonly<Record<string, string>> }
  /** Everything received since the last `take`, then forgotten. */
  | { readonly op: "take" }

export interface ReceiverReport {
  /** Delivery ids, each with its first receive time (monotonic ms) at the same index. */
  readonly ids: ReadonlyArray<string>
  readonly times: ReadonlyArray<number>
  readonly duplicates: number
  readonly signaturesChecked: number
  readonly signaturesFailed: number
  /** The first few failures: reason and path. */
  readonly signatureFailures: ReadonlyArray<string>
}

/** One request in this many has its signature checked (an HMAC of the body, which is then kept). */
const SIGNATURE_SAMPLE = 50
const TOLERANCE_S = 300

const secrets = new Map<string, string>()
let firstSeen = new Map<string, number>()
let requests = 0
let duplicates = 0
let signaturesChecked = 0
let signaturesFailed = 0
let signatureFailures: Array<string> = []

/** server-apis.md "Outbound webhook channel deliveries": the receiver's check, with its failure reasons. */
const checkSignature = (header: string | undefined, secret: string | undefined, body: Buffer): string | undefined => {
  if (header === undefined) return "missing_signature"
  if (secret === undefined) return "no_secret"
  const parts = header.split(",").map((part) => part.trim())
  const t = parts.find((part) => part.startsWith("t="))?.slice(2)
  const v1s = parts.filter((part) => part.startsWith("v1=")).map((part) => part.slice(3))
  if (t === undefined || v1s.length === 0 || !/^[+-]?\d+$/.test(t)) return "malformed_signature"
  if (Math.abs(Date.now() / 1000 - Number(t)) > TOLERANCE_S) return "timestamp_out_of_tolerance"
  const expected = Buffer.from(createHmac("sha256", secret).update(`${t}.`).update(body).digest("hex"))
  const matches = v1s.some((v1) => {
    const sent = Buffer.from(v1)
    return sent.length === expected.length && timingSafeEqual(sent, expected)
  })
  return matches ? undefined : "invalid_signature"
}

const server = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
  requests += 1
  const sampled = requests % SIGNATURE_SAMPLE === 0
  const chunks: Array<Buffer> = []
  if (sampled) req.on("data", (chunk: Buffer) => chunks.push(chunk))
  else req.resume()
  req.on("end", () => {
    const at = monotonicMs()
    const id = req.headers["x-chat-delivery-id"]
    if (typeof id === "string") {
      if (firstSeen.has(id)) duplicates += 1
      else firstSeen.set(id, at)
    }
    res.writeHead(200, { "content-type": "application/json", "content-length": "2" })
    res.end("{}")
    if (sampled) {
      signaturesChecked += 1
      const channelId = (req.url ?? "").split("/")[2] ?? ""
      const failure = checkSignature(req.headers["x-chat-signature"] as string | undefined, secrets.get(channelId), Buffer.concat(chunks))
      if (failure !== undefined) {
        signaturesFailed += 1
        if (signatureFailures.length < 20) signatureFailures.push(`${failure} (${req.url})`)
      }
    }
  })
})

process.on("message", (command: ReceiverCommand & { readonly id: number }) => {
  if (command.op === "secrets") {
    for (const [channelId, secret] of Object.entries(command.secrets)) secrets.set(channelId, secret)
    process.send?.({ id: command.id })
    return
  }
  const report: ReceiverReport = {
    ids: [...firstSeen.keys()],
    times: [...firstSeen.values()],
    duplicates,
    signaturesChecked,
    signaturesFailed,
    signatureFailures
  }
  firstSeen = new Map()
  requests = 0
  duplicates = 0
  signaturesChecked = 0
  signaturesFailed = 0
  signatureFailures = []
  process.send?.({ id: command.id, report })
})

// The bench's waitUntilServing asks GET / (any answer will do): it has no delivery id, so it counts for nothing.
server.listen(Number(process.env["RECEIVER_PORT"]), "127.0.0.1")
// The bench gone (its IPC channel closed), the receiver goes too.
process.on("disconnect", () => process.exit(0))
