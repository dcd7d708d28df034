import { describe, expect, it } from "@effect/vitest"
import { Cause, Exit, Option } from "effect"
import { MAX_STATEMENT_JSON } from "../src/conversations/ActivityWriter.js"
import type { ConversationState } from "../src/conversations/ConversationState.js"
import {
  type AppendCommand,
  decide,
  editTargets,
  planDeliveries,
  type RoundAnswer,
  roundSize,
  type StatusCommand
} from "../src/conversations/RoundDecision.js"
import type { Activity, ActivityDraft } from "../src/domain/Activity.js"
import type { ConversationClosed, InvalidMessage, Unavailable } from "../src/domain/ApiError.js"
import { ChannelId } from "../src/domain/Channel.js"
import { TenantId } from "../src/domain/Tenant.js"
import { compileStored } from "../src/routing/Conditions.js"
import { type PlannedChannel, type PlannedRule, type Planner, planRouting } from "../src/routing/RoutingPlan.js"
import { messageDraft } from "./support/Fixtures.js"

const NOW = Date.parse("2030-01-01T12:00:00.000Z")
const tenantId = TenantId.to.make(crypto.randomUUID())
const originChannel = ChannelId.to.make(crypto.randomUUID())

const conversation = (status: "active" | "closed", updatedAt = "2030-01-01T11:00:00.000Z"): ConversationState => ({
  tenant_id: tenantId,
  status,
  head_seq: 4,
  updated_at: updatedAt,
  origin_channel_id: originChannel,
  metadata: { tier: "gold" },
  participant: null
})

const append = (draft: ActivityDraft, fields: Partial<AppendCommand> = {}): AppendCommand => ({
  _tag: "Append",
  tenantId,
  draft,
  deadline: NOW + 5000,
  arrivedLate: false,
  ...fields
})

const setStatus = (status: "active" | "closed", fields: Partial<StatusCommand> = {}): StatusCommand => ({
  _tag: "SetStatus",
  tenantId,
  status,
  reason: "manual",
  idleSince: null,
  deadline: NOW + 5000,
  arrivedLate: false,
  ...fields
})

const stored = (draft: ActivityDraft, seq: number): Activity => ({
  ...draft,
  seq,
  edited_at: null,
  deleted_at: null,
  conversation_id: crypto.randomUUID(),
  tenant_id: tenantId,
  inserted_at: "2030-01-01T11:00:00.000Z"
})

/** The error a command was refused with, if it was. */
const errorOf = (answer: RoundAnswer) => {
  const exit: Exit.Exit<unknown, InvalidMessage | ConversationClosed | Unavailable> = answer
  return Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
}
const failureTag = (answer: RoundAnswer) => errorOf(answer)?._tag

const NOTHING_DELETED: ReadonlySet<string> = new Set()

describe("RoundDecision", () => {
  it("an append after a close in the same round is refused as closed, and only the close is written", () => {
    const close = setStatus("closed")
    const late = append(messageDraft("after the close"))
    const decided = decide([close, late], conversation("active"), [], NOTHING_DELETED, NOW)
    expect(decided.answered.map(([command, answer]) => [command, failureTag(answer)])).toEqual([[late, "ConversationClosed"]])
    expect(decided.waiting).toEqual([[close, null]])
    expect(decided.drafts.map((draft) => draft.metadata)).toEqual([
      { event: "conversation_closed", status: "closed", reason: "manual" }
    ])
    expect([decided.status, decided.statusChange]).toEqual(["closed", "closed"])
  })

  it("an append before a close in the same round is written with it", () => {
    const first = append(messageDraft("before the close"))
    const decided = decide([first, setStatus("closed")], conversation("active"), [], NOTHING_DELETED, NOW)
    expect(decided.answered).toEqual([])
    expect(decided.drafts.map((draft) => draft.text)).toEqual(["before the close", null])
  })

  it("an append after a reopen in the same round is written", () => {
    const reopen = setStatus("active")
    const after = append(messageDraft("after the reopen"))
    const decided = decide([after, reopen, append(messageDraft("second"))], conversation("closed"), [], NOTHING_DELETED, NOW)
    expect(decided.answered.map(([, answer]) => failureTag(answer))).toEqual(["ConversationClosed"])
    expect(decided.drafts.map((draft) => draft.text)).toEqual([null, "second"])
    expect(decided.statusChange).toBe("active")
  })

  it("a draft stored already is answered with the stored activity, by id or by key", () => {
    const byId = messageDraft("re-sent")
    const byKey = messageDraft("retried", "key-1")
    const storedById = stored(byId, 3)
    const storedByKey = stored({ ...byKey, id: crypto.randomUUID() }, 4)
    const retry = append({ ...byKey, id: crypto.randomUUID() })
    const decided = decide([append(byId), retry], conversation("active"), [storedById, storedByKey], NOTHING_DELETED, NOW)
    expect(decided.answered.map(([, answer]) => answer)).toEqual([Exit.succeed(storedById), Exit.succeed(storedByKey)])
    expect(decided.drafts).toEqual([])
  })

  it("a second draft with a key of this round waits for the first one's activity", () => {
    const first = append(messageDraft("first", "same"))
    const again = append(messageDraft("again", "same"))
    const decided = decide([first, again], conversation("active"), [], NOTHING_DELETED, NOW)
    expect(decided.drafts).toEqual([first.draft])
    expect(decided.waiting).toEqual([[first, first.draft.id], [again, first.draft.id]])
  })

  it("an edit of a message deleted before or earlier in the round is refused", () => {
    const before = crypto.randomUUID()
    const inRound = crypto.randomUUID()
    const edit = (target: string) => append({ ...messageDraft("edited"), type: "messageUpdate", reply_to_id: target })
    const remove = append({ ...messageDraft("x"), type: "messageDelete", reply_to_id: inRound })
    const decided = decide([edit(before), remove, edit(inRound)], conversation("active"), [], new Set([before]), NOW)
    expect(decided.answered.map(([, answer]) => failureTag(answer))).toEqual(["InvalidMessage", "InvalidMessage"])
    expect(decided.drafts).toEqual([remove.draft])
    expect(editTargets([edit(before), remove])).toEqual([before])
  })

  it("an expiry is void after an append in the same round, or once the conversation moved after its mark", () => {
    const expiry = setStatus("closed", { reason: "expired", idleSince: "2030-01-01T11:30:00.000Z" })
    const afterAppend = decide([append(messageDraft("hi")), expiry], conversation("active"), [], NOTHING_DELETED, NOW)
    expect(afterAppend.answered.map(([, answer]) => answer)).toEqual([Exit.succeed({ changed: false })])
    const moved = decide([expiry], conversation("active", "2030-01-01T11:45:00.000Z"), [], NOTHING_DELETED, NOW)
    expect(moved.answered.map(([, answer]) => answer)).toEqual([Exit.succeed({ changed: false })])
    const idle = decide([expiry], conversation("active"), [], NOTHING_DELETED, NOW)
    expect(idle.statusChange).toBe("closed")
  })

  it("a command past its deadline gets a 503 whose reason says where the time went", () => {
    const reasons = decide(
      [append(messageDraft("a"), { deadline: NOW - 1, arrivedLate: true }), setStatus("closed", { deadline: NOW - 1 })],
      conversation("active"),
      [],
      NOTHING_DELETED,
      NOW
    ).answered.map(([, answer]) => {
      const error = errorOf(answer)
      return error?._tag === "Unavailable" ? error.reason : undefined
    })
    expect(reasons).toEqual(["cluster_unavailable", "database_unavailable"])
  })

  it("the write's deadline is the earliest of its commands', and each API key is checked once", () => {
    const keyId = crypto.randomUUID()
    const decided = decide(
      [
        append(messageDraft("a"), { deadline: NOW + 300, keyCheck: keyId }),
        append(messageDraft("b"), { deadline: NOW + 100, keyCheck: keyId })
      ],
      conversation("active"),
      [],
      NOTHING_DELETED,
      NOW
    )
    expect(decided.deadline).toBe(NOW + 100)
    expect(decided.keyChecks).toEqual([keyId])
  })

  it("deliveries go to the origin channel, except for activities that came from it, and to matching rules' targets", () => {
    const target = crypto.randomUUID()
    const channels = new Map<string, PlannedChannel>([
      [originChannel, { id: originChannel, mode: "duplex", status: "active", transformations: [] }],
      [target, { id: target, mode: "outbound", status: "active", transformations: [{ type: "prefix_text", value: "[gold] " }] }]
    ])
    const rule: PlannedRule = {
      id: crypto.randomUUID(),
      name: "gold to target",
      source_channel_id: originChannel,
      target_channel_ids: [target],
      enabled: true,
      priority: 100,
      stop_processing: false,
      conditions: { field: "conversation.metadata.tier", op: "eq", value: "gold" },
      condition: compileStored({ field: "conversation.metadata.tier", op: "eq", value: "gold" }),
      transformations: [{ type: "set_metadata", key: "routed", value: true }]
    }
    const planOne: Planner = (activity, conversation, participant, at) =>
      planRouting({ activity, conversation, participant, at, rules: [rule], channels })
    const fromOrigin = { ...messageDraft("inbound"), source_channel_id: originChannel }
    const fromApi = messageDraft("outbound")
    const planned = planDeliveries(conversation("active"), [fromOrigin, fromApi], planOne, new Date(NOW))
    expect(planned).toEqual([
      { id: expect.any(String), activityId: fromOrigin.id, channelId: target, copy: expect.objectContaining({ text: "[gold] inbound" }), routed: true },
      { id: expect.any(String), activityId: fromApi.id, channelId: originChannel, copy: fromApi, routed: false },
      { id: expect.any(String), activityId: fromApi.id, channelId: target, copy: expect.objectContaining({ text: "[gold] outbound" }), routed: true }
    ])
    // The target's copy has its own chain then the rule's; the stored draft is untouched.
    expect(planned[0]!.copy.metadata).toEqual({ ...fromOrigin.metadata, routed: true })
    expect(fromOrigin.text).toBe("inbound")
    // A conversation the condition does not match goes to its origin alone.
    const silver = { ...conversation("active"), metadata: { tier: "silver" } }
    expect(planDeliveries(silver, [fromOrigin, fromApi], planOne, new Date(NOW)).map((d) => d.channelId)).toEqual([originChannel])
  })

  it("a round takes at most 256 commands, and stops before the drafts outgrow half a statement's JSON", () => {
    const small = Array.from({ length: 300 }, (_, i) => append(messageDraft(`m${i}`)))
    expect(roundSize(small)).toBe(256)
    const large = Array.from({ length: 5 }, () => append(messageDraft("x".repeat(MAX_STATEMENT_JSON / 4))))
    expect(roundSize(large)).toBe(1)
  })
})
