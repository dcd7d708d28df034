import * as HttpApiEndpoint from "@effect/platform/HttpApiEndpoint"
import * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import * as HttpApiSchema from "@effect/platform/HttpApiSchema"
import { Schema } from "effect"
import { PortalUser, UserChange, UserInput } from "../domain/PortalUser.js"
import { IfMatchHeaders } from "./AdminApi.js"
import { manageGroup } from "./ManageApi.js"

const UserPath = Schema.Struct({ id: Schema.UUID })
const UserBody = Schema.Struct({ user: UserInput })
const UserChangeBody = Schema.Struct({ user: UserChange })
const UserData = Schema.Struct({ data: PortalUser })

const updateUser = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "PUT" | "PATCH">) =>
  endpoint.setPath(UserPath).setHeaders(IfMatchHeaders).setPayload(UserChangeBody).addSuccess(UserData)

/** The tenant's portal users (`/api/v1/manage/users`). */
export class UsersApi extends manageGroup(
  HttpApiGroup.make("users")
    .add(HttpApiEndpoint.get("listUsers", "/users").addSuccess(Schema.Struct({ data: Schema.Array(PortalUser) })))
    .add(HttpApiEndpoint.post("createUser", "/users").setPayload(UserBody).addSuccess(UserData, { status: 201 }))
    .add(HttpApiEndpoint.get("getUser", "/users/:id").setPath(UserPath).addSuccess(UserData))
    .add(updateUser(HttpApiEndpoint.put("putUser", "/users/:id")))
    .add(updateUser(HttpApiEndpoint.patch("patchUser", "/users/:id")))
    .add(
      HttpApiEndpoint.del("deleteUser", "/users/:id")
        .setPath(UserPath)
        .setHeaders(IfMatchHeaders)
        .addSuccess(HttpApiSchema.NoContent)
    )
) {}
