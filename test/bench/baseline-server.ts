/**
 * The floor `npm run bench` compares Parley with: a minimal `node:http` server and a `pg` pool of
 * the same size as Parley's, doing one plain INSERT (autocommit) per append. No auth, no rate limit,
 * no validation beyond "text is a string", no sequencing, no outbox. Run as a child process by
 * test/bench/appends.ts (env: BASELINE_PORT, DATABASE_URL, BASELINE_POOL_SIZE); `bench_activities` must exist.
 */
import { randomUUID } from "node:crypto"
import { createServer, type ServerResponse } from "node:http"
import Pg from "pg"

const port = Number(process.env["BASELINE_PORT"] ?? "0")
const pool = new Pg.Pool({
  connectionString: process.env["DATABASE_URL"],
  max: Number(process.env["BASELINE_POOL_SIZE"] ?? "10"),
  application_name: "parley-bench-baseline"
})

const ROUTE = /^\/api\/v1\/conversations\/([0-9a-f-]{36})\/activities$/

const reply = (res: ServerResponse, status: number, body: unknown) => {
  const text = JSON.stringify(body)
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) })
  res.end(text)
}

const server = createServer((req, res) => {
  const match = req.method === "POST" ? ROUTE.exec(req.url ?? "") : null
  if (match === null) {
    req.resume()
    return reply(res, 404, { error: { code: "not_found" } })
  }
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    let text: unknown
    try {
      text = (JSON.parse(Buffer.concat(chunks).toString("utf8")) as { text?: unknown }).text
    } catch {
      return reply(res, 400, { error: { code: "bad_request" } })
    }
    if (typeof text !== "string") return reply(res, 422, { error: { code: "invalid_message" } })
    pool.query(
      "INSERT INTO bench_activities (id, conversation_id, text) VALUES ($1, $2, $3) RETURNING id, conversation_id, text, inserted_at",
      [randomUUID(), match[1], text]
    ).then(
      (result) => reply(res, 201, { data: result.rows[0] }),
      () => reply(res, 503, { error: { code: "unavailable" } })
    )
  })
})

server.listen(port, "127.0.0.1")

const stop = () => {
  server.close()
  server.closeAllConnections()
  void pool.end().finally(() => process.exit(0))
}
process.once("SIGTERM", stop)
process.once("SIGINT", stop)
