'use strict'
// Median of N sequential `/bin/true` through one contender, in this process: the quick check
// behind README's latency notes (`npm run bench` is the measurement of record).
//   node bench/seq.js [contender=addon-2] [n=1000]
const { open, spec } = require('./lib/contenders.js')

;(async () => {
  const c = await open(process.argv[2] || 'addon-2')
  const s = spec('/bin/true', [])
  const n = Number(process.argv[3] || 1000)
  for (let i = 0; i < 50; i++) await c.run(s)
  await new Promise((r) => setTimeout(r, 20))
  const xs = []
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint()
    await c.run(s)
    xs.push(Number(process.hrtime.bigint() - t) / 1e6)
  }
  xs.sort((a, b) => a - b)
  console.log(`${c.id}: median ${xs[n >> 1].toFixed(3)} ms, p10 ${xs[Math.floor(n / 10)].toFixed(3)} ms over ${n}`)
  await c.close()
})()
