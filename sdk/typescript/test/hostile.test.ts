// Properties the SDK promises against a gateway that misbehaves, shown
// against an in-process fake LockService (the wire only: lock semantics are
// the live tests' job). Each test names the property it holds the SDK to.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Http2Server, type ServerHttp2Session } from "node:http2";
import { createServer as createHttp1Server, type Server as Http1Server } from "node:http";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { getEventListeners } from "node:events";
import {
  AcquireResponseSchema,
  CloseSessionResponseSchema,
  GrantedSchema,
  KeepAliveSessionResponseSchema,
  LockService,
  OpenSessionResponseSchema,
  QueuedSchema,
  ReleaseResponseSchema,
  RenewResponseSchema,
  SessionShardSchema,
  ShardLeaseState,
} from "../src/gen/leasegate/v1/lock_pb.js";
import { Client, ClosedError, LockLostError, RateLimitedError, WaitTimeoutError } from "../src/index.js";

type Impl = Partial<ServiceImpl<typeof LockService>>;

interface Fake {
  url: string;
  calls: Map<string, number>;
}

const servers: (Http2Server | Http1Server)[] = [];
const sessions = new Set<ServerHttp2Session>();
after(async () => {
  for (const s of sessions) s.destroy();
  for (const s of servers) if ("closeAllConnections" in s) s.closeAllConnections();
  for (const s of servers) await new Promise<void>((r) => s.close(() => r()));
});

/** fake serves impl on a loopback port (h2c, or HTTP/1.1 when http1), counting calls per method. */
async function fake(impl: (calls: Map<string, number>) => Impl, http1 = false): Promise<Fake> {
  const calls = new Map<string, number>();
  const counted: Record<string, unknown> = {};
  for (const [k, fn] of Object.entries(impl(calls))) {
    counted[k] = (...a: unknown[]) => {
      calls.set(k, (calls.get(k) ?? 0) + 1);
      return (fn as (...a: unknown[]) => unknown)(...a);
    };
  }
  const handler = connectNodeAdapter({ routes: (r) => r.service(LockService, counted as Impl) });
  let srv: Http2Server | Http1Server;
  if (http1) {
    srv = createHttp1Server(handler);
  } else {
    const h2 = createServer(handler);
    h2.on("session", (s) => {
      sessions.add(s);
      s.once("close", () => sessions.delete(s));
    });
    srv = h2;
  }
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  return { url, calls };
}

function granted(ttlMs: bigint, lockId = "lock-1") {
  return create(AcquireResponseSchema, { event: { case: "granted", value: create(GrantedSchema, { lockId, fencingToken: 7n, ttlMs, shard: "shard-0" }) } });
}

function errorInfo(reason: string): Uint8Array {
  return new BinaryWriter().tag(1, 2).string(reason).tag(2, 2).string("leasegate.dev").finish();
}

function retryInfo(seconds: number): Uint8Array {
  return new BinaryWriter().tag(1, 2).fork().tag(1, 0).int64(seconds).join().finish();
}

function rateLimited(seconds: number): ConnectError {
  const details = [
    { type: "google.rpc.ErrorInfo", value: errorInfo("RATE_LIMITED") },
    { type: "google.rpc.RetryInfo", value: retryInfo(seconds) },
  ];
  return new ConnectError("slow down", Code.ResourceExhausted, undefined, details as unknown as ConstructorParameters<typeof ConnectError>[3]);
}

const until = (ms: number) => new Promise((r) => setTimeout(r, ms));

for (const httpVersion of ["2", "1.1"] as const) {
  test(`closing the client ends its locks' background renewals (HTTP/${httpVersion})`, async () => {
    const gw = await fake(() => ({
      async *acquire() {
        yield granted(900n);
      },
      renew: () => create(RenewResponseSchema, { ttlMs: 900n }),
      release: () => create(ReleaseResponseSchema, { released: true }),
    }), httpVersion === "1.1");
    const c = new Client([gw.url], { httpVersion });
    const l = await c.acquire("closed-client");
    c.close();
    const atClose = gw.calls.get("renew") ?? 0;
    await until(2000); // more than two TTLs: a lock kept alive would have renewed several times
    const renewed = (gw.calls.get("renew") ?? 0) - atClose;
    assert.equal(renewed, 0, `${renewed} renewals reached the gateway after close (the doc: "they lose their renewals and end at their deadlines")`);
    assert.ok(l.signal.aborted, "the lock is still held two TTLs after the client was closed");
  });
}

test("a rate limit's delay is waited out even when it is longer than a timer can count (2^31 ms)", async () => {
  // 30 days: Node's setTimeout fires at once for a delay above 2^31-1 ms,
  // so an unclamped sleep turns the gateway's "wait" into a retry storm.
  const gw = await fake(() => ({
    // eslint-disable-next-line require-yield
    async *acquire() {
      throw rateLimited(30 * 24 * 3600);
    },
  }));
  const c = new Client([gw.url]);
  const ac = new AbortController();
  const run = c.acquire("rate-limited", { signal: ac.signal }).catch((e: unknown) => e);
  await until(500);
  ac.abort();
  await run;
  c.close();
  const n = gw.calls.get("acquire") ?? 0;
  assert.equal(n, 1, `${n} acquire attempts in 500 ms against a gateway that asked for a 30-day pause`);
});

test("a unary call rate-limited for longer than a timer can count is not retried at once", async () => {
  const gw = await fake(() => ({
    tryAcquire: () => {
      throw rateLimited(30 * 24 * 3600);
    },
  }));
  const c = new Client([gw.url]);
  const ac = new AbortController();
  const run = c.tryAcquire("rate-limited-try", { signal: ac.signal }).catch((e: unknown) => e);
  await until(500);
  ac.abort();
  const err = await run;
  c.close();
  const n = gw.calls.get("tryAcquire") ?? 0;
  assert.equal(n, 1, `${n} tryAcquire attempts in 500 ms against a gateway that asked for a 30-day pause (ended with ${err})`);
  assert.ok(!(err instanceof RateLimitedError) || n === 1);
});

test("a gateway's oversized stream message is refused, not buffered (the Python SDK's bound: 4 MiB)", async () => {
  const gw = await fake(() => ({
    async *acquire() {
      yield granted(5000n, "x".repeat(16 << 20));
    },
    release: () => create(ReleaseResponseSchema, { released: true }),
  }));
  const c = new Client([gw.url]);
  const got = await c.acquire("huge").then(
    async (l) => {
      const n = l.id.length;
      await l.release().catch(() => {});
      return `a Lock whose id is ${n} bytes`;
    },
    () => "refused",
  );
  c.close();
  assert.equal(got, "refused", `a 16 MiB grant was accepted: ${got}`);
});

test("a renewal's TTL above the one the lock asked for does not push its deadline past that TTL", async () => {
  // The gateway rounds a TTL up to whole seconds: a lock asking for 2 s
  // holds a 2 s lease. A broken gateway's renewal claiming a 10-minute TTL
  // must not keep the holder writing for ten minutes on a 2 s lease.
  const gw = await fake(() => ({
    async *acquire() {
      yield granted(2000n);
    },
    renew: () => create(RenewResponseSchema, { ttlMs: 600_000n }),
    release: () => create(ReleaseResponseSchema, { released: true }),
  }));
  const c = new Client([gw.url]);
  const l = await c.acquire("long-ttl", { ttlMs: 2000, manualRenew: true });
  const sent = performance.now();
  const d = await l.renew();
  await l.release();
  c.close();
  assert.ok(d - sent <= 2000, `the deadline is ${Math.round(d - sent)} ms after the renewal was sent on a lock that asked for 2000 ms`);
});

test("a released session lock is not kept alive by its session (no abort listener left on the lease)", async () => {
  const live = () => [create(SessionShardSchema, { shard: "shard-0", state: ShardLeaseState.LIVE, ttlMs: 30_000n })];
  const gw = await fake(() => ({
    async *acquire() {
      yield granted(30_000n);
    },
    release: () => create(ReleaseResponseSchema, { released: true }),
    openSession: () => create(OpenSessionResponseSchema, { sessionId: "s-1", ttlMs: 30_000n, shards: live() }),
    keepAliveSession: () => create(KeepAliveSessionResponseSchema, { shards: live() }),
    closeSession: () => create(CloseSessionResponseSchema, {}),
  }));
  const c = new Client([gw.url]);
  const s = await c.openSession({ ttlMs: 30_000 });
  let lease: AbortSignal | undefined;
  for (let i = 0; i < 100; i++) {
    const l = await s.acquire("many");
    lease = l.lease.signal;
    await l.release();
  }
  const n = getEventListeners(lease!, "abort").length;
  await s.close();
  c.close();
  assert.ok(n <= 1, `the session's lease holds ${n} abort listeners after 100 locks were taken and released on it: each pins a released Lock`);
});

test("a renewal answer with ttl_ms 0 does not extend the deadline (as the Go SDK: a zero TTL confirms nothing)", async () => {
  const gw = await fake(() => ({
    async *acquire() {
      yield granted(2000n);
    },
    renew: () => create(RenewResponseSchema, { ttlMs: 0n }),
    release: () => create(ReleaseResponseSchema, { released: true }),
  }));
  const c = new Client([gw.url]);
  const l = await c.acquire("zero-ttl", { ttlMs: 2000, manualRenew: true });
  const before = l.expires;
  await until(300); // so that a renewal crediting the old TTL lands visibly later
  const after = await l.renew().catch(() => l.expires);
  await l.release();
  c.close();
  assert.ok(after <= before, `an answer with ttl_ms 0 moved the deadline ${Math.round(after - before)} ms later`);
});

test("a session keepalive reporting a LIVE lease with ttl_ms 0 does not extend that lease (the Go SDK refuses it)", async () => {
  const shard = (ttlMs: bigint) => [create(SessionShardSchema, { shard: "shard-0", state: ShardLeaseState.LIVE, ttlMs })];
  const gw = await fake(() => ({
    openSession: () => create(OpenSessionResponseSchema, { sessionId: "s-1", ttlMs: 1500n, shards: shard(1500n) }),
    keepAliveSession: () => create(KeepAliveSessionResponseSchema, { shards: shard(0n) }),
    closeSession: () => create(CloseSessionResponseSchema, {}),
  }));
  const c = new Client([gw.url]);
  const s = await c.openSession({ ttlMs: 1500 });
  const lease = s.lease("shard-0")!;
  const first = lease.expires;
  await until(1000); // two keepalives at TTL/3
  const later = lease.signal.aborted ? first : lease.expires;
  await s.close().catch(() => {});
  c.close();
  assert.ok(later <= first, `keepalives answering ttl_ms 0 moved the lease's deadline ${Math.round(later - first)} ms later`);
});

/** stalled resolves when the call's signal aborts: a gateway that never answers. */
function stalled(signal: AbortSignal): Promise<void> {
  return new Promise((r) => (signal.aborted ? r() : signal.addEventListener("abort", () => r(), { once: true })));
}

test("an acquire returns at most the wait grace (0.5 s) after its wait timeout, however the gateway stalls", async () => {
  // A gateway whose enqueue stalls (a shard without quorum) never ends the
  // wait itself: the SDK must, as the Go SDK's waitGrace does.
  const gw = await fake(() => ({
    // eslint-disable-next-line require-yield
    async *acquire(_req, ctx) {
      await stalled(ctx.signal);
    },
  }));
  const c = new Client([gw.url]);
  const stop = new AbortController();
  const bound = setTimeout(() => stop.abort(), 5000); // a broken SDK fails here rather than hang the run
  const start = performance.now();
  const err = await c.acquire("stalled", { waitTimeoutMs: 500, signal: stop.signal }).then(
    (l) => l,
    (e: unknown) => e,
  );
  const took = performance.now() - start;
  clearTimeout(bound);
  c.close();
  assert.ok(err instanceof WaitTimeoutError, `the acquire ended with ${err}, not a WaitTimeoutError`);
  assert.ok(took <= 500 + 500 + 250, `the acquire returned ${Math.round(took)} ms after it began; its wait timeout was 500 ms, its grace 500 ms`);
});

test("onQueued hears of a change of position, not of every heartbeat repeating it (as the Go SDK)", async () => {
  const queued = (position: bigint) => create(AcquireResponseSchema, { event: { case: "queued", value: create(QueuedSchema, { position }) } });
  const gw = await fake(() => ({
    async *acquire() {
      for (const p of [3n, 3n, 3n, 2n, 2n, 1n, 1n]) yield queued(p);
      yield granted(30_000n);
    },
    release: () => create(ReleaseResponseSchema, { released: true }),
  }));
  const c = new Client([gw.url]);
  const heard: number[] = [];
  const l = await c.acquire("queued", { onQueued: (p) => heard.push(p) });
  await l.release();
  c.close();
  assert.deepEqual(heard, [3, 2, 1]);
});

test("closing the client ends its sessions: their locks' signals abort with the close as the cause, and no keepalive follows", async () => {
  const live = () => [create(SessionShardSchema, { shard: "shard-0", state: ShardLeaseState.LIVE, ttlMs: 900n })];
  const gw = await fake(() => ({
    async *acquire() {
      yield granted(900n);
    },
    openSession: () => create(OpenSessionResponseSchema, { sessionId: "s-1", ttlMs: 900n, shards: live() }),
    keepAliveSession: () => create(KeepAliveSessionResponseSchema, { shards: live() }),
  }));
  const c = new Client([gw.url]);
  const s = await c.openSession({ ttlMs: 900 });
  const l = await s.acquire("closed-session");
  c.close();
  const atClose = [...gw.calls.values()].reduce((a, b) => a + b, 0);
  assert.ok(l.signal.aborted, "the session's lock is still held once the client is closed");
  assert.ok(l.signal.reason instanceof LockLostError, `the lock ended with ${l.signal.reason}`);
  assert.ok(l.signal.reason.cause instanceof ClosedError, `the lock's loss has the cause ${l.signal.reason.cause}, not the close`);
  assert.ok(s.signal.reason instanceof ClosedError, `the session ended with ${s.signal.reason}`);
  await s.close();
  await until(1000); // more than a TTL: a session kept alive would have sent keepalives
  const after = [...gw.calls.values()].reduce((a, b) => a + b, 0) - atClose;
  assert.equal(after, 0, `${after} requests reached the gateway after close: ${JSON.stringify([...gw.calls])}`);
});

test("closing the client ends an acquire waiting on it, and no attempt follows (HTTP/2 would reconnect)", async () => {
  const gw = await fake(() => ({
    // eslint-disable-next-line require-yield
    async *acquire(_req, ctx) {
      await stalled(ctx.signal);
    },
  }));
  const c = new Client([gw.url]);
  const run = c.acquire("waiting").catch((e: unknown) => e);
  while ((gw.calls.get("acquire") ?? 0) === 0) await until(10);
  c.close();
  const err = await Promise.race([run, until(3000).then(() => "still waiting 3 s after close")]);
  await until(500);
  assert.ok(err instanceof ClosedError, `the waiting acquire ended with ${err}, not a ClosedError`);
  assert.equal(gw.calls.get("acquire"), 1, "an acquire attempt reached the gateway after close");
});
