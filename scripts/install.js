'use strict'
// The package's `install` script. It decides between the prebuilt binary and a build from source:
// - a consumer install on a platform with a prebuilt binary that loads: nothing to do (pnpm 10
//   skips this script by default anyway; the package must work without it);
// - FINN_SANDBOX_BUILD_FROM_SOURCE=1, another platform or libc, or a prebuilt binary that does
//   not load here (an older glibc): build from source with cargo, or fail saying what is missing;
// - a development checkout (a .git beside package.json): rebuild when a binary is missing, older
//   than a Rust source, or built with other cargo features than the development ones (a prepack
//   builds without the test hooks); this is the `npm install` and `npm test` step.
// A failed build leaves no half-written binary (scripts/build.js writes by rename) and exits
// non-zero, so npm and pnpm fail the install instead of leaving a package that fails at import.

const fs = require('node:fs')
const path = require('node:path')
const { PREBUILT_PLATFORMS, GLIBC_BASELINE, platformSuffix, addonPath, helperPath } = require('../platform.js')

const root = path.resolve(__dirname, '..')
const suffix = platformSuffix()
const addon = addonPath(suffix)
const fromSource = process.env.FINN_SANDBOX_BUILD_FROM_SOURCE === '1' || process.argv.includes('--force')
const devCheckout = fs.existsSync(path.join(root, '.git'))
/** In a checkout, from cargo metadata: the crate's bin targets, and the features to build with. */
let bins = null
let features = []

function newestSourceMtime() {
  let newest = 0
  const visit = (p) => {
    const st = fs.statSync(p)
    if (st.isDirectory()) for (const name of fs.readdirSync(p)) visit(path.join(p, name))
    else newest = Math.max(newest, st.mtimeMs)
  }
  for (const p of ['src', 'crates', 'Cargo.toml', 'Cargo.lock', 'build.rs']) {
    if (fs.existsSync(path.join(root, p))) visit(path.join(root, p))
  }
  return newest
}

/** Features a development build has: the test hooks vitest uses, once the crate declares them. */
const DEV_FEATURES = ['test-hooks']

/**
 * In a checkout: the addon and every bin target exist, are newer than every Rust source, and were
 * built with the development features (a prepack in the same checkout builds without them).
 */
function devBuildIsFresh(wanted) {
  const { builtFeatures } = require('./build.js')
  if (JSON.stringify(builtFeatures()) !== JSON.stringify(wanted)) return false
  const newest = newestSourceMtime()
  return [addon, ...bins.map((name) => helperPath(name, suffix))].every((f) => fs.existsSync(f) && fs.statSync(f).mtimeMs >= newest)
}

/** Why the binary beside native.js cannot be used here, or null when it loads. */
function addonProblem() {
  if (!fs.existsSync(addon)) return `${path.basename(addon)} is not in the package`
  try {
    require(addon)
    return null
  } catch (err) {
    return String(err.message).split('\n')[0]
  }
}

function main() {
  if (process.platform !== 'linux') {
    fail(`finn-sandbox runs on Linux only (this is ${suffix}).`)
  }
  if (devCheckout) {
    try {
      const info = require('./build.js').crateInfo()
      bins = info.bins
      features = DEV_FEATURES.filter((f) => info.features.includes(f))
    } catch {
      // no cargo: the build below says so
    }
  }
  let reason
  if (fromSource) {
    reason = process.env.FINN_SANDBOX_BUILD_FROM_SOURCE === '1' ? 'FINN_SANDBOX_BUILD_FROM_SOURCE=1' : '--force'
  } else if (devCheckout) {
    if (bins !== null && devBuildIsFresh(features)) return
    reason = 'development checkout: a binary is missing, older than the Rust sources or built with other features'
  } else {
    const problem = addonProblem()
    if (problem === null) return
    reason = problem
  }
  console.error(`finn-sandbox: building from source for ${suffix} (${reason})`)
  const { build, BuildError } = require('./build.js')
  try {
    build({ features })
    // A consumer's build leaves hundreds of MB of cargo output inside node_modules, which an
    // image like loa-finn's would copy into its runtime stage; the binaries are already out.
    if (!devCheckout && !process.env.CARGO_TARGET_DIR) fs.rmSync(path.join(root, 'target'), { recursive: true, force: true })
  } catch (err) {
    if (!(err instanceof BuildError)) throw err
    const cargoMissing = /cannot run (cargo|rustc)/.test(err.message)
    fail(
      `finn-sandbox: cannot build from source for ${suffix} (${reason}): ${err.message}.` +
        (cargoMissing ? ' Building from source needs Rust: cargo and rustc on PATH (https://rustup.rs).' : '') +
        ` Prebuilt binaries ship for ${PREBUILT_PLATFORMS.join(', ')} only (glibc ${GLIBC_BASELINE} or newer)` +
        (fromSource && PREBUILT_PLATFORMS.includes(suffix) ? '; unset FINN_SANDBOX_BUILD_FROM_SOURCE to use it.' : '.'),
    )
  }
}

function fail(message) {
  console.error(message)
  process.exit(1)
}

main()
