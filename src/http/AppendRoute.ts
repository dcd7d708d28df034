import type { ServerResponse } from "node:http"
import { Cause, Context, Effect, Either, Option, Runtime, Schema } from "effect"
import { type TenantCredential, withScope } from "../auth/TenantCredential.js"
import type { ActivityInput } from "../conversations/ActivityRules.js"
import { Conversations, type KeyCheck } from "../conversations/Conversations.js"
import { postActivity } from "../conversations/PostActivity.js"
import type { Activity } from "../domain/Activity.js"
import { BadRequest, OutcomeUnknown } from "../domain/ApiError.js"
import { type ConversationId, conversationIdOf } from "../domain/Conversation.js"
import { Lifecycle } from "../ops/Lifecycle.js"
import { RateLimiter } from "../ratelimit/RateLimiter.js"
import { ApiKeys } from "../tenants/ApiKeys.js"
import { ActivityBody } from "./ConversationsApi.js"
import {
  acceptsJson,
  isJsonContentType,
  MAX_JSON_BODY_BYTES,
  MAX_JSON_DEPTH,
  nestsDeeperThan,
  REQUEST_BODY_TOO_DEEP,
  REQUEST_BODY_UNREADABLE,
  REQUEST_SHAPE_MISMATCH
} from "./EdgeRules.js"
import { answerForCause, answerForError, bodyTooLarge } from "./ErrorAnswer.js"
import { type AbandonableRequest, type Answer, type RequestClaim, writeAnswer } from "./NodeServer.js"
import { requestIdFrom } from "./RequestId.js"
import { requestRecorder } from "./RequestRecorder.js"
import { credentialForApiKey, credentialOfKey } from "./TenantAuth.js"

const TEMPLATE = "/api/v1/conversations/:id/activities"
const PATH = /^\/api\/v1\/conversations\/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})\/activities$/i

const decodeBody = Schema.decodeUnknownEither(ActivityBody)

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
const claimable = (request: AbandonableRequest): ConversationId | undefined => {
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
  const id = PATH.exec(query === -1 ? url : url.slice(0, query))?.[1]
  return id === undefined ? undefined : conversationIdOf(id)
}

/**
 * Whether the node serves appends on the lean route; tests turn it off to run the same requests
 * the router's way (the answers must not differ).
 */
export class LeanAppendRoute extends Context.Reference<LeanAppendRoute>()("parley/LeanAppendRoute", {
  defaultValue: () => true
}) {}

/**
 * `POST /api/v1/conversations/:id/activities` with `x-api-key`, ahead of the router (ADR 0006): same
 * rules and answers as the routed handler; every request it does not claim goes to the router.
 */
export class AppendRoute extends Effect.Service<AppendRoute>()("parley/AppendRoute", {
  effect: Effect.gen(function*() {
    const keys = yield* ApiKeys
    const lifecycle = yield* Lifecycle
    const post = postActivity(yield* Conversations, yield* RateLimiter)
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const record = yield* requestRecorder

    const created = (data: Activity): Answer => ({ status: 201, body: { data } })

    /** The answer to a request: 201 with what it appended, or the failure's. */
    const answerFor = <E>(appended: Effect.Effect<Activity, E>, requestId: string): Effect.Effect<Answer> =>
      Effect.matchCauseEffect(appended, {
        onSuccess: (data) => Effect.succeed(created(data)),
        onFailure: (cause) => answerForCause(cause, requestId)
      })

    /**
     * The answer to an append made with a remembered key (ADR 0015): an answer about its own write
     * stands; any other waits for a lookup of the key, so a key revoked meanwhile gets its 401.
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
          aboutOwnWrite(cause) ? answerForCause(cause, requestId) : answerFor(Effect.zipRight(lookUp(), Effect.failCause(cause)), requestId)
      })

    const answer = (request: AbandonableRequest, conversationId: ConversationId, text: string, requestId: string, arrivedAt: number) =>
      Effect.suspend((): Effect.Effect<Answer> => {
        const rawKey = header(request, "x-api-key")
        const appendAs = (credential: TenantCredential, keyCheck?: KeyCheck) => {
          const payload = readBody(text)
          return typeof payload === "string"
            ? Effect.fail(new BadRequest({ message: payload }))
            : withScope(credential, "write", post(credential, conversationId, payload, header(request, "x-idempotency-key"), arrivedAt, keyCheck))
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

    /** Writes the answer, then records it; while draining no connection is kept for another request. */
    const respond = (response: ServerResponse, requestId: string, result: Answer, started: number, closeConnection: boolean) => {
      writeAnswer(response, requestId, result, closeConnection)
      return record(requestId, "POST", TEMPLATE, result.status, started)
    }

    const serve = (request: AbandonableRequest, response: ServerResponse, conversationId: ConversationId, text: string) => {
      const started = performance.now()
      // The request has arrived once its body has: a slow upload is not the write's time.
      const arrivedAt = Date.now()
      const requestId = requestIdFrom(header(request, "x-request-id"))
      runFork(
        Effect.flatMap(
          answer(request, conversationId, text, requestId, arrivedAt),
          (result) => respond(response, requestId, result, started, lifecycle.drainingNow())
        )
      )
    }

    /** A chunked body that grew past the limit: 413, and the connection closes after the answer. */
    const tooLarge = (request: AbandonableRequest, response: ServerResponse) => {
      request.abandoned = true
      request.pause()
      const requestId = requestIdFrom(header(request, "x-request-id"))
      runFork(respond(response, requestId, answerForError(bodyTooLarge(), requestId), performance.now(), true))
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
