import * as HttpApiBuilder from "@effect/platform/HttpApiBuilder"
import { Effect, Option } from "effect"
import type { UserChange } from "../domain/PortalUser.js"
import { PortalUsers } from "../tenants/PortalUsers.js"
import { CurrentCredential, keyGoneWithTenant } from "./TenantAuth.js"
import { withETag } from "./ETag.js"
import { ParleyApi } from "./ParleyApi.js"

/** `/api/v1/manage/users`: the calling key's tenant's portal users. */
export const UsersHandlers = HttpApiBuilder.group(ParleyApi, "users", (handlers) =>
  Effect.gen(function*() {
    const users = yield* PortalUsers
    const update = ({ headers, path, payload }: {
      readonly path: { readonly id: string }
      readonly headers: { readonly "if-match"?: string | undefined }
      readonly payload: { readonly user: UserChange }
    }) =>
      CurrentCredential.pipe(
        Effect.flatMap((credential) =>
          users.update(credential.tenantId, path.id, payload.user, Option.fromNullable(headers["if-match"]), credential.actor)
        ),
        Effect.flatMap(withETag)
      )
    return handlers
      .handle("listUsers", () =>
        CurrentCredential.pipe(
          Effect.flatMap((credential) => users.list(credential.tenantId)),
          Effect.flatMap((data) => withETag(data))
        ))
      .handle("createUser", ({ payload }) =>
        CurrentCredential.pipe(
          Effect.flatMap((credential) =>
            users.create(credential.tenantId, payload.user, credential.actor).pipe(keyGoneWithTenant)
          ),
          Effect.flatMap(withETag)
        ))
      .handle("getUser", ({ path }) =>
        CurrentCredential.pipe(
          Effect.flatMap((credential) => users.get(credential.tenantId, path.id)),
          Effect.flatMap(withETag)
        ))
      .handle("putUser", update)
      .handle("patchUser", update)
      .handle("deleteUser", ({ headers, path }) =>
        CurrentCredential.pipe(
          Effect.flatMap((credential) =>
            users.remove(credential.tenantId, path.id, Option.fromNullable(headers["if-match"]), credential.actor)
          )
        ))
  }))
