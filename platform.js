'use strict'
// Where this package's native files live, named the way napi's generated loader (native.js)
// names them: `finn-sandbox.<suffix>.node` for the addon and `<bin>.<suffix>` for every cargo
// [[bin]] of the crate, all beside this file. Shared by index.js (the load-time error),
// scripts/install.js (prebuilt or build from source) and scripts/build.js (what a build writes).

const path = require('node:path')

/** Platforms whose binaries ship inside the npm package (built and tested on Debian bookworm). */
const PREBUILT_PLATFORMS = Object.freeze(['linux-x64-gnu'])

/** glibc of Debian bookworm (node:22-slim); a prebuilt binary may need no newer symbol version. */
const GLIBC_BASELINE = '2.36'

let musl

/**
 * Whether this process runs on musl: the C library the process has mapped (/proc/self/maps names
 * ld-musl or libc.musl, or glibc's libc.so.6). Node's report (`process.report.getReport()`, its
 * `glibcVersionRuntime`) says the same but walks the native stack and collects the whole report:
 * done at the first `new WorkerPool` that cost 1.0 MiB of RSS for as long as Node lives (the
 * unwind tables of Node's binary paged in, the report's buffers); it stays the fallback.
 */
function isMusl() {
  if (musl !== undefined) return musl
  try {
    const maps = require('node:fs').readFileSync('/proc/self/maps', 'latin1')
    if (/\/(ld-musl-[^/\s]*|libc\.musl-[^/\s]*)$/m.test(maps)) return (musl = true)
    if (/\/libc\.so\.6$/m.test(maps)) return (musl = false)
  } catch {
    // no /proc: ask the report
  }
  const report = process.report && process.report.getReport()
  return (musl = !(report && report.header && report.header.glibcVersionRuntime))
}

/** napi's platform suffix for the running process, e.g. `linux-x64-gnu`, `linux-arm64-musl`. */
function platformSuffix() {
  const { platform, arch } = process
  if (platform !== 'linux') return `${platform}-${arch}`
  if (arch === 'arm') return `linux-arm-${isMusl() ? 'musleabihf' : 'gnueabihf'}`
  return `linux-${arch}-${isMusl() ? 'musl' : 'gnu'}`
}

/** The addon file napi's loader requires for `suffix`. */
function addonPath(suffix = platformSuffix()) {
  return path.join(__dirname, `finn-sandbox.${suffix}.node`)
}

/** Where the helper binary built from cargo `[[bin]] name = "<name>"` ships. */
function helperPath(name, suffix = platformSuffix()) {
  return path.join(__dirname, `${name}.${suffix}`)
}

/** How to get a working binary on a platform with none, for error messages. */
function fixAdvice(suffix) {
  if (!suffix.startsWith('linux-')) return `finn-sandbox runs on Linux only (this is ${suffix}).`
  const prebuilt = PREBUILT_PLATFORMS.includes(suffix)
    ? `The package ships finn-sandbox.${suffix}.node (glibc ${GLIBC_BASELINE} or newer): reinstall it, or build from source: `
    : `Prebuilt binaries ship for ${PREBUILT_PLATFORMS.join(', ')} only; on ${suffix} build from source: `
  return (
    prebuilt +
    'install Rust (cargo, https://rustup.rs) and run ' +
    '`FINN_SANDBOX_BUILD_FROM_SOURCE=1 npm rebuild finn-sandbox` ' +
    '(pnpm: list "finn-sandbox" in pnpm.onlyBuiltDependencies, then `pnpm rebuild finn-sandbox`).'
  )
}

module.exports = { PREBUILT_PLATFORMS, GLIBC_BASELINE, platformSuffix, addonPath, helperPath, fixAdvice }
