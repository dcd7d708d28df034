import { Context } from "effect"

/** The id of the request being served; the edge sets it, the envelope and logs read it. */
export class RequestId extends Context.Reference<RequestId>()("parley/RequestId", {
  defaultValue: (): string | null => null
}) {}

/**
 * When the request being served had arrived, its body included (epoch ms); the edge sets it, and an
 * append's time budget counts from it. Null outside a request.
 */
export class RequestArrival extends Context.Reference<RequestArrival>()("parley/RequestArrival", {
  defaultValue: (): number | null => null
}) {}

const sane = /^[A-Za-z0-9._:@\-]{1,128}$/

/** Echoes a client's `x-request-id` when it is short and plain, otherwise makes one. */
export const requestIdFrom = (header: string | undefined): string =>
  header !== undefined && sane.test(header) ? header : crypto.randomUUID()
