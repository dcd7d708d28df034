/**
 * Summarises a V8 `.cpuprofile` or `.heapprofile` written by `npm run bench -- --cpu-profile DIR`
 * (heap profiles with BENCH_HEAP_PROFILE=1): self time (or allocated bytes) by package, the
 * functions with the most, and optionally the caller stacks of chosen frames.
 *
 *   npx tsx test/bench/profile-summary.ts FILE [--top N] [--stacks REGEX] [--depth D]
 *
 * Self time in a CPU profile is wall time while the thread was on that frame: on a machine with
 * fewer cores than runnable processes, a syscall that wakes PostgreSQL (writev) collects the time
 * the node process spent preempted, so read native frames with care.
 */
import { readFileSync } from "node:fs"

interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
}

interface CpuNode {
  readonly id: number
  readonly callFrame: CallFrame
  readonly children?: ReadonlyArray<number>
}

interface CpuProfile {
  readonly nodes: ReadonlyArray<CpuNode>
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

interface HeapNode {
  readonly id: number
  readonly callFrame: CallFrame
  readonly selfSize: number
  readonly children: ReadonlyArray<HeapNode>
}

interface HeapProfile {
  readonly head: HeapNode
}

/** Either profile as frames with parent links and a weight (µs or bytes) per frame. */
interface Flat {
  readonly frames: Map<number, CallFrame>
  readonly parent: Map<number, number>
  readonly weight: Map<number, number>
  readonly unit: "time" | "bytes"
}

const flatten = (json: unknown): Flat => {
  const frames = new Map<number, CallFrame>()
  const parent = new Map<number, number>()
  const weight = new Map<number, number>()
  if (typeof json === "object" && json !== null && "head" in json) {
    const walk = (node: HeapNode, parentId: number | undefined) => {
      frames.set(node.id, node.callFrame)
      if (parentId !== undefined) parent.set(node.id, parentId)
      if (node.selfSize > 0) weight.set(node.id, node.selfSize)
      for (const child of node.children) walk(child, node.id)
    }
    walk((json as HeapProfile).head, undefined)
    return { frames, parent, weight, unit: "bytes" }
  }
  const profile = json as CpuProfile
  for (const node of profile.nodes) {
    frames.set(node.id, node.callFrame)
    for (const child of node.children ?? []) parent.set(child, node.id)
  }
  profile.samples.forEach((id, i) => weight.set(id, (weight.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)))
  return { frames, parent, weight, unit: "time" }
}

/** A package for a frame: the node_modules package, parley's folders, node internals, or V8. */
const packageOf = (frame: CallFrame): string => {
  const { functionName, url } = frame
  if (url === "") {
    if (functionName === "(idle)" || functionName === "(garbage collector)") return functionName
    if (functionName === "(program)") return "(program: native, not JS)"
    return "(native)"
  }
  if (url.startsWith("node:")) return "node internals"
  const modules = url.lastIndexOf("/node_modules/")
  if (modules >= 0) {
    const rest = url.slice(modules + "/node_modules/".length).split("/")
    return rest[0]!.startsWith("@") ? `${rest[0]}/${rest[1]}` : rest[0]!
  }
  const parley = /\/(src|cluster|bench|migrations)\//.exec(url)
  return parley === null ? url : `parley ${parley[1]}/`
}

const frameKey = (f: CallFrame) => {
  const where = f.url.replace(/^.*\/node_modules\//, "").replace(/^file:\/\/.*?\/(src|cluster|bench)\//, "$1/")
  return `${f.functionName || "(anonymous)"} ${where}:${f.lineNumber + 1}`
}

const main = () => {
  const args = process.argv.slice(2)
  const file = args[0]
  if (file === undefined) {
    console.error("usage: tsx test/bench/profile-summary.ts FILE [--top N] [--stacks REGEX] [--depth D]")
    process.exit(2)
  }
  const flag = (name: string) => {
    const i = args.indexOf(name)
    return i < 0 ? undefined : args[i + 1]
  }
  const top = Number(flag("--top") ?? "30")
  const stacks = flag("--stacks")
  const depth = Number(flag("--depth") ?? "12")

  const flat = flatten(JSON.parse(readFileSync(file, "utf8")))
  const total = [...flat.weight.values()].reduce((a, b) => a + b, 0)
  const pct = (w: number) => `${((w / total) * 100).toFixed(1).padStart(5)}%`
  const sumBy = (key: (frame: CallFrame) => string) => {
    const sums = new Map<string, number>()
    for (const [id, w] of flat.weight) {
      const k = key(flat.frames.get(id)!)
      sums.set(k, (sums.get(k) ?? 0) + w)
    }
    return [...sums].sort((a, b) => b[1] - a[1])
  }

  console.log(flat.unit === "time"
    ? `${file}: ${(total / 1e6).toFixed(2)} s sampled`
    : `${file}: ${(total / 1048576).toFixed(1)} MiB allocated (sampled estimate)`)
  console.log(`\nself ${flat.unit === "time" ? "time" : "allocation"} by package:`)
  for (const [name, w] of sumBy(packageOf).slice(0, 20)) console.log(`  ${pct(w)}  ${name}`)
  console.log(`\ntop ${top} functions:`)
  for (const [name, w] of sumBy(frameKey).slice(0, top)) console.log(`  ${pct(w)}  ${name}`)

  if (stacks !== undefined) {
    const pattern = new RegExp(stacks)
    const byStack = new Map<string, number>()
    for (const [id, w] of flat.weight) {
      if (!pattern.test(frameKey(flat.frames.get(id)!))) continue
      const path: Array<string> = [frameKey(flat.frames.get(id)!)]
      for (let p = flat.parent.get(id); p !== undefined && path.length <= depth; p = flat.parent.get(p)) {
        path.push(frameKey(flat.frames.get(p)!))
      }
      const key = path.join("\n      <- ")
      byStack.set(key, (byStack.get(key) ?? 0) + w)
    }
    console.log(`\nheaviest stacks of frames matching /${stacks}/:`)
    for (const [stack, w] of [...byStack].sort((a, b) => b[1] - a[1]).slice(0, 8)) console.log(`  ${pct(w)}  ${stack}\n`)
  }
}

main()
