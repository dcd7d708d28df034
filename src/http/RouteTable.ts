import * as HttpApi from "@effect/platform/HttpApi"
import * as HttpLayerRouter from "@effect/platform/HttpLayerRouter"
import type * as HttpApiGroup from "@effect/platform/HttpApiGroup"
import { Context, Layer } from "effect"

const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE"] as const

/** A route as the edge sees it: for metrics labels and for telling 404 from 405. */
export interface RouteSpec {
  readonly method: (typeof METHODS)[number]
  readonly path: `/${string}`
}

/** Looks up route templates by method and URL. */
export class RouteTable extends Context.Tag("parley/RouteTable")<RouteTable, {
  /** The template of the matching route, if any. */
  readonly template: (method: string, url: string) => string | undefined
  /** Methods that would match this URL (non-empty means 405 rather than 404). */
  readonly allowedMethods: (url: string) => ReadonlyArray<string>
}>() {}

/** The endpoints of an HttpApi as route specs. */
export const routesOf = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
): ReadonlyArray<RouteSpec> => {
  const routes: Array<RouteSpec> = []
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      routes.push({ method: endpoint.method as RouteSpec["method"], path: endpoint.path as `/${string}` })
    }
  })
  return routes
}

/** A route table of the given routes. */
export const RouteTableLive = (routes: ReadonlyArray<RouteSpec>) =>
  Layer.sync(RouteTable, () => {
    const router = HttpLayerRouter.FindMyWay.make<string>()
    for (const route of routes) router.on(route.method, route.path, route.path)
    const template = (method: string, url: string) =>
      (router.find(method, url) ?? (method === "HEAD" ? router.find("GET", url) : undefined))?.handler
    return {
      template,
      // HEAD is served wherever GET is.
      allowedMethods: (url) => {
        const allowed: Array<string> = METHODS.filter((method) => router.find(method, url) !== undefined)
        return allowed.includes("GET") ? [...allowed, "HEAD"] : allowed
      }
    }
  })
