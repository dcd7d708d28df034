import { SqlClient, SqlSchema } from "@effect/sql"
import { SqlError } from "@effect/sql/SqlError"
import { Data, Effect, Option, Schema } from "effect"
import type { Actor } from "../auth/Actor.js"
import { actorLabel } from "../auth/Actor.js"
import { generateCredential, hashCredential, hashCredentialHex, looksLike, shownPrefix } from "../auth/Credential.js"
import { AuditLog } from "../db/AuditLog.js"
import { makeBatcher } from "../db/Batcher.js"
import { prepared } from "../db/PreparedStatements.js"
import { ParentRows } from "../db/ParentRows.js"
import { orUnavailable } from "../db/SqlFailure.js"
import { inTransaction } from "../db/Transaction.js"
import { InsufficientScope, NotFound } from "../domain/ApiError.js"
import { ApiKey, type ApiKeyInput, type AuthenticatedKey, allScopes, Scope } from "../domain/ApiKey.js"
import { parseInstant } from "../domain/Instant.js"
import { LOOKUP_LIMIT } from "../domain/LookupLimit.js"
import { TenantId } from "../domain/Tenant.js"
import { Problems } from "../domain/Problems.js"

const KEY_COLUMNS = "id, tenant_id, name, prefix, scopes, expires_at, last_used_at, revoked_at, created_by, inserted_at, updated_at"

const AuthRow = Schema.Struct({
  hash: Schema.String,
  id: Schema.String,
  tenant_id: TenantId,
  kind: Schema.Literal("primary", "scoped"),
  scopes: Schema.Array(Scope),
  stale: Schema.Boolean
})

/** The last year an `expires_at` may fall in (UTC): ISO 8601 writes later years with six digits. */
const MAX_EXPIRY_YEAR = 9999

/** A key lookup gives up after this long (503), as the other reads of a request do. */
const LOOKUP_TIMEOUT_MS = 5_000
/** Keys one lookup statement asks for at most. */
const LOOKUP_BATCH_MAX = 256

/**
 * How long a lookup's answer stands in for a write that checks the key itself: just over the minute
 * after which `last_used_at` is stale, so a key in steady use is still marked (ADR 0015).
 */
const RECENT_KEY_MS = 65_000
/** Keys remembered at the most, the oldest going first (ADR 0015). */
const MAX_RECENT_KEYS = 10_000

const isScope = (s: string): s is Scope => (allScopes as ReadonlyArray<string>).includes(s)

/** Who issues a key: the scopes it may hand out, and the key asking (null for the admin API). */
export interface KeyIssuer {
  readonly keyId: string | null
  readonly scopes: ReadonlyArray<Scope>
}

/** The key asking to issue one was revoked or expired after it was checked (a revoke got there first). */
class IssuerGone extends Data.TaggedError("IssuerGone")<{ readonly keyId: string }> {}

const IssuerChainRow = Schema.Struct({ valid: Schema.Boolean, expires_at: Schema.NullOr(Schema.String) })

/** Tenant API keys: the primary key of each tenant and its scoped keys. Only hashes are stored. */
export class ApiKeys extends Effect.Service<ApiKeys>()("parley/ApiKeys", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const audit = yield* AuditLog
    const parents = yield* ParentRows

    const decodeAuthRows = Schema.decodeUnknown(Schema.Array(AuthRow))
    const decodeIssuerChain = Schema.decodeUnknown(Schema.Array(IssuerChainRow))

    /** Looks up many presented keys in one query; the answer for each is its row if valid now. */
    const findAuth = (hashes: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        const rows = yield* sql`${sql.literal(prepared("authenticate_keys"))}
          SELECT encode(k.key_hash, 'hex') AS hash, k.id, k.tenant_id, k.kind, k.scopes,
                 (k.last_used_at IS NULL OR k.last_used_at < now() - interval '1 minute') AS stale
          FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
          WHERE k.key_hash IN (SELECT decode(h, 'hex') FROM UNNEST(${hashes}::text[]) AS h)
            AND k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AND t.status = 'active'`
        const found = yield* decodeAuthRows(rows).pipe(Effect.orDie)
        const stale = [...new Set(found.filter((row) => row.stale).map((row) => row.id))]
        // A key row locked by a change in progress keeps its mark until its next use: never wait here.
        // The mark is bookkeeping: when it cannot be written, the keys found are still valid (a failed
        // update answered 503 to every request of the batch), and their next use tries again.
        if (stale.length > 0) {
          yield* sql`UPDATE api_keys SET last_used_at = now()
                     WHERE id IN (SELECT id FROM api_keys WHERE id = ANY(${stale}::uuid[]) FOR UPDATE SKIP LOCKED)`.pipe(
            Effect.catchAllCause((cause) => Effect.logWarning("last_used_at of API keys not written", cause))
          )
        }
        const byHash = new Map(found.map((row) => [row.hash, row]))
        return hashes.map((hash) => Option.fromNullable(byHash.get(hash)))
      })

    // Every request of the tenant API authenticates: the requests that arrive while one lookup
    // is in flight share the next (one at a time makes the largest batches: ADR 0006).
    const lookUp = yield* makeBatcher({
      maxBatch: LOOKUP_BATCH_MAX,
      concurrency: 1,
      run: findAuth,
      timeout: { ms: LOOKUP_TIMEOUT_MS, onTimeout: () => new SqlError({ cause: "timeout", message: "the key lookup timed out" }) }
    })

    // Keys this node's lookups found valid, by hash, with when (oldest first): appends use one
    // without a lookup for `RECENT_KEY_MS`, and their write checks it again (ADR 0015).
    const recent = new Map<string, { readonly key: AuthenticatedKey; readonly at: number }>()

    /**
     * The key's identity when it is valid now; `last_used_at` is written at most once a minute. A
     * value that is not shaped like a key names none, and is neither hashed nor looked up.
     */
    const authenticate = (raw: string) =>
      Effect.suspend(() => {
        if (!looksLike("apiKey", raw)) return Effect.succeedNone
        const hash = hashCredentialHex(raw)
        return lookUp(hash).pipe(
          Effect.map(Option.map((row): AuthenticatedKey => ({
            id: row.id,
            tenantId: row.tenant_id,
            kind: row.kind,
            scopes: row.scopes
          }))),
          Effect.tap((found) =>
            Effect.sync(() => {
              recent.delete(hash)
              if (Option.isNone(found)) return
              recent.set(hash, { key: found.value, at: performance.now() })
              if (recent.size > MAX_RECENT_KEYS) recent.delete(recent.keys().next().value!)
            })
          ),
          orUnavailable,
          // A value the database cannot compare names no key.
          Effect.catchTag("BadRequest", () => Effect.succeedNone)
        )
      })

    /**
     * The key a lookup here found valid within `RECENT_KEY_MS`, without the database. Only for a write that
     * checks the key again where it commits: it may have been revoked since.
     */
    const recentlyValid = (raw: string): AuthenticatedKey | undefined => {
      if (!looksLike("apiKey", raw)) return undefined
      const entry = recent.get(hashCredentialHex(raw))
      return entry !== undefined && performance.now() - entry.at < RECENT_KEY_MS ? entry.key : undefined
    }

    const listScoped = SqlSchema.findAll({
      Request: TenantId,
      Result: ApiKey,
      execute: (tenantId) =>
        sql`SELECT ${sql.literal(KEY_COLUMNS)} FROM api_keys
            WHERE tenant_id = ${tenantId} AND kind = 'scoped' ORDER BY inserted_at DESC, id DESC LIMIT ${LOOKUP_LIMIT}`
    })

    const findScoped = SqlSchema.findOne({
      Request: Schema.Struct({ tenantId: TenantId, id: Schema.String }),
      Result: ApiKey,
      execute: ({ id, tenantId }) =>
        sql`SELECT ${sql.literal(KEY_COLUMNS)} FROM api_keys
            WHERE tenant_id = ${tenantId} AND id = ${id} AND kind = 'scoped'`
    })

    const insertKey = SqlSchema.single({
      Request: Schema.Struct({
        id: Schema.String,
        tenantId: TenantId,
        kind: Schema.Literal("primary", "scoped"),
        name: Schema.String,
        prefix: Schema.String,
        hash: Schema.Uint8ArrayFromSelf,
        scopes: Schema.Array(Scope),
        expiresAt: Schema.NullOr(Schema.String),
        createdBy: Schema.String,
        issuerId: Schema.NullOr(Schema.String)
      }),
      Result: ApiKey,
      execute: (r) =>
        sql`
          INSERT INTO api_keys (id, tenant_id, kind, name, prefix, key_hash, scopes, expires_at, created_by, issuer_id)
          VALUES (${r.id}, ${r.tenantId}, ${r.kind}, ${r.name}, ${r.prefix}, ${r.hash}, ${r.scopes}, ${r.expiresAt},
                  ${r.createdBy}, ${r.issuerId})
          RETURNING ${sql.literal(KEY_COLUMNS)}`
    })

    const notFound = (id: string) => new NotFound({ message: `api key ${id} not found` })

    /** Stores a new key of the tenant and returns it with the raw key (shown once). */
    const create = (
      tenantId: TenantId,
      kind: "primary" | "scoped",
      name: string,
      scopes: ReadonlyArray<Scope>,
      expiresAt: string | null,
      actor: Actor,
      issuerId: string | null = null
    ) =>
      Effect.gen(function*() {
        const key = generateCredential("apiKey")
        const created = yield* insertKey({
          id: crypto.randomUUID(),
          tenantId,
          kind,
          name,
          prefix: shownPrefix(key),
          hash: hashCredential(key),
          scopes,
          expiresAt,
          createdBy: actorLabel(actor),
          issuerId
        })
        yield* audit.record(actor, {
          tenantId,
          action: kind === "primary" ? "api_key.primary_issued" : "api_key.created",
          resourceType: "api_key",
          resourceId: created.id,
          changes: { name, scopes, expires_at: expiresAt }
        })
        return { apiKey: created, key }
      })

    /**
     * Locks the issuer and the keys above it, top first as a revoke does, so issue and revoke serialise;
     * caps `expiresAt` at the issuer's, `IssuerGone` when it is not valid now (ADR 0016).
     */
    const lockIssuer = (tenantId: TenantId, keyId: string, expiresAt: string | null) =>
      Effect.gen(function*() {
        const rows = yield* sql`
          WITH RECURSIVE chain AS (
            SELECT id, issuer_id, 0 AS height FROM api_keys WHERE tenant_id = ${tenantId} AND id = ${keyId}
            UNION ALL
            SELECT k.id, k.issuer_id, chain.height + 1 FROM api_keys k JOIN chain ON k.id = chain.issuer_id
          )
          SELECT LEAST(${expiresAt}::timestamptz, k.expires_at) AS expires_at,
                 k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now()) AS valid
          FROM api_keys k JOIN chain ON chain.id = k.id
          ORDER BY chain.height DESC FOR SHARE OF k`
        const issuer = (yield* decodeIssuerChain(rows).pipe(Effect.orDie)).at(-1)
        return issuer?.valid === true ? issuer.expires_at : yield* new IssuerGone({ keyId })
      })

    /**
     * Issues a scoped key with only scopes the issuer holds (403 `insufficient_scope`), never outliving it.
     * `TenantGone` or `IssuerGone` when either went meanwhile.
     */
    const issue = (tenantId: TenantId, input: ApiKeyInput, issuer: KeyIssuer, actor: Actor) =>
      Effect.gen(function*() {
        const problems = new Problems()
        const name = problems.requiredName("name", input.name) ?? ""
        const scopes = input.scopes ?? []
        if (scopes.length === 0) problems.add("scopes", "must name at least one scope")
        else if (!scopes.every(isScope)) problems.add("scopes", "must be read, write or manage")
        let expiresAt: string | null = null
        if (input.expires_at !== undefined && input.expires_at !== null) {
          const at = parseInstant(input.expires_at)
          if (Option.isNone(at)) {
            problems.add("expires_at", "must be an ISO 8601 date-time with Z or an offset, such as 2030-01-31T12:00:00Z")
          } else if (at.value.getTime() <= Date.now()) problems.add("expires_at", "must be in the future")
          // An offset can carry 9999-12-31 into the year 10000, which toISOString writes as +010000 (unstorable).
          else if (at.value.getUTCFullYear() > MAX_EXPIRY_YEAR) problems.add("expires_at", `must be before the year ${MAX_EXPIRY_YEAR + 1}`)
          else expiresAt = at.value.toISOString()
        }
        yield* problems.check()
        const wanted = [...new Set(scopes.filter(isScope))]
        const missing = wanted.filter((s) => !issuer.scopes.includes(s))
        if (missing.length > 0) {
          return yield* new InsufficientScope({ message: "a key can only issue scopes it holds", required: missing })
        }
        const { keyId } = issuer
        return yield* parents.lockTenant(tenantId, actor).pipe(
          Effect.zipRight(keyId === null ? Effect.succeed(expiresAt) : lockIssuer(tenantId, keyId, expiresAt)),
          Effect.flatMap((capped) => create(tenantId, "scoped", name, wanted, capped, actor, keyId)),
          inTransaction(sql)
        )
      }).pipe(orUnavailable)

    const list = (tenantId: TenantId) =>
      listScoped(tenantId).pipe(orUnavailable)

    const get = (tenantId: TenantId, id: string) =>
      findScoped({ tenantId, id }).pipe(
        orUnavailable,
        Effect.flatMap(Option.match({ onNone: () => Effect.fail(notFound(id)), onSome: Effect.succeed }))
      )

    /**
     * Revokes at once, with every key it issued, and the keys they issued, in one statement; the keys
     * stay listed with `revoked_at`. Revoking a revoked key changes nothing (no write, no audit row).
     */
    const revoke = (tenantId: TenantId, id: string, actor: Actor) =>
      Effect.gen(function*() {
        // The row lock makes concurrent revocations of one key write (and audit) it once.
        const rows = yield* sql<{ revoked: boolean }>`
          SELECT revoked_at IS NOT NULL AS revoked FROM api_keys
          WHERE tenant_id = ${tenantId} AND id = ${id} AND kind = 'scoped' FOR UPDATE`
        const row = rows[0]
        if (row === undefined) return yield* notFound(id)
        if (row.revoked) return
        // Locked top first, as issues lock the keys above them: the two never wait for each other in a cycle.
        const revoked = yield* sql<{ id: string }>`
          WITH RECURSIVE tree AS (
            SELECT ${id}::uuid AS id, 0 AS depth
            UNION ALL
            SELECT k.id, tree.depth + 1 FROM api_keys k JOIN tree ON k.issuer_id = tree.id
          ), doomed AS MATERIALIZED (
            SELECT k.id FROM api_keys k JOIN tree ON tree.id = k.id
            WHERE k.revoked_at IS NULL ORDER BY tree.depth FOR UPDATE OF k
          )
          UPDATE api_keys SET revoked_at = now(), updated_at = now()
          WHERE id IN (SELECT id FROM doomed) RETURNING id`
        const entry = { tenantId, action: "api_key.revoked", resourceType: "api_key" } as const
        yield* audit.record(actor, { ...entry, resourceId: id })
        const issued = revoked.map((key) => key.id).filter((key) => key !== id)
        if (issued.length > 0) yield* audit.recordEach(actor, { ...entry, changes: { revoked_with: id } }, issued)
      }).pipe(inTransaction(sql), orUnavailable)

    /**
     * Replaces the primary key, returning the new one once; the old one works for `graceSeconds` (0
     * revokes it at once). Runs in the caller's transaction.
     */
    const rotatePrimary = (tenantId: TenantId, graceSeconds: number, actor: Actor) =>
      Effect.gen(function*() {
        yield* sql`
          UPDATE api_keys
          SET expires_at = LEAST(COALESCE(expires_at, 'infinity'), now() + make_interval(secs => ${graceSeconds})),
              revoked_at = CASE WHEN ${graceSeconds} = 0 THEN now() ELSE revoked_at END,
              updated_at = now()
          WHERE tenant_id = ${tenantId} AND kind = 'primary' AND revoked_at IS NULL`
        const { key } = yield* create(tenantId, "primary", "primary", allScopes, null, actor)
        return key
      })

    /** Issues a scoped key for the operator (admin API): any scopes, no expiry cap, no issuer. */
    const issueAsOperator = (tenantId: TenantId, input: ApiKeyInput, actor: Actor) =>
      // Only a key can be gone: the operator is none.
      issue(tenantId, input, { keyId: null, scopes: allScopes }, actor).pipe(Effect.catchTag("IssuerGone", Effect.die))

    return { authenticate, recentlyValid, issue, issueAsOperator, list, get, revoke, create, rotatePrimary } as const
  }),
  dependencies: [AuditLog.Default, ParentRows.Default]
}) {}
