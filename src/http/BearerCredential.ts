import type * as HttpServerRequest from "@effect/platform/HttpServerRequest"

/** The one word after `Bearer` in `Authorization`; undefined when the header is missing or not that. */
export const bearerCredential = (request: HttpServerRequest.HttpServerRequest): string | undefined =>
  /^Bearer\s+(\S+)\s*$/i.exec(request.headers["authorization"] ?? "")?.[1]

/** Whether a bearer credential has the shape of a JWT (a client token) rather than a secret or key. */
export const looksLikeToken = (credential: string) => /^[\w-]+\.[\w-]+\.[\w-]*$/.test(credential)
