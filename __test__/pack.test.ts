import { execFile } from 'node:child_process'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { expect, test } from 'vitest'

const run = promisify(execFile)
const root = join(import.meta.dirname, '..')

// `npm pack` must give a tarball that installs into an empty project and builds the addon from
// source there (no prebuilt binary ships in it). The build shares this checkout's cargo target
// directory so only this crate recompiles.
test('the npm pack tarball installs and builds from source in an empty project', { timeout: 900_000 }, async () => {
  const out = mkdtempSync(join(tmpdir(), 'finn-pack-'))
  const { stdout } = await run('npm', ['pack', '--pack-destination', out, '--json'], { cwd: root })
  const [{ filename, files }] = JSON.parse(stdout) as [{ filename: string; files: { path: string }[] }]
  const paths = files.map((f) => f.path)
  expect(paths).toEqual(expect.arrayContaining(['index.js', 'index.d.ts', 'native.js', 'native.d.ts', 'Cargo.toml', 'Cargo.lock', 'scripts/install.js']))
  expect(paths.some((p) => p.endsWith('.node'))).toBe(false)

  const project = join(out, 'consumer')
  await run('mkdir', ['-p', project])
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'consumer', version: '1.0.0', private: true }))
  await run('npm', ['install', '--no-audit', '--no-fund', join(out, filename)], {
    cwd: project,
    env: { ...process.env, CARGO_TARGET_DIR: join(root, 'target') },
    maxBuffer: 64 * 1024 * 1024,
  })
  const check = `const { WorkerPool } = require('finn-sandbox');
    new WorkerPool().exec({ binaryPath: '/bin/echo', args: ['packed'], cwd: '/', env: {} }).then((r) => console.log(r.stdout.trim()))`
  const result = await run(process.execPath, ['-e', check], { cwd: project })
  expect(result.stdout).toBe('packed\n')
})
