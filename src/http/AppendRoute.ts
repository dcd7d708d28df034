import type { ServerResponse } from "node:http"
import { Cause, Chunk, Effect, Either, Option, Runtime, Schema } from "effect"
import { logsAtDebug } from "../ops/LogLevels.js"
import type { ActivityInput } from "../conversations/ActivityRules.js"
import type { Activity } from "../domain/Activity.js"
import { Conversations, type KeyCheck } from "../conversations/Conversations.js"
import { BadRequest, OutcomeUnknown } from "../domain/ApiError.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import { Metrics } from "../ops/Metrics.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { ActivityBody } from "./ConversationsApi.js"
import { postActivity } from "./ConversationsHandlers.js"
import {
  acceptsJson,
  isJsonContentType,
  isWireError,
  MAX_JSON_BODY_BYTES,
  MAX_JSON_DEPTH,
  nestsDeeperThan,
  REQUEST_BODY_TOO_DEEP,
  REQUEST_BODY_TOO_LARGE,
  REQUEST_BODY_UNREADABLE,
  REQUEST_SHAPE_MISMATCH,
  retryAfterSeconds,
  statusOfWireError
} from "./EdgeRules.js"
import { envelopeBody, type ErrorEnvelope, toBody } from "./ErrorEnvelope.js"
import type { AbandonableRequest, RequestClaim } from "./NodeServer.js"
import { requestIdFrom } from "./RequestId.js"
import { credentialForApiKey, credentialOfKey, type TenantCredential } from "./TenantAuth.js"

const TEMPLATE = "/api/v1/conversations/:id/activities"
const PATH = /^\/api\/v1\/conversations\/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\/activities$/i

const decodeBody = Schema.decodeUnknownEither(ActivityBody)

interface Answer {
  readonly status: number
  readonly body: unknown
}

const failed = (status: number, code: string, message: string, details: Record<string, unknown> | null, requestId: string) =>
  ({ status, body: envelopeBody(code, message, details, requestId) }) satisfies Answer

/** A request header as one string (node joins repeated custom headers with ", "). */
const header = (request: AbandonableRequest, name: string): string | undefined => {
  const value = request.headers[name]
  return Array.isArray(value) ? value.join(", ") : value
}

/** The activity a body holds, or why it holds none (the router's 400 messages). */
const readBody = (text: string): ActivityInput | string => {
  let json: unknown
  try {
    json = text === "" ? null : JSON.parse(text)
  } catch {
    return REQUEST_BODY_UNREADABLE
  }
  const payload = decodeBody(json)
  return Either.isLeft(payload) ? REQUEST_SHAPE_MISMATCH : payload.right
}

/** A failure about this request's own write, which checked the key: its outcome unknown. */
const aboutOwnWrite = (cause: Cause.Cause<unknown>) =>
  Option.exists(Cause.failureOption(cause), (error) => error instanceof OutcomeUnknown)

/** The conversation id when the request is one this route answers exactly as the router would. */
const claimable = (request: AbandonableRequest): string | undefined => {
  if (request.method !== "POST") return undefined
  const headers = request.headers
  // Channel tokens (deprecated: the router marks every answer to one) and unusual requests take
  // the router's way, with its answers.
  if (headers["x-api-key"] === undefined || headers["x-channel-token"] !== undefined) return undefined
  if (!acceptsJson(headers["accept"])) return undefined
  if (!isJsonContentType(headers["content-type"])) return undefined
  if (Number(headers["content-length"] ?? "0") > MAX_JSON_BODY_BYTES) return undefined
  const url = request.url ?? ""
  const query = url.indexOf("?")
  return PATH.exec(query === -1 ? url : url.slice(0, query))?.[1]
}

/**
 * `POST /api/v1/conversations/:id/activities` with `x-api-key`, served on the node's HTTP server
 * ahead of the router: the hottest route skips the HttpApi layers (ADR 0006). It runs the same
 * authentication, rules and append as the routed handler and answers with the same statuses,
 * envelopes and headers; every request it does not claim goes to the router.
 */
export class AppendRoute extends Effect.Service<AppendRoute>()("parley/AppendRoute", {
  effect: Effect.gen(function*() {
    const keys = yield* ApiKeys
    const metrics = yield* Metrics
    const lifecycle = yield* Lifecycle
    const post = postActivity(yield* Conversations, yield* RateLimiter)
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const accessLog = yield* logsAtDebug

    /** The answer for a failure: the envelope of a typed error, or a logged 500 that reveals nothing. */
    const fromCause = (cause: Cause.Cause<unknown>, requestId: string): Effect.Effect<Answer> => {
      const failure = Chunk.head(Cause.failures(cause) as Chunk.Chunk<unknown>)
      if (Option.isSome(failure) && isWireError(failure.value)) {
        return Effect.succeed({ status: statusOfWireError(failure.value), body: toBody(failure.value, requestId) })
      }
      // The one line a request of this route writes itself: it names the request.
      return Effect.logError("request failed unexpectedly", cause).pipe(
        Effect.annotateLogs("request_id", requestId),
        Effect.as(failed(500, "internal", "internal error", null, requestId))
      )
    }

    const created = (data: Activity): Answer => ({ status: 201, body: { data } })

    /** The answer to a request: 201 with what it appended, or the failure's. */
    const answerFor = <E>(appended: Effect.Effect<Activity, E>, requestId: string): Effect.Effect<Answer> =>
      Effect.matchCauseEffect(appended, {
        onSuccess: (data) => Effect.succeed(created(data)),
        onFailure: (cause) => fromCause(cause, requestId)
      })

    /**
     * The answer to an append made with a key from this node's recent lookups (ADR 0015). Its write
     * checks the key, so an answer about that write stands: its draft stored, or its outcome
     * unknown. Any other (a refusal, the activity an idempotency key names already) waits for a
     * lookup of the key, so that a key revoked meanwhile gets its 401 as with a lookup first.
     */
    const answerConfirmed = <E, E2>(
      appended: Effect.Effect<Activity, E>,
      draftId: string,
      lookUp: () => Effect.Effect<unknown, E2>,
      requestId: string
    ): Effect.Effect<Answer> =>
      Effect.matchCauseEffect(appended, {
        onSuccess: (data) =>
          data.id === draftId ? Effect.succeed(created(data)) : answerFor(Effect.as(lookUp(), data), requestId),
        onFailure: (cause) =>
          aboutOwnWrite(cause) ? fromCause(cause, requestId) : answerFor(Effect.zipRight(lookUp(), Effect.failCause(cause)), requestId)
      })

    const answer = (request: AbandonableRequest, conversationId: string, text: string, requestId: string, arrivedAt: number) =>
      Effect.suspend((): Effect.Effect<Answer> => {
        const rawKey = header(request, "x-api-key")
        const appendAs = (credential: TenantCredential, keyCheck?: KeyCheck) => {
          const payload = readBody(text)
          return typeof payload === "string"
            ? Effect.fail(new BadRequest({ message: payload }))
            : post(credential, conversationId, payload, header(request, "x-idempotency-key"), arrivedAt, keyCheck)
        }
        // The router's edge refuses a body nested too deep before any route or credential.
        if (nestsDeeperThan(text, MAX_JSON_DEPTH)) {
          return answerFor(Effect.fail(new BadRequest({ message: REQUEST_BODY_TOO_DEEP })), requestId)
        }
        const lookUp = () => credentialForApiKey(keys, rawKey)
        const recent = rawKey === undefined || rawKey === "" ? undefined : keys.recentlyValid(rawKey)
        // The caller is known before the body is read, as the router's authentication does it.
        if (recent === undefined) return answerFor(Effect.flatMap(lookUp(), (credential) => appendAs(credential)), requestId)
        const draftId = crypto.randomUUID()
        const appended = appendAs(credentialOfKey(recent), { keyId: recent.id, draftId })
        return answerConfirmed(appended, draftId, lookUp, requestId)
      })

    const respond = (
      response: ServerResponse,
      requestId: string,
      result: Answer,
      started: number,
      closeConnection: boolean
    ) => {
      const text = JSON.stringify(result.body)
      const headers: Record<string, string | number> = {
        "content-type": "application/json",
        "content-length": Buffer.byteLength(text),
        "x-request-id": requestId
      }
      if (result.status === 429 || result.status === 503) {
        headers["retry-after"] = retryAfterSeconds((result.body as ErrorEnvelope).error.details?.["retry_after_ms"])
      }
      // While draining (or when the body was left unread) no connection is kept for another request.
      if (closeConnection) headers["connection"] = "close"
      if (!response.destroyed) {
        response.writeHead(result.status, headers)
        response.end(text)
      }
      const seconds = (performance.now() - started) / 1000
      metrics.observeRequest(TEMPLATE, "POST", result.status, seconds)
      return seconds
    }

    const serve = (request: AbandonableRequest, response: ServerResponse, conversationId: string, text: string) => {
      const started = performance.now()
      // The request has arrived once its body has: a slow upload is not the write's time.
      const arrivedAt = Date.now()
      const requestId = requestIdFrom(header(request, "x-request-id"))
      runFork(
        Effect.flatMap(answer(request, conversationId, text, requestId, arrivedAt), (result) => {
          const seconds = respond(response, requestId, result, started, lifecycle.drainingNow())
          return accessLog
            ? Effect.logDebug("http request").pipe(Effect.annotateLogs({
              request_id: requestId,
              method: "POST",
              route: TEMPLATE,
              status: result.status,
              duration_ms: Math.round(seconds * 1000)
            }))
            : Effect.void
        })
      )
    }

    /** A chunked body that grew past the limit: 413, and the connection closes after the answer. */
    const tooLarge = (request: AbandonableRequest, response: ServerResponse) => {
      request.abandoned = true
      request.pause()
      const requestId = requestIdFrom(header(request, "x-request-id"))
      const answer = failed(413, "payload_too_large", REQUEST_BODY_TOO_LARGE, { max_bytes: MAX_JSON_BODY_BYTES }, requestId)
      // The rest of the body is never read, so the connection cannot carry another request.
      respond(response, requestId, answer, performance.now(), true)
    }

    const claim: RequestClaim = (request, response) => {
      const conversationId = claimable(request)
      if (conversationId === undefined) return false
      const chunks: Array<Buffer> = []
      let size = 0
      const onData = (chunk: Buffer) => {
        size += chunk.length
        if (size > MAX_JSON_BODY_BYTES) {
          request.off("data", onData)
          request.off("end", onEnd)
          tooLarge(request, response)
        } else chunks.push(chunk)
      }
      const onEnd = () => serve(request, response, conversationId, Buffer.concat(chunks, size).toString("utf8"))
      request.on("data", onData)
      request.once("end", onEnd)
      return true
    }

    return { claim } as const
  })
}) {}
