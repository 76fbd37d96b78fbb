'use strict'
// Sequential latency of `/bin/true` for one contender, with this Node process holding
// <GiB> of live, touched memory first. Started by run.js as
//   node --max-old-space-size=4096 bench/heap-child.js <contender> <GiB> --iterations N --warmup W
// The memory is 16384 Buffers of 64 KiB per GiB, every byte written, kept reachable until
// the end, so RSS really holds it (its page tables are what a fork() has to copy). It is
// allocated on the main thread before the contender is opened (for the worker_threads pool
// the big heap is in the main thread; its workers fork the same address space).
// Prints one BENCH_RESULT line: { samplesMs, rssKiB, failures, ... }.

const { emit, fail, memKiB, parseArgs, sleep } = require('./lib/child-util.js')
const { open, spec } = require('./lib/contenders.js')

const CHUNK = 64 * 1024

async function main() {
  const { positional, flags } = parseArgs(process.argv.slice(2))
  const [contender, gibArg] = positional
  const gib = Number(gibArg || 0)
  const iterations = Math.min(Number(flags.iterations || 100), 100_000)
  const warmup = Math.min(Number(flags.warmup || 20), 10_000)
  if (!contender || !(gib >= 0 && gib <= 64)) throw new Error('usage: heap-child.js <contender> <GiB> [--iterations N] [--warmup W]')

  const rssStart = memKiB().rss
  const hold = []
  const chunks = Math.round((gib * 1024 * 1024 * 1024) / CHUNK)
  const allocStarted = performance.now()
  for (let i = 0; i < chunks; i++) hold.push(Buffer.allocUnsafeSlow(CHUNK).fill((i % 251) + 1))
  const allocMs = performance.now() - allocStarted
  const rssHeld = memKiB().rss

  const c = await open(contender)
  const s = spec('/bin/true', [])
  let failures = 0
  const check = (r) => {
    if (r.status !== 'ok' || r.exitCode !== 0) failures++
  }
  for (let i = 0; i < warmup; i++) check(await c.run(s))
  await sleep(20)

  const samplesMs = new Array(iterations)
  for (let i = 0; i < iterations; i++) {
    const t0 = process.hrtime.bigint()
    const r = await c.run(s)
    samplesMs[i] = Number(process.hrtime.bigint() - t0) / 1e6
    check(r)
  }
  const rssEnd = memKiB().rss
  await c.close()
  // Keep the held memory reachable until after the measurement.
  const checksum = hold.length ? hold[hold.length - 1][0] : 0
  emit({ contender, gib, iterations, warmup, samplesMs, failures, rssStartKiB: rssStart, rssHeldKiB: rssHeld, rssEndKiB: rssEnd, allocMs, checksum })
}

main().catch(fail)
