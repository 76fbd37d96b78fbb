'use strict'
// The Node versions and package manager that `npm test` checks the package with, beside the
// system Node: Node 22 (loa-finn's engines and its node:22-slim image), Node 24 (the next LTS)
// and pnpm 10.28.0 (loa-finn's packageManager). The npm registry's `node` package installs a
// real Node binary, so all three come from the registry into a cache directory, once.
//
//   node scripts/test-tools.js          install what is missing, print the paths as JSON
//   node scripts/test-tools.js vitest   run the vitest suite under Node 22 and Node 24
//
// The cache is $FINN_SANDBOX_TOOLS_DIR, else ~/.cache/finn-sandbox-tools.

const { execFileSync, spawnSync } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

const root = path.resolve(__dirname, '..')
const dir = process.env.FINN_SANDBOX_TOOLS_DIR || path.join(os.homedir(), '.cache', 'finn-sandbox-tools')
const NODE_MAJORS = [22, 24]
const PNPM_VERSION = '10.28.0'

function nodeBin(major) {
  return path.join(dir, `node${major}`, 'node_modules', 'node', 'bin', 'node')
}

function pnpmCli() {
  return path.join(dir, `pnpm${PNPM_VERSION}`, 'node_modules', 'pnpm', 'bin', 'pnpm.cjs')
}

function versionOf(bin, args = ['--version']) {
  try {
    return execFileSync(bin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim()
  } catch {
    return null
  }
}

function npmInstall(prefix, spec) {
  fs.rmSync(prefix, { recursive: true, force: true })
  fs.mkdirSync(prefix, { recursive: true })
  // --ignore-scripts=false: the `node` package fetches its platform binary in an install script.
  execFileSync('npm', ['install', '--no-audit', '--no-fund', '--no-save', '--ignore-scripts=false', '--prefix', prefix, spec], {
    stdio: ['ignore', 'ignore', 'inherit'],
  })
}

/** Installs what is missing; returns { node22, node24, pnpm } (absolute paths). */
function ensureTools() {
  const tools = {}
  for (const major of NODE_MAJORS) {
    const bin = nodeBin(major)
    if (!(versionOf(bin) || '').startsWith(`v${major}.`)) npmInstall(path.join(dir, `node${major}`), `node@${major}`)
    const version = versionOf(bin)
    if (!(version || '').startsWith(`v${major}.`)) throw new Error(`node@${major} from the npm registry gave ${version} at ${bin}`)
    tools[`node${major}`] = bin
  }
  if (versionOf(tools.node22, [pnpmCli(), '--version']) !== PNPM_VERSION) npmInstall(path.join(dir, `pnpm${PNPM_VERSION}`), `pnpm@${PNPM_VERSION}`)
  if (versionOf(tools.node22, [pnpmCli(), '--version']) !== PNPM_VERSION) throw new Error(`pnpm@${PNPM_VERSION} did not install at ${pnpmCli()}`)
  tools.pnpm = pnpmCli()
  return tools
}

/**
 * The vitest suite under Node 22 and 24. pack.test.ts is left out: it builds and installs the
 * tarball itself and already runs its consumer under Node 22, 24 and the system Node, so running
 * it again would add its build and installs twice for no new check.
 */
function vitestOnOtherNodes() {
  const tools = ensureTools()
  const vitest = path.join(root, 'node_modules', 'vitest', 'vitest.mjs')
  for (const major of NODE_MAJORS) {
    const bin = tools[`node${major}`]
    console.log(`\n== vitest on Node ${versionOf(bin)} (${bin})`)
    // threats.test.ts alone, as in `npm test`: its bombs and busy loops would otherwise share the
    // two cores with the event-loop measurements of the other files.
    let res = spawnSync(bin, [vitest, 'run', '--exclude', '__test__/pack.test.ts', '--exclude', '__test__/threats.test.ts'], { cwd: root, stdio: 'inherit' })
    if (res.status === 0) res = spawnSync(bin, [vitest, 'run', '__test__/threats.test.ts'], { cwd: root, stdio: 'inherit' })
    if (res.status !== 0) process.exit(res.status ?? 1)
  }
}

module.exports = { ensureTools }

if (require.main === module) {
  if (process.argv[2] === 'vitest') vitestOnOtherNodes()
  else console.log(JSON.stringify(ensureTools()))
}
