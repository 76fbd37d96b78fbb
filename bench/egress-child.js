'use strict'
// 100 MiB through the egress proxy against the same download without it. A server on
// 127.0.0.1 sends 100 MiB; `curl -o /dev/null` fetches it from inside an isolated job, once
// through the job's only route (a network allowlist naming the server as `bulk.test`, with
// `allowLocal` and `hosts`) and once with `network: "allow"` straight to 127.0.0.1, rounds
// interleaved. Started by bench/isolation.js as
//   node bench/egress-child.js --rounds N --mib M
// Prints one BENCH_RESULT line: { proxyMiBps, directMiBps, ... } (the medians of each kind).

const http = require('node:http')
const path = require('node:path')

const { emit, fail, parseArgs } = require('./lib/child-util.js')
const { CWD, spec } = require('./lib/contenders.js')

async function main() {
  const { flags } = parseArgs(process.argv.slice(2))
  const rounds = Math.min(Number(flags.rounds || 5), 100)
  const mib = Math.min(Number(flags.mib || 100), 4096)
  const chunk = Buffer.alloc(1024 * 1024, 0x61)
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-length': String(mib * chunk.length) })
    let left = mib
    const more = () => {
      while (left > 0) {
        left--
        if (!res.write(chunk)) return res.once('drain', more)
      }
      res.end()
    }
    more()
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = server.address().port
  const { WorkerPool } = require(path.join(__dirname, '..', 'index.js'))
  const pool = new WorkerPool({ interactiveWorkers: 2 })
  const curl = (url) => ['-sS', '-o', '/dev/null', '-w', '%{size_download} %{time_total}', url]
  const kinds = {
    proxy: spec('curl', curl(`http://bulk.test:${port}/`), {
      timeoutMs: 120_000,
      isolation: {
        mode: 'auto',
        network: { allow: [`bulk.test:${port}`], allowPlainHttp: true, allowLocal: true, hosts: { 'bulk.test': '127.0.0.1' } },
      },
    }),
    direct: spec('curl', curl(`http://127.0.0.1:${port}/`), { timeoutMs: 120_000, isolation: { mode: 'auto', network: 'allow' } }),
  }
  const rates = { proxy: [], direct: [] }
  let applied = []
  const errors = []
  for (let r = 0; r < rounds; r++) {
    for (const kind of r % 2 ? ['direct', 'proxy'] : ['proxy', 'direct']) {
      const res = await pool.exec(kinds[kind], 'interactive', CWD)
      const [bytes, seconds] = res.stdout.trim().split(' ').map(Number)
      if (res.exitCode !== 0 || bytes !== mib * chunk.length) {
        errors.push(`${kind}: exit ${res.exitCode}, ${bytes} bytes: ${res.stderr.slice(0, 200)}`)
        continue
      }
      rates[kind].push(mib / seconds)
      if (kind === 'proxy') applied = res.isolation ? res.isolation.applied : []
    }
  }
  await pool.shutdown()
  server.close()
  const median = (xs) => {
    const s = [...xs].sort((a, b) => a - b)
    return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN
  }
  emit({ mib, rounds, proxyMiBps: median(rates.proxy), directMiBps: median(rates.direct), rates, applied, errors })
}

if (require.main === module) main().catch(fail)
