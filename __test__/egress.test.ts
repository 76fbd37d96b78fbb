// The network allowlist through the JS API: a command whose isolation names a NetworkOptions
// list reaches the network only through the pool's egress proxy. Servers on 127.0.0.1
// (allowed.test) and 127.0.0.2 (denied.test), named through `hosts`, stand in for the internet;
// nothing here sends a byte outside 127.0.0.0/8, ::1 or the job's own namespace. Every refusal
// is judged from the host: the server saw no connection. Every allowed request gets its bytes.
import { execFile, spawnSync } from 'node:child_process'
import { createSocket, type Socket as UdpSocket } from 'node:dgram'
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from 'node:fs'
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import { type AddressInfo, createServer as createTcpServer, type Server as TcpServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, test } from 'vitest'
import { AuditLog, type CommandPolicy, type IsolationOptions, type NetworkOptions, PoolError, SandboxError, ToolSandbox, WorkerPool, createSession, doctor, probeIsolation } from '../index.js'
import { ENV, rejectionOf } from './helpers.js'

const rung = probeIsolation().egress
const pool = new WorkerPool({ interactiveWorkers: 2 })
afterAll(() => pool.shutdown())

/** A server and every connection and request path it saw. */
interface Seen {
  port: number
  connections: number
  paths: string[]
  close(): Promise<void>
}

function track(server: HttpServer | TcpServer, seen: Omit<Seen, 'port' | 'close'>) {
  server.on('connection', () => {
    seen.connections++
  })
}

async function listen(server: HttpServer | TcpServer, host: string): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, host, () => resolve())
  })
  return (server.address() as AddressInfo).port
}

const dir = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-')))
const repo = join(dir, 'repo.git')

/** Serves `body` at every path (and the bare repository's files under /repo.git/). */
function handler(body: string) {
  return (seen: { paths: string[] }) => (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => {
    seen.paths.push(req.url ?? '')
    // A registry's answer for one package, for npm.
    if (req.url === '/finn-egress-demo') {
      const packument = { name: 'finn-egress-demo', 'dist-tags': { latest: '1.2.3' }, versions: { '1.2.3': { name: 'finn-egress-demo', version: '1.2.3', dist: { tarball: 'http://example.invalid/x.tgz' } } } }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(packument))
      return
    }
    if (req.url?.startsWith('/repo.git/')) {
      try {
        const file = readFileSync(join(repo, req.url.slice('/repo.git/'.length).split('?')[0]))
        res.writeHead(200).end(file)
      } catch {
        res.writeHead(404).end()
      }
      return
    }
    res.writeHead(200, { 'content-type': 'text/plain' }).end(body)
  }
}

async function http(host: string, body: string): Promise<Seen> {
  const seen = { connections: 0, paths: [] as string[] }
  const server = createHttpServer(handler(body)(seen))
  track(server, seen)
  const port = await listen(server, host)
  return Object.assign(seen, { port, close: () => new Promise<void>((r) => server.close(() => r())) })
}

let key = ''
let cert = ''
async function https(host: string, body: string): Promise<Seen> {
  const seen = { connections: 0, paths: [] as string[] }
  const server = createHttpsServer({ key, cert }, handler(body)(seen))
  track(server, seen)
  const port = await listen(server, host)
  return Object.assign(seen, { port, close: () => new Promise<void>((r) => server.close(() => r())) })
}

async function tcp(host: string): Promise<Seen | undefined> {
  const seen = { connections: 0, paths: [] as string[] }
  const server = createTcpServer((s) => s.destroy())
  track(server, seen)
  try {
    const port = await listen(server, host)
    return Object.assign(seen, { port, close: () => new Promise<void>((r) => server.close(() => r())) })
  } catch {
    return undefined
  }
}

let allowed: Seen, denied: Seen, allowedTls: Seen, deniedTls: Seen, v6: Seen | undefined
let udp: UdpSocket
let udpPort = 0
let datagrams = 0
const servers: Seen[] = []

beforeAll(async () => {
  const made = spawnSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=allowed.test',
    '-addext', 'subjectAltName=DNS:allowed.test,DNS:denied.test',
    '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem'),
  ], { encoding: 'utf8' })
  if (made.status !== 0) throw new Error(`openssl: ${made.stderr}`)
  key = readFileSync(join(dir, 'key.pem'), 'utf8')
  cert = readFileSync(join(dir, 'cert.pem'), 'utf8')
  // A bare repository served by the dumb HTTP protocol: git reads info/refs and the objects.
  mkdirSync(join(dir, 'work'))
  const git = (args: string[], cwd: string) => {
    const r = spawnSync('git', args, { cwd, encoding: 'utf8', env: { ...ENV, HOME: dir, GIT_CONFIG_NOSYSTEM: '1' } })
    if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`)
    return r.stdout
  }
  git(['init', '-q', '-b', 'main'], join(dir, 'work'))
  writeFileSync(join(dir, 'work', 'f'), 'x\n')
  git(['add', 'f'], join(dir, 'work'))
  git(['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'c'], join(dir, 'work'))
  git(['clone', '-q', '--bare', join(dir, 'work'), repo], dir)
  git(['update-server-info'], repo)
  allowed = await http('127.0.0.1', 'allowed-http-5be1')
  denied = await http('127.0.0.2', 'denied-http-0c7d')
  allowedTls = await https('127.0.0.1', 'allowed-https-a4f2')
  deniedTls = await https('127.0.0.2', 'denied-https-e19b')
  v6 = await tcp('::1')
  servers.push(allowed, denied, allowedTls, deniedTls, ...(v6 ? [v6] : []))
  udp = createSocket('udp4')
  udp.on('message', () => {
    datagrams++
  })
  await new Promise<void>((r) => udp.bind(0, '127.0.0.1', () => r()))
  udpPort = udp.address().port
})

afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()))
  udp?.close()
})

function network(extra: Partial<NetworkOptions> = {}): NetworkOptions {
  return {
    allow: [`allowed.test:${allowed.port}`, `allowed.test:${allowedTls.port}`],
    allowPlainHttp: true,
    allowLocal: true,
    hosts: { 'allowed.test': '127.0.0.1', 'denied.test': '127.0.0.2' },
    ...extra,
  }
}

function run(script: string, isolation: IsolationOptions = { mode: 'auto', network: network() }) {
  return pool.exec({
    binaryPath: '/bin/bash',
    args: ['-c', script],
    cwd: dir,
    env: { ...ENV, HOME: dir },
    isolation,
    timeoutMs: 60_000,
  })
}

const counts = () => servers.map((s) => s.connections)

describe.skipIf(rung !== 1)('rung 1: a network namespace whose only way out is the proxy', () => {
  test('curl (http and https), python urllib and git reach the allowed host through the proxy', async () => {
    const before = { http: allowed.connections, tls: allowedTls.connections }
    const r = await run([
      'echo "proxy=$HTTPS_PROXY $https_proxy no_proxy=[$NO_PROXY]"',
      `curl -sS --max-time 20 http://allowed.test:${allowed.port}/curl-http; echo`,
      `curl -sS --max-time 20 --cacert cert.pem https://allowed.test:${allowedTls.port}/curl-https; echo`,
      `/usr/bin/python3 -c 'import urllib.request as u; print(u.urlopen("http://allowed.test:${allowed.port}/py").read().decode())'`,
      `git ls-remote http://allowed.test:${allowed.port}/repo.git`,
    ].join('\n'))
    expect(r.stderr).toBe('')
    expect(r.stdout).toContain('proxy=http://127.0.0.1:3128 http://127.0.0.1:3128 no_proxy=[]')
    expect(r.stdout.match(/allowed-http-5be1/g)).toHaveLength(2)
    expect(r.stdout).toContain('allowed-https-a4f2')
    expect(r.stdout).toMatch(/^[0-9a-f]{40}\trefs\/heads\/main$/m)
    expect(r.exitCode).toBe(0)
    expect(allowed.paths).toEqual(expect.arrayContaining(['/curl-http', '/py', '/repo.git/info/refs?service=git-upload-pack']))
    expect(allowedTls.paths).toContain('/curl-https')
    expect(allowed.connections).toBeGreaterThan(before.http)
    expect(allowedTls.connections).toBe(before.tls + 1)
    expect(r.isolation?.applied).toContain('egress')
    expect(r.isolation?.applied).toContain('netns')
    expect(denied.connections + deniedTls.connections).toBe(0)
  })

  test.skipIf(spawnSync('sh', ['-c', 'command -v npm']).status !== 0)('npm reads the registry through the proxy; a registry the list does not name is refused', async () => {
    const npm = (host: string, port: number) =>
      run(`npm view finn-egress-demo version --registry=http://${host}:${port}/ --cache=${dir}/npm-cache --no-update-notifier --fetch-retries=0 2>&1`)
    const ok = await npm('allowed.test', allowed.port)
    expect(ok.stdout.trim()).toBe('1.2.3')
    expect(allowed.paths).toContain('/finn-egress-demo')
    const before = denied.connections
    const no = await npm('denied.test', denied.port)
    expect(no.exitCode).not.toBe(0)
    expect(no.stdout).toContain('403')
    expect(denied.connections).toBe(before)
  })

  test('every other way out is refused, and no server sees a connection', async () => {
    const before = counts()
    const datagramsBefore = datagrams
    const py = (code: string) => `/usr/bin/python3 -c '${code}' 2>/dev/null && echo OPEN || echo REFUSED`
    // A pathname Unix socket on the host (a docker.sock or ssh-agent stand-in): `unixSockets`
    // is "deny" by default. (Abstract sockets: the landlock scope, isolation.md.)
    let unixConnections = 0
    const unixServers = [createTcpServer(() => unixConnections++)]
    const unixPath = join(dir, 'agent.sock')
    await new Promise<void>((r) => unixServers[0].listen(unixPath, () => r()))
    const r = await run([
      // Through the proxy, to a host the list does not open: the proxy's 403.
      `curl -sS -o /dev/null -w 'denied-http=%{http_code}\\n' http://denied.test:${denied.port}/`,
      `curl -sS -o /dev/null --cacert cert.pem https://denied.test:${deniedTls.port}/ 2>&1 | grep -o 'CONNECT tunnel failed, response 403'`,
      // An IP literal the list does not name, v4 and v6.
      `curl -sS -o /dev/null -w 'literal=%{http_code}\\n' http://127.0.0.2:${denied.port}/`,
      v6 ? `curl -sS -g -o /dev/null -w 'literal6=%{http_code}\\n' http://[::1]:${v6.port}/` : 'echo literal6=403',
      // A Host that disagrees with the target.
      `curl -sS -o /dev/null -w 'host-mismatch=%{http_code}\\n' -H 'Host: denied.test:${denied.port}' http://allowed.test:${allowed.port}/mismatch`,
      // Around the proxy: straight to the servers' addresses, over TCP and UDP.
      `(exec 3<>/dev/tcp/127.0.0.1/${allowed.port}) 2>/dev/null && echo devtcp-allowed=OPEN || echo devtcp-allowed=REFUSED`,
      `(exec 3<>/dev/tcp/127.0.0.2/${denied.port}) 2>/dev/null && echo devtcp-denied=OPEN || echo devtcp-denied=REFUSED`,
      v6 ? `(exec 3<>/dev/tcp/::1/${v6.port}) 2>/dev/null && echo devtcp-v6=OPEN || echo devtcp-v6=REFUSED` : 'echo devtcp-v6=REFUSED',
      `echo -n raw-socket=; ${py(`import socket; socket.create_connection(("127.0.0.2", ${denied.port}), 5)`)}`,
      `curl -sS --noproxy '*' --max-time 5 http://127.0.0.1:${allowed.port}/ >/dev/null 2>&1 && echo noproxy=OPEN || echo noproxy=REFUSED`,
      // UDP: a DNS query to the host's stub resolver, and a datagram to a listening port.
      `echo -n dns=; ${py('import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001"), ("127.0.0.53", 53)); s.recv(512)')}`,
      `echo -n udp=; ${py(`import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", ${udpPort})); s.sendto(b"x", ("127.0.0.1", ${udpPort}))`)}`,
      // No name resolves inside: the command needs no DNS, and gets none.
      `getent hosts allowed.test >/dev/null && echo resolve=YES || echo resolve=NO`,
      // A Unix socket by path.
      `echo -n unix-path=; ${py(`import socket; socket.socket(socket.AF_UNIX).connect("${unixPath}")`)}`,
      // Node's fetch under Node 20 ignores the proxy variables (Node 24 honours them with
      // NODE_USE_ENV_PROXY=1): with no route of its own it fails.
      `node -e 'fetch("http://allowed.test:${allowed.port}/node").then(() => console.log("node-fetch=OPEN"), () => console.log("node-fetch=REFUSED"))'`,
    ].join('\n'))
    const out = r.stdout
    expect(out).toContain('denied-http=403')
    expect(out).toContain('CONNECT tunnel failed, response 403')
    expect(out).toContain('literal=403')
    expect(out).toContain('literal6=403')
    expect(out).toContain('host-mismatch=403')
    await Promise.all(unixServers.map((u) => new Promise((r) => u.close(r))))
    expect(unixConnections).toBe(0)
    for (const way of ['devtcp-allowed', 'devtcp-denied', 'devtcp-v6', 'raw-socket', 'noproxy', 'dns', 'node-fetch', 'unix-path']) {
      expect(out, way).toContain(`${way}=REFUSED`)
    }
    expect(out).toContain('resolve=NO')
    // A datagram to an address of the job's own namespace goes nowhere.
    expect(datagrams).toBe(datagramsBefore)
    expect(counts()).toEqual(before)
    expect(allowed.paths).not.toContain('/mismatch')
    expect(allowed.paths).not.toContain('/node')
  })

  test('a CONNECT relayed inside a tunnel and a TLS server name that is not the target are refused', async () => {
    const before = counts()
    const relay = [
      'import socket',
      's = socket.create_connection(("127.0.0.1", 3128), 10)',
      `s.sendall(b"CONNECT allowed.test:${allowed.port} HTTP/1.1\\r\\nHost: allowed.test:${allowed.port}\\r\\n\\r\\n")`,
      'print(s.recv(4096).split(b"\\r\\n")[0].decode())',
      `s.sendall(b"CONNECT denied.test:${denied.port} HTTP/1.1\\r\\nHost: denied.test:${denied.port}\\r\\n\\r\\n")`,
      'data = b""',
      'while True:',
      '    chunk = s.recv(4096)',
      '    if not chunk: break',
      '    data += chunk',
      'print("inner=" + data.split(b"\\r\\n")[0].decode())',
    ].join('\n')
    writeFileSync(join(dir, 'relay.py'), relay)
    const r = await run([
      '/usr/bin/python3 relay.py',
      `echo | openssl s_client -proxy 127.0.0.1:3128 -connect allowed.test:${allowedTls.port} -servername denied.test -CAfile cert.pem >/dev/null 2>&1 && echo sni=OPEN || echo sni=REFUSED`,
    ].join('\n'))
    expect(r.stdout).toContain('HTTP/1.1 200')
    expect(r.stdout).toMatch(/inner=HTTP\/1\.1 403/)
    expect(r.stdout).toContain('sni=REFUSED')
    expect(counts()).toEqual(before)
  })

  test("a session's commands reach the allowed host through the proxy and nothing else", async () => {
    const before = denied.connections
    const s = await createSession({ pool, cwd: dir, env: { ...ENV, HOME: dir }, isolation: { mode: 'auto', network: network() } })
    try {
      const ok = await s.exec(`curl -sS --max-time 20 http://allowed.test:${allowed.port}/session`)
      expect(ok.stdout).toBe('allowed-http-5be1')
      const refused = await s.exec(`curl -sS -o /dev/null -w '%{http_code}' http://denied.test:${denied.port}/; (exec 3<>/dev/tcp/127.0.0.2/${denied.port}) 2>/dev/null && echo OPEN`)
      expect(refused.stdout).toBe('403')
    } finally {
      await s.destroy()
    }
    expect(allowed.paths).toContain('/session')
    expect(denied.connections).toBe(before)
  })

  test("ToolSandbox's git fetch from an https remote reaches that remote's host only", async () => {
    // The remote is this host's own server: its host, 127.0.0.1, is a loopback address, which
    // the sandbox's list (no allowLocal) never reaches. With the whole network it would.
    const jail = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-jail-')))
    const data = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-data-')))
    const GIT = realpathSync(spawnSync('sh', ['-c', 'command -v git'], { encoding: 'utf8' }).stdout.trim())
    const git = (...args: string[]) => spawnSync('git', args, { cwd: jail, encoding: 'utf8', env: { ...ENV, HOME: dir } })
    git('init', '-q', '-b', 'main')
    git('config', 'remote.origin.url', `https://127.0.0.1:${allowedTls.port}/repo.git`)
    git('config', 'remote.origin.fetch', '+refs/heads/*:refs/remotes/origin/*')
    const policy: CommandPolicy = { binary: GIT, subcommands: ['fetch'], deniedFlags: ['-c', '--exec-path', '--git-dir', '--work-tree'], validatePaths: false }
    const sandbox = new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 30_000, maxOutput: 65_536, policies: { git: policy } }, new AuditLog(data), pool)
    const before = allowedTls.connections
    const r = await sandbox.execute('git fetch origin').catch((e: SandboxError) => ({ exitCode: -1, stderr: e.message }))
    expect(r.exitCode).not.toBe(0)
    expect(r.stderr).toMatch(/403|CONNECT tunnel failed/)
    expect(allowedTls.connections).toBe(before)
  })

  test("ToolSandbox: a policy's network list is all its commands reach; a policy without one gets no network", async () => {
    const jail = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-jail-')))
    const data = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-data-')))
    const CURL = realpathSync(spawnSync('sh', ['-c', 'command -v curl'], { encoding: 'utf8' }).stdout.trim())
    const curl: CommandPolicy = { binary: CURL, subcommands: [], deniedFlags: ['--noproxy', '-x', '--proxy', '-K', '--config'], validatePaths: false }
    const config = (policy: CommandPolicy) => ({ allowBash: true, jailRoot: jail, execTimeout: 30_000, maxOutput: 65_536, policies: { curl: policy } })
    const listed = new ToolSandbox(config({ ...curl, network: network() }), new AuditLog(data), pool)
    const ok = await listed.execute(`curl -sS http://allowed.test:${allowed.port}/policy-ok`)
    expect(ok.stdout).toBe('allowed-http-5be1')
    const before = counts()
    // Without -f curl prints the proxy's 403, whose body names the refused host.
    const refused = await listed.execute(`curl -sS http://denied.test:${denied.port}/policy-no`)
    expect(refused.stdout).toContain('denied.test')
    expect(refused.stdout).not.toContain('denied-http-0c7d')
    const unlisted = new ToolSandbox(config(curl), new AuditLog(data), pool)
    const none = await unlisted.execute(`curl -sS --max-time 5 http://allowed.test:${allowed.port}/policy-none`)
    expect(none.exitCode).not.toBe(0)
    const direct = await unlisted.execute(`curl -sS --max-time 5 http://127.0.0.1:${allowed.port}/policy-direct`)
    expect(direct.exitCode).not.toBe(0)
    expect(counts()).toEqual(before)
    expect(allowed.paths).not.toContain('/policy-none')
    expect(allowed.paths).not.toContain('/policy-direct')
  })

  test('two jobs with different lists on one pool each get their own', async () => {
    const onlyDenied = network({ allow: [`denied.test:${denied.port}`] })
    const [a, b] = await Promise.all([
      run(`curl -sS -o /dev/null -w '%{http_code}' http://denied.test:${denied.port}/b`),
      run(`curl -sS -o /dev/null -w '%{http_code}' http://denied.test:${denied.port}/a`, { mode: 'auto', network: onlyDenied }),
    ])
    expect(a.stdout).toBe('403')
    expect(b.stdout).toBe('200')
    expect(denied.paths).toEqual(['/a'])
  })
})

// Rung 2 where this host would take rung 1: a Node of its own with the test switch that makes
// the probe find no namespaces (it only ever takes layers away).
const probe = probeIsolation()
const canRoute = probe.seccomp && typeof probe.landlock === 'number' && probe.landlock >= 6

describe.skipIf(!canRoute)('rung 2: no namespace, the reaper makes every TCP connect of the job', () => {
  test('curl and npm reach the allowed host through the proxy; a denied host, a direct connect, UDP and raw sockets do not', async () => {
    const script = `
      const sandbox = require(${JSON.stringify(join(import.meta.dirname, '..', 'index.js'))})
      const pool = new sandbox.WorkerPool({ interactiveWorkers: 1 })
      const network = JSON.parse(process.env.NETWORK)
      const run = (script) => pool.exec({ binaryPath: '/bin/bash', args: ['-c', script], cwd: process.env.DIR, env: JSON.parse(process.env.JOB_ENV), isolation: { mode: 'auto', network }, timeoutMs: 60000 })
      ;(async () => {
        const out = { rung: sandbox.probeIsolation().egress, results: [] }
        for (const cmd of JSON.parse(process.env.COMMANDS)) {
          const r = await run(cmd)
          out.results.push({ stdout: r.stdout, exitCode: r.exitCode, applied: r.isolation && r.isolation.applied, degraded: r.isolation && r.isolation.degraded })
        }
        await pool.shutdown()
        process.stdout.write(JSON.stringify(out))
      })().catch((e) => { process.stdout.write(JSON.stringify({ error: String(e && e.message || e) })); })`
    const py = (code: string) => `/usr/bin/python3 -c '${code}' 2>/dev/null && echo OPEN || echo REFUSED`
    const commands = [
      `curl -sS http://allowed.test:${allowed.port}/rung2-ok`,
      `curl -sS http://denied.test:${denied.port}/rung2-no`,
      `(exec 3<>/dev/tcp/127.0.0.1/${allowed.port}) 2>/dev/null && echo OPEN || echo REFUSED`,
      `curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:${allowed.port}/rung2-direct >/dev/null 2>&1 && echo OPEN || echo REFUSED`,
      py(`import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("127.0.0.1", ${udpPort}))`),
      py('import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)'),
      `npm view finn-egress-demo version --registry=http://allowed.test:${allowed.port}/ --cache=${dir}/npm-cache-2 --no-update-notifier --fetch-retries=0 2>&1 || true`,
    ]
    const before = counts()
    const datagramsBefore = datagrams
    const env = { ...process.env, FINN_SANDBOX_TEST_HOOKS: '1', FINN_SANDBOX_TEST_NO_NAMESPACES: '1', NETWORK: JSON.stringify(network()), COMMANDS: JSON.stringify(commands), DIR: dir, JOB_ENV: JSON.stringify({ ...ENV, HOME: dir }) }
    // Not spawnSync: the servers answer from this process's event loop.
    const stdout = await new Promise<string>((resolve) =>
      execFile(process.execPath, ['-e', script], { env, encoding: 'utf8', timeout: 120_000 }, (_err, out) => resolve(out)),
    )
    const out = JSON.parse(stdout || '{}')
    expect(out.error).toBeUndefined()
    expect(out.rung).toBe(2)
    const [ok, refused, devTcp, direct, udp, raw, npm] = out.results
    expect(ok.stdout).toBe('allowed-http-5be1')
    expect(ok.applied).toContain('egress')
    expect(ok.applied).not.toContain('netns')
    expect(refused.stdout).toContain('denied.test')
    expect(refused.stdout).not.toContain('denied-http-0c7d')
    expect([devTcp.stdout.trim(), direct.stdout.trim(), udp.stdout.trim(), raw.stdout.trim()]).toEqual(['REFUSED', 'REFUSED', 'REFUSED', 'REFUSED'])
    const npmWorks = spawnSync('sh', ['-c', 'command -v npm']).status === 0
    if (npmWorks) expect(npm.stdout.trim()).toBe('1.2.3')
    // The allowed server saw the requests through the proxy; nothing else reached any server.
    const after = counts()
    expect(after[0]).toBeGreaterThanOrEqual(before[0] + (npmWorks ? 2 : 1))
    expect(after.slice(1)).toEqual(before.slice(1))
    expect(allowed.paths).toContain('/rung2-ok')
    expect(allowed.paths).not.toContain('/rung2-direct')
    expect(datagrams).toBe(datagramsBefore)
  })
})

describe('the option', () => {
  test('probeIsolation() and doctor() name the rung', () => {
    expect([1, 2, 3]).toContain(rung)
    expect(doctor().egress.rung).toBe(rung)
    expect(doctor().egress.reason.length).toBeGreaterThan(0)
  })

  test('bad entries and an allowlist without isolation are refused naming the field', async () => {
    const cases: Array<[IsolationOptions, string]> = [
      [{ mode: 'auto', network: { allow: ['github.com', '*'] } }, 'isolation.network.allow[1]'],
      [{ mode: 'auto', network: { allow: [], hosts: { 'a.test': 'not-an-ip' } } }, 'isolation.network.hosts'],
      [{ network: { allow: ['github.com'] } }, 'isolation.network'],
      [{ mode: 'auto', network: { allow: 'github.com' } as unknown as NetworkOptions }, 'isolation.network'],
      [{ mode: 'auto', namespaces: { net: false }, network: { allow: ['github.com'] } }, 'isolation.namespaces.net'],
    ]
    for (const [isolation, field] of cases) {
      const e = await rejectionOf(pool.exec({ binaryPath: '/bin/true', args: [], cwd: dir, env: ENV, isolation }), PoolError)
      expect(e.code, field).toBe('INVALID_SPEC')
      expect(e.message, field).toContain(field)
    }
  })

  test("a policy's network list is checked at construction, naming the field", () => {
    const jail = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-jail-')))
    const data = realpathSync(mkdtempSync(join(tmpdir(), 'finn-egress-data-')))
    const policy: CommandPolicy = { binary: '/usr/bin/curl', subcommands: [], deniedFlags: [], validatePaths: false }
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ policies: { curl: { ...policy, network: { allow: ['*'] } } } }, 'config.policies.curl.network.allow[0]'],
      [{ policies: { curl: { ...policy, network: { allow: ['a.test'], extra: 1 } } } }, 'config.policies.curl.network'],
      [{ policies: { curl: { ...policy, network: 'allow' } } }, 'config.policies.curl.network'],
      [{ policies: { curl: { ...policy, network: { allow: ['a.test'] } } }, isolation: { mode: 'off' } }, 'config.policies.curl.network'],
      [{ policies: { curl: { ...policy, network: { allow: ['a.test'] } } }, isolation: { namespaces: { net: false } } }, 'config.isolation.namespaces.net'],
      [{ policies: { git: { ...policy, network: { allow: ['github.com'] } } } }, 'config.policies.git.network'],
    ]
    for (const [extra, field] of cases) {
      let error: unknown
      try {
        new ToolSandbox({ allowBash: true, jailRoot: jail, execTimeout: 1000, maxOutput: 1024, ...extra } as never, new AuditLog(data), pool)
      } catch (e) {
        error = e
      }
      expect(error, field).toBeInstanceOf(SandboxError)
      expect((error as Error).message, field).toContain(field)
    }
  })

  test.skipIf(rung !== 3)('rung 3: required refuses, auto runs without any network and says so', async () => {
    const e = await rejectionOf(run('true', { mode: 'auto', required: true, network: network() }), PoolError)
    expect(e.code).toBe('ISOLATION_UNAVAILABLE')
    expect(e.message).toContain('egress')
    const before = counts()
    const r = await run(`curl -sS --max-time 5 http://allowed.test:${allowed.port}/ || (exec 3<>/dev/tcp/127.0.0.1/${allowed.port}) && echo OPEN`)
    expect(r.stdout).not.toContain('OPEN')
    expect(r.isolation?.degraded.some((d) => d.startsWith('egress:'))).toBe(true)
    expect(counts()).toEqual(before)
  })
})
