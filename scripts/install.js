'use strict'
// Builds the native addon from source at `npm install` (no prebuilt binaries are downloaded).
// Skipped when a binary for this platform exists and is newer than every Rust source.
// In a development checkout (with @napi-rs/cli installed) it runs `napi build`, which also
// regenerates native.js / native.d.ts; in a consumer install it runs cargo directly.

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')

const root = path.resolve(__dirname, '..')

function platformSuffix() {
  const { platform, arch } = process
  if (platform !== 'linux') return `${platform}-${arch}`
  const glibc = process.report && process.report.getReport().header.glibcVersionRuntime
  return `linux-${arch}-${glibc ? 'gnu' : 'musl'}`
}

function newestSourceMtime() {
  let newest = 0
  const visit = (p) => {
    const st = fs.statSync(p)
    if (st.isDirectory()) for (const name of fs.readdirSync(p)) visit(path.join(p, name))
    else newest = Math.max(newest, st.mtimeMs)
  }
  for (const p of ['src', 'Cargo.toml', 'Cargo.lock', 'build.rs']) {
    if (fs.existsSync(path.join(root, p))) visit(path.join(root, p))
  }
  return newest
}

function run(cmd, args) {
  const res = spawnSync(cmd, args, { cwd: root, stdio: ['ignore', 'inherit', 'inherit'] })
  if (res.error) throw new Error(`finn-sandbox: cannot run ${cmd}: ${res.error.message} (Rust and cargo are required to build from source)`)
  if (res.status !== 0) process.exit(res.status || 1)
  return res
}

const target = path.join(root, `finn-sandbox.${platformSuffix()}.node`)
const force = process.argv.includes('--force')
if (!force && fs.existsSync(target) && fs.statSync(target).mtimeMs >= newestSourceMtime()) {
  process.exit(0)
}

const napiCli = path.join(root, 'node_modules', '@napi-rs', 'cli', 'dist', 'cli.js')
if (fs.existsSync(napiCli) && fs.existsSync(path.join(root, '.git'))) {
  // A development checkout also builds the test hooks (src/core/pool/test_hooks.rs, inert unless
  // FINN_SANDBOX_TEST_HOOKS=1) that vitest uses; a consumer's build below never has them.
  const args = ['build', '--platform', '--release', '--features', 'test-hooks', '--js', 'native.js', '--dts', 'native.d.ts']
  run(process.execPath, [napiCli, ...args])
} else {
  const res = spawnSync('cargo', ['build', '--release', '--lib', '--message-format=json-render-diagnostics'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
    maxBuffer: 256 * 1024 * 1024,
  })
  if (res.error) throw new Error(`finn-sandbox: cannot run cargo: ${res.error.message} (Rust is required to build from source)`)
  if (res.status !== 0) process.exit(res.status || 1)
  const artifact = res.stdout
    .toString()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line))
    .filter((msg) => msg.reason === 'compiler-artifact' && msg.target.kind.includes('cdylib'))
    .flatMap((msg) => msg.filenames)
    .find((f) => /\.(so|dylib|dll)$/.test(f))
  if (!artifact) throw new Error('finn-sandbox: cargo built no cdylib')
  fs.copyFileSync(artifact, target)
}
fs.utimesSync(target, new Date(), new Date())
