import { describe, expect, it } from "@effect/vitest"
import { ConfigError, ConfigProvider, ConfigProviderPathPatch, Effect, HashSet, Layer } from "effect"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import ts from "typescript"
import { AppConfig } from "../src/config/AppConfig.js"
import { filesUnder } from "./support/FilesUnder.js"

const VARIABLE = /^[A-Z][A-Z0-9_]*$/
const CONFIG_MODULE = join("src", "config", "AppConfig.ts")

const literalText = (node: ts.Node | undefined): string | undefined =>
  node !== undefined && (ts.isStringLiteral(node) || ts.isNoSubstitutionTemplateLiteral(node)) ? node.text : undefined

/**
 * Variable names a source file reads. In the configuration module every helper takes the variable's
 * name first (`millis("DRAIN_MAX_MS", …)`), so any call given an upper-case name counts there;
 * elsewhere only `Config.*("NAME")`, `Schema.Config("NAME", …)` and `process.env.NAME` do.
 */
const namesReadIn = (file: string): ReadonlyArray<string> => {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true)
  const names: Array<string> = []
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node)) {
      const first = literalText(node.arguments[0])
      const callee = node.expression.getText(source)
      const reads = file === CONFIG_MODULE || /^Config\.\w+$/.test(callee) || callee === "Schema.Config"
      if (first !== undefined && VARIABLE.test(first) && reads) names.push(first)
    }
    if (ts.isPropertyAccessExpression(node) && node.expression.getText(source) === "process.env") {
      names.push(node.name.text)
    }
    if (ts.isElementAccessExpression(node) && node.expression.getText(source) === "process.env") {
      const key = literalText(node.argumentExpression)
      if (key !== undefined) names.push(key)
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return names
}

/** Every name AppConfig asks its provider for, built however it is: all unset, so all defaults. */
const namesAppConfigLoads = Effect.gen(function*() {
  const asked = new Set<string>()
  const recording = ConfigProvider.fromFlat(ConfigProvider.makeFlat({
    load: (path) => {
      asked.add(path.join("."))
      return Effect.fail(ConfigError.MissingData([...path], "unset"))
    },
    enumerateChildren: () => Effect.succeed(HashSet.empty()),
    patch: ConfigProviderPathPatch.empty
  }))
  yield* AppConfig.pipe(Effect.provide(AppConfig.Default.pipe(Layer.provide(Layer.setConfigProvider(recording)))))
  return asked
})

/** The names in the first cell of each row of the table headed `Variable` (`PORT` / `HOST` is two). */
const documentedNames = (markdown: string): ReadonlyArray<string> => {
  const lines = markdown.split("\n")
  const header = lines.findIndex((line) => /^\|\s*Variable\s*\|/.test(line))
  const rows = lines.slice(header + 2)
  const end = rows.findIndex((line) => !line.startsWith("|"))
  return (end === -1 ? rows : rows.slice(0, end)).flatMap((row) =>
    [...(row.split("|")[1] ?? "").matchAll(/`([^`]+)`/g)].map((match) => match[1] ?? "").filter((name) =>
      VARIABLE.test(name)
    )
  )
}

describe("docs/configuration.md", () => {
  const documented = documentedNames(readFileSync(join("docs", "configuration.md"), "utf8"))

  it.effect("the parser finds the settings it is meant to find", () =>
    Effect.sync(() => {
      expect(namesReadIn(CONFIG_MODULE)).toEqual(expect.arrayContaining(["PORT", "HOST", "DATABASE_URL", "LOG_LEVEL"]))
      expect(documented).toEqual(expect.arrayContaining(["PORT", "CLUSTER_STREAM_LIFETIME_MS"]))
    }))

  it.effect("lists every variable once", () =>
    Effect.sync(() => {
      expect(documented.filter((name, i) => documented.indexOf(name) !== i)).toEqual([])
    }))

  it.effect("lists exactly the variables the code reads", () =>
    Effect.gen(function*() {
      const loaded = yield* namesAppConfigLoads
      const read = new Set([...loaded, ...["src", "cluster"].flatMap((dir) => filesUnder(dir, ".ts")).flatMap(namesReadIn)])
      // Both directions named, so a failure says which rows to add or drop.
      expect({
        undocumented: [...read].filter((name) => !documented.includes(name)).sort(),
        notRead: documented.filter((name) => !read.has(name)).sort()
      }).toEqual({ undocumented: [], notRead: [] })
    }))
})
