'use strict'
// The structured tools' phase of `npm run bench` (also `node bench/tools.js [--quick]` alone):
// grep and find over a 10,000-file tree through executeTool against running rg and fd directly
// (the same argv, through child_process.execFile), and read of a 1 MiB file. executeTool runs
// as a caller without a runner gets it: the module's shared pool, isolation `auto` (and, for
// information, with isolation off). Rounds
// alternate the contenders so a slow moment of the machine falls on both.

const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')
const { execFile, spawnSync } = require('node:child_process')
const { summarize } = require('./lib/stats.js')

const FILES = 10_000
const PER_DIR = 100
const BAR_RATIO = 1.2
const BAR_READ_MS = 5

function which(name) {
  const r = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' })
  return r.status === 0 ? fs.realpathSync(r.stdout.trim()) : null
}

/** 10,000 small files in 100 directories, one in ten holding the needle; and a 1 MiB file. */
function makeTree() {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'finn-bench-tools-')))
  for (let d = 0; d < FILES / PER_DIR; d++) {
    const dir = path.join(root, `dir${d}`)
    fs.mkdirSync(dir)
    for (let f = 0; f < PER_DIR; f++) {
      const n = d * PER_DIR + f
      const body = `line one of file ${n}\nsome text ${n % 10 === 0 ? 'needle' : 'hay'} here\nlast line\n`
      fs.writeFileSync(path.join(dir, `file${f}.txt`), body)
    }
  }
  const line = `${'x'.repeat(62)}\n`
  fs.writeFileSync(path.join(root, 'big.txt'), line.repeat((1024 * 1024) / line.length))
  return root
}

function direct(binary, args, cwd) {
  return new Promise((resolve, reject) => {
    execFile(binary, args, { cwd, maxBuffer: 1 << 26, env: { PATH: '/usr/bin:/bin', LC_ALL: 'C.UTF-8' } }, (err, stdout) => {
      if (err && err.code !== 1) reject(err)
      else resolve(stdout)
    })
  })
}

async function time(fn) {
  const t0 = process.hrtime.bigint()
  await fn()
  return Number(process.hrtime.bigint() - t0) / 1e6
}

async function phase({ log, quick }) {
  const { executeTool } = require('..')
  const rg = which('rg')
  const fd = which('fdfind') || which('fd')
  if (!rg || !fd) {
    log('\n[tools] rg or fd missing: phase skipped')
    return { error: 'rg or fd (fdfind) not on PATH' }
  }
  const rounds = quick ? 10 : 40
  log(`\n[tools] grep and find over ${FILES} files, read of 1 MiB: ${rounds} rounds`)
  const root = makeTree()
  try {
    const grepArgs = { pattern: 'needle', maxResults: 100_000 }
    const findArgs = { pattern: '*7.txt', maxResults: 100_000 }
    const rgArgv = ['--no-config', '--no-ignore', '--color=never', '--no-heading', '--with-filename', '--line-number', '--null', '--no-messages', '-e', 'needle', '--', '.']
    const fdArgv = ['--glob', '--no-ignore', '--case-sensitive', '--color=never', '--print0', '--', '*7.txt']
    const opts = { maxOutputBytes: 1 << 24 }
    // Warm-up: the shared pool, the page cache, the isolation probe.
    const g = await executeTool('grep', grepArgs, root, opts)
    const f = await executeTool('find', findArgs, root, opts)
    if (!g.ok || g.output.split('\n').length !== FILES / 10 || !f.ok || f.output.split('\n').length !== FILES / 10) {
      throw new Error(`unexpected tool output: grep ${g.output.split('\n').length} lines, find ${f.output.split('\n').length}`)
    }
    await direct(rg, rgArgv, root)
    await direct(fd, fdArgv, root)
    await executeTool('read', { path: 'big.txt' }, root)
    const off = { ...opts, isolation: { mode: 'off' } }
    const s = { toolGrep: [], toolGrepOff: [], rg: [], toolFind: [], toolFindOff: [], fd: [], read: [] }
    for (let r = 0; r < rounds; r++) {
      const order = r % 2 === 0
      const pairs = [
        ['toolGrep', () => executeTool('grep', grepArgs, root, opts)],
        ['toolGrepOff', () => executeTool('grep', grepArgs, root, off)],
        ['rg', () => direct(rg, rgArgv, root)],
        ['toolFind', () => executeTool('find', findArgs, root, opts)],
        ['toolFindOff', () => executeTool('find', findArgs, root, off)],
        ['fd', () => direct(fd, fdArgv, root)],
        ['read', () => executeTool('read', { path: 'big.txt' }, root)],
      ]
      for (const [id, fn] of order ? pairs : pairs.reverse()) s[id].push(await time(fn))
    }
    const out = { files: FILES, rounds, cpuModel: (os.cpus()[0] || {}).model, loadAvg: os.loadavg() }
    for (const [id, xs] of Object.entries(s)) out[id] = summarize(xs)
    out.grepRatio = out.toolGrep.median / out.rg.median
    out.findRatio = out.toolFind.median / out.fd.median
    const ms = (x) => `${x.median.toFixed(2)} ms`
    log(`  grep: executeTool ${ms(out.toolGrep)} (isolation off ${ms(out.toolGrepOff)}), rg ${ms(out.rg)} (x${out.grepRatio.toFixed(2)})`)
    log(`  find: executeTool ${ms(out.toolFind)} (isolation off ${ms(out.toolFindOff)}), fd ${ms(out.fd)} (x${out.findRatio.toFixed(2)})`)
    log(`  read 1 MiB: ${out.read.median.toFixed(2)} ms median, p90 ${out.read.p90.toFixed(2)} ms`)
    return out
  } finally {
    fs.rmSync(root, { recursive: true, force: true })
  }
}

/** The phase's rows of the targets table. */
function targets(t, add) {
  if (t.error) return
  add(`Tools: grep over ${t.files} files via executeTool vs rg directly (median)`, t.grepRatio, '<=', BAR_RATIO, `${t.toolGrep.median.toFixed(2)} ms vs ${t.rg.median.toFixed(2)} ms`, `on ${t.cpuModel}`, 'x')
  add(`Tools: find over ${t.files} files via executeTool vs fd directly (median)`, t.findRatio, '<=', BAR_RATIO, `${t.toolFind.median.toFixed(2)} ms vs ${t.fd.median.toFixed(2)} ms`, `on ${t.cpuModel}`, 'x')
  add('Tools: read of a 1 MiB file via executeTool (median)', t.read.median, '<=', BAR_READ_MS, `${t.read.median.toFixed(2)} ms, p90 ${t.read.p90.toFixed(2)} ms`, `on ${t.cpuModel}`, 'ms')
}

module.exports = { phase, targets }

if (require.main === module) {
  phase({ log: console.log, quick: process.argv.includes('--quick') }).then(
    (r) => {
      console.log(JSON.stringify(r, null, 1))
      process.exit(r.error ? 1 : 0)
    },
    (err) => {
      console.error(err)
      process.exit(1)
    },
  )
}
