'use strict'
// A contender for the session phase: the Cloudflare Sandbox SDK's foreground shell protocol,
// ported from Bun to Node for the bench (github.com/cloudflare/sandbox-sdk,
// packages/sandbox-container/src/session.ts at 6abf639c: `exec`, `buildFIFOScript` without cwd
// or env, `waitForExitCode`, `parseLogFile`; Apache-2.0).
//
// One `bash --norc` reads scripts from its stdin. Each command runs in a group command with its
// stdout and stderr redirected to temp files; bash then copies each file line by line into a
// log with a 3-byte prefix per stream, and writes the exit code to a file it renames into
// place. Node learns of the end by `fs.watch` on the directory, with a 50 ms poll as fallback,
// then reads and splits the log. Only the protocol is ported: no HTTP hop between the caller
// and the container, so the figures flatter the SDK.

const { spawn } = require('node:child_process')
const { randomUUID } = require('node:crypto')
const fs = require('node:fs')
const fsp = require('node:fs/promises')
const os = require('node:os')
const path = require('node:path')

const STDOUT_PREFIX = '\x01\x01\x01'
const STDERR_PREFIX = '\x02\x02\x02'

const quote = (s) => `'${s.replace(/'/g, "'\\''")}'`

class SdkShell {
  constructor({ cwd, env }) {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sdk-session-'))
    this.shell = spawn('bash', ['--norc'], { cwd, env, stdio: ['pipe', 'ignore', 'ignore'] })
  }

  async exec(command) {
    const id = randomUUID()
    const log = path.join(this.dir, `${id}.log`)
    const exitFile = path.join(this.dir, `${id}.exit`)
    const script = [
      '{',
      `  log=${quote(log)}`,
      '  {',
      `    ${command}`,
      '    EXIT_CODE=$?',
      '  } < /dev/null > "$log.stdout" 2> "$log.stderr"',
      `  (while IFS= read -r line || [[ -n "$line" ]]; do printf '\\x01\\x01\\x01%s\\n' "$line"; done < "$log.stdout" >> "$log") 2>/dev/null`,
      `  (while IFS= read -r line || [[ -n "$line" ]]; do printf '\\x02\\x02\\x02%s\\n' "$line"; done < "$log.stderr" >> "$log") 2>/dev/null`,
      '  rm -f "$log.stdout" "$log.stderr"',
      `  echo "$EXIT_CODE" > ${quote(exitFile)}.tmp`,
      `  mv ${quote(exitFile)}.tmp ${quote(exitFile)}`,
      '}',
    ].join('\n')
    this.shell.stdin.write(`${script}\n`)
    const exitCode = await waitForExitCode(exitFile)
    const { stdout, stderr } = await parseLogFile(log)
    await Promise.all([fsp.rm(log, { force: true }), fsp.rm(exitFile, { force: true })])
    return { exitCode, stdout, stderr }
  }

  async destroy() {
    this.shell.stdin.end()
    await new Promise((resolve) => (this.shell.exitCode !== null ? resolve() : this.shell.once('exit', resolve)))
    fs.rmSync(this.dir, { recursive: true, force: true })
  }
}

/** The SDK's hybrid wait: `fs.watch` on the directory, a 50 ms poll, and a check at once. */
function waitForExitCode(file) {
  return new Promise((resolve, reject) => {
    const name = path.basename(file)
    let resolved = false
    const finish = async () => {
      if (resolved) return
      let text
      try {
        text = await fsp.readFile(file, 'utf8')
      } catch {
        return
      }
      if (resolved) return
      resolved = true
      watcher.close()
      clearInterval(poll)
      resolve(Number.parseInt(text.trim(), 10))
    }
    const watcher = fs.watch(path.dirname(file), (_event, changed) => {
      if (changed === name) finish()
    })
    watcher.on('error', reject)
    const poll = setInterval(finish, 50)
    finish()
  })
}

async function parseLogFile(log) {
  let content
  try {
    content = await fsp.readFile(log, 'utf8')
  } catch {
    return { stdout: '', stderr: '' }
  }
  const out = []
  const err = []
  for (const line of content.split('\n')) {
    if (line.startsWith(STDOUT_PREFIX)) out.push(line.slice(STDOUT_PREFIX.length))
    else if (line.startsWith(STDERR_PREFIX)) err.push(line.slice(STDERR_PREFIX.length))
  }
  return { stdout: out.join('\n'), stderr: err.join('\n') }
}

module.exports = { SdkShell }
