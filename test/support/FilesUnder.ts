import { readdirSync } from "node:fs"
import { join } from "node:path"

/** Every file under `dir`, at any depth, whose name ends with `suffix`. */
export const filesUnder = (dir: string, suffix: string): ReadonlyArray<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? filesUnder(join(dir, entry.name), suffix)
      : entry.name.endsWith(suffix)
      ? [join(dir, entry.name)]
      : []
  )
