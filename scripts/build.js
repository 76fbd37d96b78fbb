'use strict'
// Builds this package's native files in release mode and puts them where they ship, beside
// native.js: the addon as `finn-sandbox.<suffix>.node` and every cargo [[bin]] of the crate as
// `<bin>.<suffix>`. The bins are read from cargo's JSON artifact messages, so a [[bin]] added to
// Cargo.toml ships with no change here; with none, none ships.
//
// In a development checkout (with @napi-rs/cli installed) it runs `napi build`, which also
// regenerates native.js / native.d.ts; elsewhere (a clean checkout's `npm pack`, the source
// fallback of an install) it runs cargo directly. Both build for the host triple explicitly so
// they share target/<triple>/release and its compiled dependencies.
//
// Usage: node scripts/build.js   (prepack runs it; scripts/install.js calls build())

const { spawnSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { PREBUILT_PLATFORMS, GLIBC_BASELINE, platformSuffix, addonPath, helperPath } = require('../platform.js')
const { compareVersions, newestGlibcNeeded } = require('./glibc.js')

const root = path.resolve(__dirname, '..')
const manifest = path.join(root, 'Cargo.toml')

class BuildError extends Error {}

function spawnOrThrow(cmd, args, options) {
  const res = spawnSync(cmd, args, { cwd: root, maxBuffer: 256 * 1024 * 1024, ...options })
  if (res.error) throw new BuildError(`cannot run ${cmd}: ${res.error.message}`)
  if (res.status !== 0) throw new BuildError(`${cmd} ${args.join(' ')} failed with exit code ${res.status ?? res.signal}`)
  return res
}

function hostTriple() {
  const out = spawnOrThrow('rustc', ['-vV'], { stdio: ['ignore', 'pipe', 'inherit'] }).stdout.toString()
  const host = /^host: (\S+)$/m.exec(out)
  if (!host) throw new BuildError('rustc -vV printed no host triple')
  return host[1]
}

/** Copies then renames, so a failed or interrupted build never leaves a half-written file. */
function install(src, dest, mode) {
  const tmp = `${dest}.tmp-${process.pid}`
  fs.copyFileSync(src, tmp)
  fs.chmodSync(tmp, mode)
  fs.renameSync(tmp, dest)
  const now = new Date()
  fs.utimesSync(dest, now, now)
}

/** The crate's bin target names and declared cargo features, from `cargo metadata` (no build, no network). */
function crateInfo() {
  const out = spawnOrThrow('cargo', ['metadata', '--no-deps', '--offline', '--format-version', '1', '--manifest-path', manifest], {
    stdio: ['ignore', 'pipe', 'inherit'],
  }).stdout.toString()
  const pkg = JSON.parse(out).packages.find((p) => path.resolve(p.manifest_path) === manifest)
  return { bins: pkg.targets.filter((t) => t.kind.includes('bin')).map((t) => t.name), features: Object.keys(pkg.features) }
}

function binTargets() {
  return crateInfo().bins
}

/**
 * Which cargo features the binaries beside native.js were built with. A development build has
 * test hooks that a release must not ship, and both write the same files, so scripts/install.js
 * reads this to tell a hook-less prepack build from a development one. Never packed.
 */
const stampFile = path.join(root, '.finn-sandbox-build.json')

function builtFeatures() {
  try {
    return JSON.parse(fs.readFileSync(stampFile, 'utf8')).features
  } catch {
    return null
  }
}

/**
 * Builds the addon and every bin target with `features` (none for a release); returns the paths
 * written. Throws BuildError with the reason (cargo missing, build failed) and leaves any earlier
 * binaries in place.
 */
function build({ features = [] } = {}) {
  const triple = hostTriple()
  const suffix = platformSuffix()
  const cargoJson = ['--message-format=json-render-diagnostics', ...(features.length ? ['--features', features.join(',')] : [])]
  const env = { ...process.env }
  const napiCli = path.join(root, 'node_modules', '@napi-rs', 'cli', 'dist', 'cli.js')
  const dev = fs.existsSync(napiCli) && fs.existsSync(path.join(root, '.git'))
  let args
  let cmd
  if (dev) {
    cmd = process.execPath
    args = [napiCli, 'build', '--platform', '--release', '--target', triple, '--js', 'native.js', '--dts', 'native.d.ts', '--', ...cargoJson]
  } else {
    cmd = 'cargo'
    args = ['build', '--release', '--target', triple, '--manifest-path', manifest, ...cargoJson]
    // Rust's musl targets link statically by default, which cannot make a shared library
    // (napi build sets the same flag).
    if (triple.includes('musl') && !/crt-static/.test(env.RUSTFLAGS || '')) {
      env.RUSTFLAGS = `${env.RUSTFLAGS || ''} -C target-feature=-crt-static`.trim()
    }
  }
  const res = spawnOrThrow(cmd, args, { env, stdio: ['ignore', 'pipe', 'inherit'] })
  const artifacts = res.stdout
    .toString()
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line))
    .filter((msg) => msg.reason === 'compiler-artifact' && path.resolve(msg.manifest_path) === manifest)

  const written = []
  const cdylib = artifacts
    .filter((msg) => msg.target.kind.includes('cdylib'))
    .flatMap((msg) => msg.filenames)
    .find((f) => /\.(so|dylib|dll)$/.test(f))
  if (!cdylib) throw new BuildError('cargo built no cdylib')
  if (!dev) install(cdylib, addonPath(suffix), 0o755)
  else fs.utimesSync(addonPath(suffix), new Date(), new Date())
  written.push(addonPath(suffix))
  for (const msg of artifacts) {
    if (!msg.target.kind.includes('bin') || !msg.executable) continue
    install(msg.executable, helperPath(msg.target.name, suffix), 0o755)
    written.push(helperPath(msg.target.name, suffix))
  }
  fs.writeFileSync(stampFile, `${JSON.stringify({ features })}\n`)
  return written
}

/**
 * A binary that ships prebuilt must load on the oldest glibc we promise (bookworm's, the one of
 * node:22-slim); one built on a newer system may not, so `npm pack` refuses it.
 */
function checkGlibcBaseline(files) {
  if (!PREBUILT_PLATFORMS.includes(platformSuffix()) || !platformSuffix().endsWith('-gnu')) return
  for (const file of files) {
    const needed = newestGlibcNeeded(file)
    if (needed !== null && compareVersions(needed, GLIBC_BASELINE) > 0) {
      throw new BuildError(
        `${path.basename(file)} needs GLIBC_${needed}, newer than the promised baseline ${GLIBC_BASELINE} (Debian bookworm); build the release on bookworm`,
      )
    }
  }
}

module.exports = { build, binTargets, builtFeatures, crateInfo, checkGlibcBaseline, BuildError }

// As prepack: a release build (no test features), then refuse binaries that would not load on the baseline glibc.
if (require.main === module) {
  try {
    const files = build()
    checkGlibcBaseline(files)
    for (const file of files) console.error(`finn-sandbox: built ${path.relative(root, file)}`)
  } catch (err) {
    if (!(err instanceof BuildError)) throw err
    console.error(`finn-sandbox: ${err.message}`)
    process.exit(1)
  }
}
