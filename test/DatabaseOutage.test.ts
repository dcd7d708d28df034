import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Schedule, type Scope } from "effect"
import Pg from "pg"
import { spawnNode } from "./support/NodeProcess.js"
import { tcpProxy } from "./support/TcpProxy.js"
import { holdConversationRow, serverUrl, TestDatabase, TestDatabaseLive } from "./support/TestDatabase.js"
import { ADMIN_TOKEN } from "./support/TestNode.js"

/** What the API answered: the status, the envelope's code if any, the data if any, and how long it took. */
interface Answer {
  readonly status: number
  readonly code: string | undefined
  readonly details: unknown
  readonly data: unknown
  readonly ms: number
}

const call = (baseUrl: string, method: string, path: string, headers: Record<string, string>, body?: unknown) =>
  Effect.promise(async (): Promise<Answer> => {
    const started = Date.now()
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: AbortSignal.timeout(30_000)
    })
    const json = (await response.json()) as { error?: { code: string; details: unknown }; data?: unknown }
    return { status: response.status, code: json.error?.code, details: json.error?.details, data: json.data, ms: Date.now() - started }
  })

const admin = { authorization: `Bearer ${ADMIN_TOKEN}` }

/** Appends a message through the tenant API. */
const postText = (baseUrl: string, key: string, conversationId: string, text: string, headers: Record<string, string> = {}) =>
  call(baseUrl, "POST", `/api/v1/conversations/${conversationId}/activities`, { "x-api-key": key, ...headers }, { text })

/** The conversation's stored activities, oldest first. */
const storedActivities = (baseUrl: string, key: string, conversationId: string) =>
  Effect.map(
    call(baseUrl, "GET", `/api/v1/conversations/${conversationId}/activities`, { "x-api-key": key }),
    (answer) => answer.data as ReadonlyArray<{ id: string; seq: number; text: string }>
  )

/** A new conversation of the channel whose secret this is. */
const newConversation = (baseUrl: string, secret: string) =>
  Effect.map(
    call(baseUrl, "POST", "/api/v1/conversations", { "x-channel-token": secret }, {}),
    (conversation) => (conversation.data as { id: string }).id
  )

/** A tenant's API key and a conversation of one of its channels, made through the node's API. */
const seedConversation = (baseUrl: string) =>
  Effect.gen(function*() {
    const tenant = yield* call(baseUrl, "POST", "/api/v1/admin/tenants", admin, { tenant: { name: "outage" } })
    const key = (tenant.data as { api_key: string }).api_key
    const channel = yield* call(baseUrl, "POST", "/api/v1/manage/channels", { "x-api-key": key }, {
      channel: { name: "socket", type: "websocket" }
    })
    const secret = (channel.data as { secret: string }).secret
    return { tenantId: (tenant.data as { id: string }).id, key, secret, conversationId: yield* newConversation(baseUrl, secret) }
  })

/** A node whose every database connection goes through a proxy the test controls. */
const nodeBehindProxy = (env: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const db = yield* TestDatabase
    const url = new URL(db.url!)
    const proxy = yield* tcpProxy({ host: url.hostname, port: Number(url.port || 5432) })
    url.host = `127.0.0.1:${proxy.port}`
    const node = yield* spawnNode("A", { ...env, DATABASE_URL: url.toString() })
    return { node, proxy }
  })

/** `nodeBehindProxy` with a tenant and a conversation. */
const seededNodeBehindProxy = Effect.flatMap(nodeBehindProxy(), ({ node, proxy }) =>
  Effect.map(seedConversation(node.baseUrl), (seeded) => ({ ...seeded, node, proxy })))

/** Waits until the node reads the tenant again (the database is back). */
const readsAgain = (baseUrl: string, tenantId: string) =>
  call(baseUrl, "GET", `/api/v1/admin/tenants/${tenantId}`, admin).pipe(
    Effect.filterOrFail((reply) => reply.status === 200, () => "not yet"),
    Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo("30 seconds"))),
    Effect.orDie
  )

/** A test with its own database, its scope closed at the end. */
const outageTest = <E>(name: string, body: Effect.Effect<void, E, Scope.Scope | TestDatabase>) =>
  it.live(name, () => body.pipe(Effect.scoped, Effect.provide(TestDatabaseLive)), 120_000)

describe.skipIf(serverUrl === undefined)("database outage", () => {
  // A database that accepts connections and never answers them (a dead host behind a load balancer,
  // a full firewall queue): every new connection the node needs would wait for ever without a timeout.
  outageTest("requests needing a new connection get 503 within the connect timeout; the node recovers",
    Effect.gen(function*() {
      const { node, proxy } = yield* nodeBehindProxy()
      const { tenantId } = yield* seedConversation(node.baseUrl)

      proxy.blackhole()
      // The pool drops the connections it had once it sees them closed: the next query needs a new one.
      yield* Effect.sleep("500 millis")
      const during = yield* call(node.baseUrl, "GET", `/api/v1/admin/tenants/${tenantId}`, admin)
      expect(during.status).toBe(503)
      expect(during.code).toBe("unavailable")
      // Within the 5 s connect timeout and the answer's own margin, not the client's 30 s.
      expect(during.ms).toBeLessThan(15_000)

      proxy.restore()
      expect((yield* readsAgain(node.baseUrl, tenantId)).status).toBe(200)
    }))

  // Nothing listens where the database was (a stopped server, a failed-over address): no statement
  // can reach it, so nothing can have been stored, and the answer is a 503 at once, not a 502 after
  // the look-ups that an unknown outcome needs.
  outageTest("a database that refuses connections: an append is answered 503 database_unavailable, not 502",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      expect((yield* postText(node.baseUrl, key, conversationId, "before")).status).toBe(201)

      proxy.refuse()
      // The pools drop the connections they had once they see them closed.
      yield* Effect.sleep("500 millis")
      const during = yield* postText(node.baseUrl, key, conversationId, "refused").pipe(
        // A guard far below the 11 s an unknown outcome takes to settle, not a timing claim.
        Effect.timeoutFail({ duration: "8 seconds", onTimeout: () => new Error("the append was not answered in time") })
      )
      expect({ status: during.status, code: during.code, details: during.details }).toEqual({
        status: 503,
        code: "unavailable",
        details: { reason: "database_unavailable", retry_after_ms: expect.any(Number) }
      })

      proxy.restore()
      const after = yield* postText(node.baseUrl, key, conversationId, "after").pipe(
        Effect.filterOrFail((answer) => answer.status === 201, () => "not yet"),
        Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo("30 seconds"))),
        Effect.orDie
      )
      expect((after.data as { seq: number }).seq).toBe(2)
    }))

  // A statement that does not fit the schema (here: its table renamed under the node) is a bug:
  // retrying cannot help, so it is a 500 `internal`, not a 503 that asks the client to retry.
  outageTest("a statement the schema refuses is 500 internal, on an append's write and on a read",
    Effect.gen(function*() {
      const { conversationId, key, node, tenantId } = yield* seededNodeBehindProxy
      // The append's core keeps the conversation's state: the next append goes straight to its write.
      expect((yield* postText(node.baseUrl, key, conversationId, "before")).status).toBe(201)
      const { url } = yield* TestDatabase
      const renameTable = (table: string) =>
        Effect.promise(async () => {
          const client = new Pg.Client({ connectionString: url! })
          await client.connect()
          await client.query(`ALTER TABLE ${table} RENAME TO ${table}_gone`)
          await client.end()
        })
      yield* renameTable("activities")
      const append = yield* postText(node.baseUrl, key, conversationId, "into a table that is gone")
      expect({ status: append.status, code: append.code }).toEqual({ status: 500, code: "internal" })
      yield* renameTable("tenants")
      const read = yield* call(node.baseUrl, "GET", `/api/v1/admin/tenants/${tenantId}`, admin)
      expect({ status: read.status, code: read.code }).toEqual({ status: 500, code: "internal" })
    }))

  // Open connections stay open and go silent (a frozen host, a link that drops everything): no
  // error ever arrives, so only the node's own limits end the wait.
  outageTest("a database that stops answering: readiness says so within its check's second, reads are 503 within the statement timeout, the node recovers",
    Effect.gen(function*() {
      const { node, proxy } = yield* nodeBehindProxy({ DATABASE_STATEMENT_TIMEOUT_MS: "2500" })
      const { tenantId } = yield* seedConversation(node.baseUrl)

      proxy.freeze()
      const [ready, read] = yield* Effect.all([
        // A check made in the last second still answers (it is shared by every probe for a second).
        call(node.baseUrl, "GET", "/health/ready", {}).pipe(
          Effect.filterOrFail((answer) => answer.status !== 200, () => "not yet"),
          Effect.retry(Schedule.spaced("200 millis").pipe(Schedule.upTo("5 seconds"))),
          Effect.orDie
        ),
        call(node.baseUrl, "GET", `/api/v1/admin/tenants/${tenantId}`, admin)
      ], { concurrency: "unbounded" })
      expect(ready.status).toBe(503)
      // The probe's own 1 s, not the time a cancellation takes to reach a silent server (4.5 s).
      expect(ready.ms).toBeLessThan(3_500)
      expect(read.status).toBe(503)
      expect(read.code).toBe("unavailable")
      // 2.5 s for the statement, then the node's margin for an answer that never comes.
      expect(read.ms).toBeLessThan(8_000)

      proxy.restore()
      expect((yield* readsAgain(node.baseUrl, tenantId)).status).toBe(200)
      expect((yield* call(node.baseUrl, "GET", "/health/ready", {})).status).toBe(200)
    }))

  // The connection breaks after the batch statement reached PostgreSQL: it commits, and the node
  // never hears so. The append must not be answered 503 (a client without a key would repeat it).
  outageTest("an append whose write committed but whose answer was lost is answered 201 with it",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      proxy.loseAnswerTo("append_batch")
      const reply = yield* postText(node.baseUrl, key, conversationId, "committed in the dark")
      expect(reply.status).toBe(201)
      const stored = yield* storedActivities(node.baseUrl, key, conversationId)
      expect(stored.map((a) => a.id)).toEqual([(reply.data as { id: string }).id])
    }))

  // As for an append: the close committed (its event is stored), so a 503 would be wrong; once
  // settled, the conversation is closed, which is the answer.
  outageTest("a close whose write committed but whose answer was lost is answered 200 once settled, not 503",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      proxy.loseAnswerTo("append_batch")
      const reply = yield* call(node.baseUrl, "POST", `/api/v1/conversations/${conversationId}/close`, { "x-api-key": key })
      const stored = yield* storedActivities(node.baseUrl, key, conversationId)
      expect({ status: reply.status, data: reply.data, stored: stored.length }).toMatchObject({
        status: 200,
        data: { status: "closed" },
        stored: 1
      })
    }))

  // The batch statement reaches PostgreSQL only after the append was answered 503 (a stalled
  // backend or link): when it runs then, it must not store what the 503 said was not stored.
  outageTest("a write statement that reaches PostgreSQL past its deadline stores nothing",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      proxy.holdFrom("append_batch")
      const reply = yield* postText(node.baseUrl, key, conversationId, "sent, then stalled")
      expect(reply.status).toBe(503)
      expect(reply.code).toBe("unavailable")
      expect(reply.details).toEqual({ reason: "database_unavailable", retry_after_ms: expect.any(Number) })
      // The statement reaches PostgreSQL now, however the node gave up on its connection.
      expect(proxy.release()).toBe(true)
      // The node's next append goes through on a healthy connection.
      const next = yield* postText(node.baseUrl, key, conversationId, "after").pipe(
        Effect.filterOrFail((answer) => answer.status === 201, () => "not yet"),
        Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo("20 seconds"))),
        Effect.orDie
      )
      const stored = yield* storedActivities(node.baseUrl, key, conversationId)
      expect(stored.map((a) => [a.seq, a.text])).toEqual([[1, "after"]])
      expect((next.data as { seq: number }).seq).toBe(1)
    }))

  // A transaction's COMMIT is held up on its way (a stalled link) until after the create was
  // answered 503: when it arrives, PostgreSQL must have ended the transaction already.
  outageTest("a create whose COMMIT reaches PostgreSQL after its 503 stores nothing",
    Effect.gen(function*() {
      const { node, proxy } = yield* nodeBehindProxy({ DATABASE_STATEMENT_TIMEOUT_MS: "2500" })
      const { key, secret } = yield* seedConversation(node.baseUrl)
      const conversations = call(node.baseUrl, "GET", "/api/v1/conversations", { "x-api-key": key }).pipe(
        Effect.map((answer) => answer.data as ReadonlyArray<{ id: string; metadata: Record<string, unknown> }>)
      )
      const before = yield* conversations
      const marker = `held-${crypto.randomUUID()}`
      proxy.holdFrom(marker, "COMMIT")
      const reply = yield* call(node.baseUrl, "POST", "/api/v1/conversations", { "x-channel-token": secret }, { metadata: { marker } })
      expect(reply.status).toBe(503)
      expect(reply.code).toBe("unavailable")
      // The COMMIT reaches the server side now, and is given time to run there.
      expect(proxy.release()).toBe(true)
      yield* Effect.sleep("1 second")
      expect(yield* conversations).toEqual(before)
    }))

  // The key check stalls, then the write: the answer's bound counts from the request's arrival, so
  // the time the key check took is taken from the write's budget, not added to it.
  outageTest("an append's answer is bounded from its arrival, a slow key check included",
    Effect.gen(function*() {
      const seeded = yield* seededNodeBehindProxy
      const { conversationId, node, proxy } = seeded
      // A key the node never looked up: a key looked up in the last 65 s is not looked up again (ADR 0015).
      const issued = yield* call(node.baseUrl, "POST", "/api/v1/manage/api_keys", { "x-api-key": seeded.key }, {
        api_key: { name: "writer", scopes: ["read", "write"] }
      })
      const key = (issued.data as { key: string }).key
      proxy.holdFrom("authenticate_keys")
      const pending = yield* Effect.fork(postText(node.baseUrl, key, conversationId, "slow to authenticate"))
      // Within the key lookup's own 5 s limit.
      yield* Effect.sleep("3500 millis")
      proxy.release()
      proxy.holdFrom("append_batch")
      const reply = yield* Fiber.join(pending)
      expect(reply.status).toBe(503)
      expect(reply.code).toBe("unavailable")
      expect(reply.details).toEqual({ reason: "database_unavailable", retry_after_ms: expect.any(Number) })
      // Settled 5.5 s after the deadline, 5 s after arrival: about 10.5 s. Counted from the end of
      // the key check, it would be about 14 s.
      expect(reply.ms).toBeLessThan(13_000)
      proxy.release()
      expect(yield* storedActivities(node.baseUrl, key, conversationId)).toEqual([])
    }))

  // One writer connection's statement hangs (a stalled backend): the others must keep writing, so
  // the stalled connection is dropped rather than handed to the next batch to queue behind it.
  outageTest("a writer connection left without an answer is dropped; later writes go through on others",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy, secret } = yield* seededNodeBehindProxy
      const others = yield* Effect.forEach(Array.from({ length: 8 }), () => newConversation(node.baseUrl, secret))
      const append = (id: string, text: string) => postText(node.baseUrl, key, id, text)
      // Held by its own text: another connection's statement cannot take the hold first.
      proxy.holdFrom("stalled")
      expect((yield* append(conversationId, "stalled")).status).toBe(503)
      // Still held. Waves of concurrent appends keep both writers busy.
      for (let wave = 0; wave < 3; wave++) {
        const replies = yield* Effect.forEach(others, (id) => append(id, `wave ${wave}`), { concurrency: "unbounded" })
        expect(replies.map((reply) => reply.status)).toEqual(others.map(() => 201))
      }
      proxy.release()
    }))

  // A write of the conversation may still be in flight when the append is settled (its commit held
  // up by PostgreSQL, which the test stands in for by holding the conversation's row): the look-up
  // cannot tell yet, so the answer is 502, not a 503 that the commit could still prove wrong.
  outageTest("an append settled while a write of its conversation is still in flight is 502 upstream_unavailable",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      proxy.holdFrom("append_batch")
      const pending = yield* Effect.fork(postText(node.baseUrl, key, conversationId, "undecided"))
      yield* Effect.sleep("7 seconds")
      const reply = yield* Effect.scoped(Effect.zipRight(holdConversationRow(conversationId), Fiber.join(pending)))
      expect(reply.status).toBe(502)
      // client-api.md "Errors": details are null for every code but those it lists.
      expect(reply.details).toBeNull()
      proxy.release()
    }))

  // The write's answer is lost and the database stops answering before the append can be looked
  // up: nobody knows whether it is stored, so the answer must not be a 503 (which says it is not).
  outageTest("an append whose outcome cannot be looked up is 502 upstream_unavailable, and a retry with its key stores it once",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      const keyed = { "x-idempotency-key": "unknown-outcome" }
      const post = postText(node.baseUrl, key, conversationId, "in limbo", keyed)
      proxy.holdFrom("append_batch")
      const pending = yield* Effect.fork(post)
      // Past the write's deadline, before the append is looked up (10.5 s after the request).
      yield* Effect.sleep("7 seconds")
      proxy.blackhole()
      const reply = yield* Fiber.join(pending)
      expect(reply.status).toBe(502)
      expect(reply.code).toBe("upstream_unavailable")
      // client-api.md "Errors": details are null for every code but those it lists.
      expect(reply.details).toBeNull()
      proxy.restore()
      const retried = yield* post.pipe(
        Effect.filterOrFail((answer) => answer.status === 201, () => "not yet"),
        Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo("30 seconds"))),
        Effect.orDie
      )
      const again = yield* post
      expect((again.data as { id: string }).id).toBe((retried.data as { id: string }).id)
      const stored = yield* storedActivities(node.baseUrl, key, conversationId)
      expect(stored.map((a) => a.text)).toEqual(["in limbo"])
    }))

  // The look-up of what a round's appends may have stored stalls (an append to a closed conversation
  // always looks): another tenant's append is answered before it, as for a conversation that does
  // not exist, so the stall cannot tell it the conversation exists.
  outageTest("another tenant's append is 404 before the round looks anything up, whatever the database does then",
    Effect.gen(function*() {
      const { conversationId, key, node, proxy } = yield* seededNodeBehindProxy
      const other = yield* seedConversation(node.baseUrl)
      const closed = yield* call(node.baseUrl, "POST", `/api/v1/conversations/${conversationId}/close`, { "x-api-key": key })
      expect(closed.status).toBe(200)
      proxy.holdFrom("idempotency_key = ANY(")
      const foreign = yield* postText(node.baseUrl, other.key, conversationId, "probe")
      expect(foreign.status).toBe(404)
      expect(foreign.code).toBe("not_found")
      // The look-up was never sent: nothing was held, and the hold stays armed.
      expect(proxy.release()).toBe(false)
      // The owner's own append to its closed conversation does look (the hold catches that look-up,
      // so it is the statement the foreign append never reached): 503, nothing was stored.
      const own = yield* postText(node.baseUrl, key, conversationId, "late")
      expect(own.status).toBe(503)
      expect(proxy.release()).toBe(true)
    }))

  // The body of a transaction refuses the request (a stale If-Match), and its ROLLBACK is held up on
  // the way until it times out: nothing was written either way, so the refusal is the answer, not a
  // 503 that would have the client retry a request that can only be refused again.
  outageTest("a refusal inside a transaction whose ROLLBACK fails is still the refusal (412), and nothing changed",
    Effect.gen(function*() {
      const { node, proxy } = yield* nodeBehindProxy({ DATABASE_STATEMENT_TIMEOUT_MS: "2500" })
      const { key } = yield* seedConversation(node.baseUrl)
      const created = yield* call(node.baseUrl, "POST", "/api/v1/manage/channels", { "x-api-key": key }, {
        channel: { name: "kept", type: "websocket" }
      })
      const channelId = (created.data as { id: string }).id
      proxy.holdFrom(channelId, "ROLLBACK")
      const refused = yield* call(node.baseUrl, "DELETE", `/api/v1/manage/channels/${channelId}`, {
        "x-api-key": key,
        "if-match": `"stale"`
      })
      expect(refused.status).toBe(412)
      expect(refused.code).toBe("precondition_failed")
      // The ROLLBACK was sent and held until it timed out (what the 503 used to answer).
      expect(proxy.release()).toBe(true)
      const kept = yield* call(node.baseUrl, "GET", `/api/v1/manage/channels/${channelId}`, { "x-api-key": key }).pipe(
        Effect.filterOrFail((answer) => answer.status !== 503, () => "not yet"),
        Effect.retry(Schedule.spaced("500 millis").pipe(Schedule.upTo("20 seconds"))),
        Effect.orDie
      )
      expect(kept.status).toBe(200)
    }))
})
