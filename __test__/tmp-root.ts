// vitest globalSetup: every test file's temporary directories (`os.tmpdir()`, which reads
// TMPDIR) go under one directory per run, removed when the run ends, so the suite leaves nothing
// in /tmp. The test files' forks start after this and inherit TMPDIR.
import { chmodSync, mkdtempSync, readdirSync, realpathSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

export default function setup(): () => void {
  const previous = process.env.TMPDIR
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'finn-vitest-')))
  // As /tmp is: a test run as root starts some commands as nobody (exhaustion.test.ts), and
  // they need their own directories here.
  chmodSync(root, 0o1777)
  process.env.TMPDIR = root
  return () => {
    if (previous === undefined) delete process.env.TMPDIR
    else process.env.TMPDIR = previous
    removeAll(root)
  }
}

/** rm -rf, after giving back the write and search bits some tests take away (read-only jails). */
function removeAll(dir: string): void {
  try {
    rmSync(dir, { recursive: true, force: true })
    return
  } catch {
    // fall through: a directory without write permission (as non-root) blocks removal
  }
  const openUp = (path: string): void => {
    let st
    try {
      st = statSync(path, { throwIfNoEntry: false })
    } catch {
      return
    }
    if (!st?.isDirectory()) return
    try {
      chmodSync(path, 0o700)
    } catch {
      return
    }
    for (const name of readdirSync(path)) openUp(join(path, name))
  }
  openUp(dir)
  rmSync(dir, { recursive: true, force: true })
}
