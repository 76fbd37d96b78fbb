'use strict'
// Summary statistics for the benchmark tables.

/** Linear-interpolated percentile (p in 0..100) of an ascending array. */
function percentile(sorted, p) {
  if (sorted.length === 0) return NaN
  if (sorted.length === 1) return sorted[0]
  const rank = (p / 100) * (sorted.length - 1)
  const lo = Math.floor(rank)
  const hi = Math.ceil(rank)
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo)
}

/** { n, median, mean, stdev, min, p10, p90, p99, max } of finite samples. */
function summarize(samples) {
  const xs = samples.filter((x) => Number.isFinite(x)).sort((a, b) => a - b)
  const n = xs.length
  if (n === 0) return { n: 0, median: NaN, mean: NaN, stdev: NaN, min: NaN, p10: NaN, p90: NaN, p99: NaN, max: NaN }
  const mean = xs.reduce((a, b) => a + b, 0) / n
  const variance = n > 1 ? xs.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1) : 0
  return {
    n,
    median: percentile(xs, 50),
    mean,
    stdev: Math.sqrt(variance),
    min: xs[0],
    p10: percentile(xs, 10),
    p90: percentile(xs, 90),
    p99: percentile(xs, 99),
    max: xs[n - 1],
  }
}

module.exports = { percentile, summarize }
