import { execFile, execFileSync } from 'node:child_process'
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { tmpdir } from 'node:os'
import { basename, delimiter, dirname, join } from 'node:path'
import { promisify } from 'node:util'
import { beforeAll, describe, expect, test } from 'vitest'

// The package as loa-finn gets it: `npm pack` of a clean checkout, then `pnpm add <tarball>` in an
// empty "type": "module" project under Node 22 with no cargo on PATH (its deploy/Dockerfile:
// node:22-slim, pnpm@10.28.0, `pnpm install --frozen-lockfile`, runs as a system user).

const run = promisify(execFile)
const root = join(import.meta.dirname, '..')
const require = createRequire(import.meta.url)
const { ensureTools } = require('../scripts/test-tools.js') as { ensureTools: () => { node22: string; node24: string; pnpm: string } }
const { newestGlibcNeeded, compareVersions } = require('../scripts/glibc.js') as {
  newestGlibcNeeded: (file: string) => string | null
  compareVersions: (a: string, b: string) => number
}
const { PREBUILT_PLATFORMS, GLIBC_BASELINE } = require('../platform.js') as { PREBUILT_PLATFORMS: string[]; GLIBC_BASELINE: string }
const { binTargets } = require('../scripts/build.js') as { binTargets: () => string[] }

const SUFFIX = 'linux-x64-gnu'
const NOBODY = 65534
const fixtures = join(import.meta.dirname, 'fixtures')
const isGitCheckout = existsSync(join(root, '.git'))

let out: string
let tarball: string
let packed: { path: string; mode: number }[]
let tools: { node22: string; node24: string; pnpm: string }
let bins: string[]
/** PATH of the consumer: Node 22 and the system's /usr/bin:/bin, where there is no cargo. */
let noCargoPath: string
/** The project where `pnpm add` ran with pnpm's defaults (build scripts ignored). */
let project: string

/** pnpm under Node 22 with an environment of its own, as in a Docker build (no npm_config_*). */
function pnpm(cwd: string, args: string[]) {
  const env = { PATH: noCargoPath, HOME: join(out, 'home') }
  return run(tools.node22, [tools.pnpm, ...args, '--store-dir', join(out, 'store')], { cwd, env, maxBuffer: 16 * 1024 * 1024 })
}

function emptyProject(name: string, extra: object = {}) {
  const dir = join(out, name)
  mkdirSync(dir, { mode: 0o755 })
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ name, version: '1.0.0', private: true, type: 'module', ...extra }))
  copyFileSync(join(fixtures, 'consumer.mjs'), join(dir, 'consumer.mjs'))
  copyFileSync(join(fixtures, 'consumer.cjs'), join(dir, 'consumer.cjs'))
  return dir
}

/** Runs the ESM consumer with `node` in `project`, optionally as another user, and parses its JSON. */
async function consume(node: string, dir: string, dataDir: string, uid?: number) {
  const argv = [node, join(dir, 'consumer.mjs'), dataDir, JSON.stringify(bins)]
  const [cmd, ...args] = uid === undefined ? argv : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', ...argv]
  const { stdout } = await run(cmd, args, { cwd: dir, env: { PATH: noCargoPath } })
  return JSON.parse(stdout)
}

describe.runIf(isGitCheckout)('the packed tarball, installed as loa-finn installs it', () => {
  beforeAll(async () => {
    tools = ensureTools()
    bins = binTargets()
    out = mkdtempSync(join(tmpdir(), 'finn-pack-'))
    chmodSync(out, 0o755) // the non-root user must reach the projects below
    noCargoPath = [dirname(tools.node22), '/usr/bin', '/bin'].join(delimiter)

    // A clean checkout: the files git tracks (or would), as they are in the work tree, with no
    // binaries, no node_modules and no target/. Its prepack has only cargo to build with; it
    // shares this checkout's target directory so that only this crate recompiles.
    const checkout = join(out, 'checkout')
    const listed = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' })
    for (const file of listed.split('\0').filter((f) => f && existsSync(join(root, f)) && statSync(join(root, f)).isFile())) {
      mkdirSync(dirname(join(checkout, file)), { recursive: true })
      copyFileSync(join(root, file), join(checkout, file))
    }
    expect(existsSync(join(checkout, `finn-sandbox.${SUFFIX}.node`))).toBe(false)
    const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', out], {
      cwd: checkout,
      env: { ...process.env, CARGO_TARGET_DIR: join(root, 'target') },
      maxBuffer: 64 * 1024 * 1024,
    })
    const [info] = JSON.parse(stdout.slice(stdout.indexOf('['))) as [{ filename: string; files: { path: string; mode: number }[] }]
    tarball = join(out, info.filename)
    packed = info.files

    // As the README's migration guide says: the tarball in the project, a `file:` dependency.
    project = emptyProject('consumer')
    copyFileSync(tarball, join(project, info.filename))
    const added = await pnpm(project, ['add', `./${info.filename}`])
    const manifest = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'))
    expect(manifest.dependencies).toEqual({ 'finn-sandbox': `file:${info.filename}` })
    // pnpm 10's default: the install script did not run (so nothing may depend on it).
    expect(added.stdout).toMatch(/Ignored build scripts: finn-sandbox/)
  }, 600_000)

  test('npm pack of a clean checkout ships the release binaries and no build junk', () => {
    const paths = packed.map((f) => f.path).sort()
    const tracked = (dir: string) =>
      execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', dir], { cwd: root, encoding: 'utf8' })
        .split('\n')
        .filter((f) => f && existsSync(join(root, f)))
    const sources = [...tracked('src'), ...tracked('crates')]
    const expected = [
      'package.json',
      'README.md',
      'CHANGELOG.md',
      // every page the README links to, so its links resolve inside the installed package
      'RELIABILITY.md',
      'BENCHMARKS.md',
      'SECURITY.md',
      'CONTRIBUTING.md',
      ...tracked('docs'),
      'index.js',
      'index.d.ts',
      'native.js',
      'native.d.ts',
      'platform.js',
      'scripts/install.js',
      'scripts/build.js',
      'scripts/glibc.js',
      // what the source fallback builds from
      'Cargo.toml',
      'Cargo.lock',
      'build.rs',
      'rustfmt.toml',
      ...sources,
      // the prebuilt binaries: the addon and every cargo [[bin]] of the crate
      `finn-sandbox.${SUFFIX}.node`,
      ...bins.map((name) => `${name}.${SUFFIX}`),
    ].sort()
    expect(paths).toEqual(expected)
    for (const f of packed.filter((f) => f.path.startsWith('finn-') || bins.some((b) => f.path === `${b}.${SUFFIX}`))) {
      expect(f.mode & 0o111, `${f.path} is executable in the tarball`).not.toBe(0)
    }
    expect(PREBUILT_PLATFORMS).toEqual([SUFFIX])
  })

  test('the shipped addon is a release build, without the test hooks of a development build', () => {
    const addon = readFileSync(join(project, 'node_modules', 'finn-sandbox', `finn-sandbox.${SUFFIX}.node`))
    // The message of the job that panics on purpose (crates/finn-pool/src/test_hooks.rs) exists only
    // in a build with the `test-hooks` feature, which `npm test`'s own addon has.
    const hook = Buffer.from('test hook: job ')
    expect(readFileSync(join(root, `finn-sandbox.${SUFFIX}.node`)).includes(hook)).toBe(true)
    expect(addon.includes(hook)).toBe(false)
  })

  test(`the shipped binaries need no glibc newer than bookworm's ${GLIBC_BASELINE}`, () => {
    const installed = join(project, 'node_modules', 'finn-sandbox')
    for (const file of [`finn-sandbox.${SUFFIX}.node`, ...bins.map((b) => `${b}.${SUFFIX}`)]) {
      const symbols = execFileSync('objdump', ['-T', join(installed, file)], { encoding: 'utf8' })
      const versions = [...symbols.matchAll(/\(?GLIBC_(\d+\.\d+(?:\.\d+)?)\)?/g)].map((m) => m[1])
      // Packed relative relocations (build.rs) add a version need without a symbol: glibc 2.36's.
      if (execFileSync('readelf', ['-V', join(installed, file)], { encoding: 'utf8' }).includes('GLIBC_ABI_DT_RELR')) versions.push('2.36')
      expect(versions.length, `${file} links against glibc`).toBeGreaterThan(0)
      const newest = versions.reduce((a, b) => (compareVersions(a, b) >= 0 ? a : b))
      expect(compareVersions(newest, GLIBC_BASELINE), `${file} needs GLIBC_${newest}`).toBeLessThanOrEqual(0)
      // prepack's own guard (a scan of the bytes) sees the same newest version as objdump
      expect(newestGlibcNeeded(join(installed, file))).toBe(newest)
    }
  })

  test("loa-finn's Docker build: pnpm install --frozen-lockfile on Node 22 without cargo, node_modules copied to the runtime stage, run as root and as a non-root user", async () => {
    const rust = noCargoPath.split(delimiter).flatMap((d) => ['cargo', 'rustc'].map((b) => join(d, b)))
    expect(rust.filter((f) => existsSync(f))).toEqual([])
    // Builder stage: COPY package.json pnpm-lock.yaml (and the tarball), RUN pnpm install --frozen-lockfile.
    const builder = join(out, 'docker-builder')
    mkdirSync(builder, { mode: 0o755 })
    for (const f of ['package.json', 'pnpm-lock.yaml', basename(tarball)]) copyFileSync(join(project, f), join(builder, f))
    const installed = await pnpm(builder, ['install', '--frozen-lockfile'])
    expect(installed.stdout).toMatch(/Ignored build scripts: finn-sandbox/)
    // Runtime stage: COPY --from=builder node_modules and package.json, then the app's own files.
    const runtime = join(out, 'docker-runtime')
    mkdirSync(runtime, { mode: 0o755 })
    execFileSync('cp', ['-a', join(builder, 'node_modules'), join(builder, 'package.json'), runtime])
    for (const f of ['consumer.mjs', 'consumer.cjs']) copyFileSync(join(fixtures, f), join(runtime, f))

    const asRoot = await consume(tools.node22, runtime, join(out, 'data-root'))
    expect(asRoot).toEqual({
      node: expect.stringMatching(/^v22\./),
      uid: '0',
      cat: 'hello from the jail\n',
      audited: true,
      poolError: true,
      helpers: bins,
    })

    // As loa-finn's `USER finn`: a user who owns nothing of the install. Its Node is a copy in
    // the world-readable test directory (the cached one sits under root's home).
    const node = join(out, 'node22')
    copyFileSync(tools.node22, node)
    chmodSync(node, 0o755)
    const dataDir = join(out, 'data-nobody')
    mkdirSync(dataDir)
    chownSync(dataDir, NOBODY, NOBODY)
    const asNobody = await consume(node, runtime, dataDir, NOBODY)
    expect(asNobody).toEqual({ ...asRoot, uid: String(NOBODY) })
  })

  test('the installed package loads from CommonJS, and under Node 24 and the system Node', async () => {
    const cjs = await run(tools.node22, [join(project, 'consumer.cjs')], { cwd: project, env: { PATH: noCargoPath } })
    // The installed copy's code list is the checkout's (one source: the Rust enum).
    const codes = Object.keys(require('../index.js').PoolErrorCode).length
    expect(JSON.parse(cjs.stdout)).toEqual({ uid: '0', codes })
    for (const [node, major] of [
      [tools.node24, 'v24.'],
      [process.execPath, process.version.split('.')[0] + '.'],
    ]) {
      const result = await consume(node, project, join(out, `data-${major}`))
      expect(result).toMatchObject({ node: expect.stringMatching(new RegExp(`^${major.replace('.', '\\.')}`)), uid: '0', audited: true })
    }
  })

  test('with onlyBuiltDependencies pnpm runs the install script, which keeps the prebuilt binary without cargo', async () => {
    const dir = emptyProject('consumer-built', { pnpm: { onlyBuiltDependencies: ['finn-sandbox'] } })
    copyFileSync(tarball, join(dir, basename(tarball)))
    const added = await pnpm(dir, ['add', `./${basename(tarball)}`])
    expect(added.stdout).toMatch(/finn-sandbox install\$ node scripts\/install\.js/)
    expect(added.stdout).toMatch(/finn-sandbox install: Done/)
    expect(added.stdout).not.toMatch(/Ignored build scripts/)
    expect(await consume(tools.node22, dir, join(out, 'data-built'))).toMatchObject({ uid: '0', audited: true })
  })

  test('npm install without cargo runs the install script, which keeps the prebuilt binary', async () => {
    const dir = emptyProject('consumer-npm')
    const installed = await run('npm', ['install', '--no-audit', '--no-fund', '--foreground-scripts', tarball], {
      cwd: dir,
      env: { PATH: noCargoPath, HOME: join(out, 'home') },
    })
    expect(`${installed.stdout}${installed.stderr}`).toMatch(/finn-sandbox@[\d.]+ install\n> node scripts\/install\.js/)
    expect(await consume(tools.node22, dir, join(out, 'data-npm'))).toMatchObject({ uid: '0', audited: true })
  })

  test('FINN_SANDBOX_BUILD_FROM_SOURCE=1 without cargo fails naming what is missing and the prebuilt platforms, and leaves the package working', async () => {
    const installed = join(project, 'node_modules', 'finn-sandbox')
    const before = readFileSync(join(installed, `finn-sandbox.${SUFFIX}.node`))
    const err = (await run(tools.node22, [join(installed, 'scripts', 'install.js')], {
      cwd: installed,
      env: { PATH: noCargoPath, FINN_SANDBOX_BUILD_FROM_SOURCE: '1' },
    }).then(
      () => null,
      (e) => e,
    )) as { code: number; stderr: string } | null
    expect(err).not.toBeNull()
    expect(err?.code).toBe(1)
    expect(err?.stderr).toMatch(/cannot run rustc/)
    expect(err?.stderr).toMatch(/needs Rust: cargo and rustc on PATH/)
    expect(err?.stderr).toContain(`Prebuilt binaries ship for ${SUFFIX} only`)
    expect(readFileSync(join(installed, `finn-sandbox.${SUFFIX}.node`)).equals(before)).toBe(true)
    expect(await consume(tools.node22, project, join(out, 'data-after'))).toMatchObject({ audited: true })
  })

  test('without a binary for the platform, import fails at once naming the platform and the fix', async () => {
    const dir = emptyProject('consumer-broken')
    mkdirSync(join(dir, 'node_modules'))
    const pkg = join(dir, 'node_modules', 'finn-sandbox')
    execFileSync('cp', ['-r', join(project, 'node_modules', 'finn-sandbox') + '/', pkg])
    rmSync(join(pkg, `finn-sandbox.${SUFFIX}.node`))
    const err = (await run(tools.node22, ['--input-type=module', '-e', "import 'finn-sandbox'"], { cwd: dir, env: { PATH: noCargoPath } }).then(
      () => null,
      (e) => e,
    )) as { stderr: string } | null
    expect(err?.stderr).toContain(`finn-sandbox: no native binary loads on ${SUFFIX} (Cannot find module './finn-sandbox.${SUFFIX}.node')`)
    expect(err?.stderr).toContain('FINN_SANDBOX_BUILD_FROM_SOURCE=1 npm rebuild finn-sandbox')
    expect(err?.stderr).toContain('pnpm.onlyBuiltDependencies')
  })

  test('npm install with FINN_SANDBOX_BUILD_FROM_SOURCE=1 builds the addon from source in an empty project', { timeout: 900_000 }, async () => {
    const dir = emptyProject('consumer-source')
    const installed = await run('npm', ['install', '--no-audit', '--no-fund', '--foreground-scripts', tarball], {
      cwd: dir,
      env: { ...process.env, FINN_SANDBOX_BUILD_FROM_SOURCE: '1', CARGO_TARGET_DIR: join(root, 'target') },
      maxBuffer: 64 * 1024 * 1024,
    })
    expect(installed.stderr).toContain(`finn-sandbox: building from source for ${SUFFIX} (FINN_SANDBOX_BUILD_FROM_SOURCE=1)`)
    // cargo compiled this copy of the crate, and the addon was replaced (npm unpacks with 1985's mtime).
    expect(installed.stderr).toMatch(/Compiling finn-sandbox v[\d.]+ \(\S*consumer-source\/node_modules\/finn-sandbox\)/)
    const addon = join(dir, 'node_modules', 'finn-sandbox', `finn-sandbox.${SUFFIX}.node`)
    expect(statSync(addon).mtimeMs).toBeGreaterThan(Date.parse('2020-01-01'))
    expect(await consume(process.execPath, dir, join(out, 'data-source'))).toMatchObject({ uid: '0', audited: true })
  })
})
