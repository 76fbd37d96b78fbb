'use strict'
// The newest glibc symbol version an ELF file needs. A binary linked on a newer glibc can require
// symbols (GLIBC_2.38, ...) that an older system lacks, and then fails to load there with
// "version `GLIBC_2.38' not found". The version names sit in the file's dynamic string table,
// which `strip` keeps, so a scan of the bytes finds the same set as `objdump -T`
// (__test__/pack.test.ts checks that they agree).

const fs = require('node:fs')

/** Compares dotted versions numerically: "2.9" < "2.36". */
function compareVersions(a, b) {
  const x = a.split('.').map(Number)
  const y = b.split('.').map(Number)
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0)
    if (d !== 0) return d
  }
  return 0
}

/** The highest `GLIBC_x.y[.z]` version named in `file`, or null for none (a musl or static binary). */
function newestGlibcNeeded(file) {
  const text = fs.readFileSync(file).toString('latin1')
  let newest = null
  for (const [, version] of text.matchAll(/GLIBC_(\d+\.\d+(?:\.\d+)?)/g)) {
    if (newest === null || compareVersions(version, newest) > 0) newest = version
  }
  // Packed relative relocations (DT_RELR, see build.rs) need a loader that knows them: glibc 2.36.
  if (text.includes('GLIBC_ABI_DT_RELR') && (newest === null || compareVersions('2.36', newest) > 0)) newest = '2.36'
  return newest
}

module.exports = { compareVersions, newestGlibcNeeded }
