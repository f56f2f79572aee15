// The SDK against a real gateway on its embedded etcd (loopback only).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { setTimeout as delay } from "node:timers/promises";
import { Client, LockLostError, NotAcquiredError, ReleasedError, UnauthenticatedError, UnavailableError, WaitTimeoutError, type Lock } from "../src/index.js";
import { freePort, start, startOn, type Gateway } from "./gateway.js";

let gw: Gateway;
let n = 0;
const name = () => `ts-test/${process.pid}/${++n}`;

before(async () => {
  gw = await start();
});
after(async () => {
  await gw?.stop();
});

describe("locks on a live gateway", () => {
  test("acquire grants a free name with a token and releases it", async () => {
    const c = new Client([gw.url]);
    const l = await c.acquire(name(), { ttlMs: 5000 });
    assert.equal(typeof l.token, "bigint");
    assert.ok(l.token > 0n);
    assert.ok(l.expires > performance.now(), "the deadline is in the future");
    assert.equal(l.signal.aborted, false);
    assert.equal(await l.release(), true);
    assert.ok(l.signal.aborted);
    assert.ok(l.signal.reason instanceof ReleasedError);
  });

  test("waiters queue FIFO with positions, and release frees the next", async () => {
    const c = new Client([gw.url]);
    const nm = name();
    const first = await c.acquire(nm, { ttlMs: 5000 });
    const positions: number[][] = [[], []];
    const order: number[] = [];
    const waiters: Promise<Lock>[] = [];
    for (let i = 0; i < 2; i++) {
      const queued = new Promise<void>((r) => {
        waiters.push(
          c.acquire(nm, {
            ttlMs: 5000,
            onQueued: (p) => {
              positions[i]!.push(p);
              r();
            },
          }).then((l) => {
            order.push(i);
            return l;
          }),
        );
      });
      await queued; // the second enqueues behind the first
    }
    assert.equal(positions[0]![0], 1, `first waiter's first position ${positions[0]}`);
    assert.equal(positions[1]![0], 2, `second waiter's first position ${positions[1]}`);
    await first.release();
    const w0 = await waiters[0]!;
    assert.ok(w0.token > first.token, "the next holder's token is larger");
    assert.deepEqual(order, [0]);
    await w0.release();
    const w1 = await waiters[1]!;
    assert.deepEqual(order, [0, 1]);
    assert.ok(w1.token > w0.token);
    await w1.release();
  });

  test("tryAcquire on a held name throws NotAcquiredError", async () => {
    const c = new Client([gw.url]);
    const nm = name();
    const l = await c.tryAcquire(nm, { ttlMs: 5000 });
    await assert.rejects(c.tryAcquire(nm, { ttlMs: 5000 }), (e) => e instanceof NotAcquiredError && e.holderExpires instanceof Date);
    await l.release();
    const again = await c.tryAcquire(nm, { ttlMs: 5000 });
    await again.release();
  });

  test("a wait timeout throws WaitTimeoutError and holds nothing", async () => {
    const c = new Client([gw.url]);
    const nm = name();
    const l = await c.acquire(nm, { ttlMs: 5000 });
    const t0 = performance.now();
    await assert.rejects(c.acquire(nm, { ttlMs: 5000, waitTimeoutMs: 700 }), WaitTimeoutError);
    assert.ok(performance.now() - t0 >= 650, "it waited the timeout");
    await l.release();
  });

  test("renewal keeps the lock past its TTL", async () => {
    const c = new Client([gw.url]);
    const nm = name();
    const l = await c.acquire(nm, { ttlMs: 2000 });
    const first = l.expires;
    await delay(4500);
    assert.equal(l.signal.aborted, false, `lost: ${l.error}`);
    assert.ok(l.expires > first + 2000, "renewals moved the deadline");
    await assert.rejects(c.tryAcquire(nm, { ttlMs: 2000 }), NotAcquiredError);
    await l.release();
  });

  test("a grant after a wait longer than the TTL is held, its deadline from a fresh renewal", async () => {
    const c = new Client([gw.url]);
    const nm = name();
    const holder = await c.acquire(nm, { ttlMs: 2000 });
    const waiting = c.acquire(nm, { ttlMs: 2000 });
    await delay(3000); // the waiter's first send time is now more than a TTL ago
    await holder.release();
    const l = await waiting;
    assert.equal(l.signal.aborted, false, `lost: ${l.error}`);
    assert.ok(l.expires > performance.now() + 1000, "the deadline counts from a renewal after the grant");
    await l.release();
  });

  test("withLock releases on return and on throw", async () => {
    const c = new Client([gw.url]);
    const nm = name();
    const got = await c.withLock(nm, async (l) => {
      assert.equal(l.signal.aborted, false);
      return l.token;
    });
    assert.equal(typeof got, "bigint");
    await assert.rejects(
      c.withLock(nm, () => {
        throw new Error("boom");
      }),
      /boom/,
    );
    const l = await c.tryAcquire(nm, { ttlMs: 5000 }); // free again
    await l.release();
  });

  test("a session lock is held on the session's lease and ends with its close", async () => {
    const c = new Client([gw.url]);
    const s = await c.openSession({ ttlMs: 3000 });
    const nm = name();
    const l = await s.acquire(nm);
    assert.ok(l.token > 0n);
    await delay(3500); // past the TTL: the keepalive keeps it
    assert.equal(l.signal.aborted, false, `lost: ${l.error}`);
    await assert.rejects(c.tryAcquire(nm, { ttlMs: 2000 }), NotAcquiredError);
    await s.close();
    assert.ok(l.signal.reason instanceof ReleasedError);
    const again = await c.tryAcquire(nm, { ttlMs: 2000 });
    await again.release();
  });
});

describe("failover and loss", () => {
  test("a call fails over from a dead endpoint to a live one", async () => {
    const c = new Client(["http://127.0.0.1:1", gw.url]);
    const l = await c.acquire(name(), { ttlMs: 5000 });
    await l.release();
  });

  test("killing the gateway aborts the lock's signal no later than its deadline", async () => {
    const own = await start();
    try {
      const c = new Client([own.url], { requestTimeoutMs: 1000 });
      const l = await c.acquire(name(), { ttlMs: 3000 });
      await own.kill();
      const deadline = l.expires;
      const at = await new Promise<number>((r) => l.signal.addEventListener("abort", () => r(performance.now()), { once: true }));
      // A timer runs a little after its time; the deadline holds the
      // margin (TTL/100 + 100 ms) that absorbs that lateness.
      assert.ok(at <= deadline + 50, `aborted ${at - deadline} ms after the deadline`);
      assert.ok(l.signal.reason instanceof LockLostError, `reason ${l.signal.reason}`);
      assert.ok((l.signal.reason as LockLostError).cause instanceof UnavailableError);
      assert.throws(() => l.throwIfLost(), LockLostError);
    } finally {
      await own.stop();
    }
  });

  test("withLock throws the loss when the lock was lost while its function ran", async () => {
    const own = await start();
    try {
      const c = new Client([own.url], { requestTimeoutMs: 1000 });
      const run = c.withLock(name(), async (l) => {
        await own.kill();
        await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
        return "done";
      }, { ttlMs: 3000 });
      await assert.rejects(run, LockLostError);
    } finally {
      await own.stop();
    }
  });
});

describe("a waiter whose gateway dies", () => {
  test("retries its request id on the next gateway and keeps its place", async () => {
    const port = await freePort();
    const a = await start("--embedded-etcd-listen", `127.0.0.1:${port}`);
    let b: Gateway | undefined;
    try {
      b = await startOn(`http://127.0.0.1:${port}`);
      const onA = new Client([a.url]);
      const bThenA = new Client([b.url, a.url], { backoffInitialMs: 50 });
      const nm = name();
      const holder = await onA.acquire(nm, { ttlMs: 5000 });
      const firstPlaces: number[] = [];
      let firstQueued!: () => void;
      const queued1 = new Promise<void>((r) => (firstQueued = r));
      const w1 = bThenA.acquire(nm, { ttlMs: 5000, onQueued: (p) => (firstPlaces.push(p), firstQueued()) });
      await queued1;
      let secondQueued!: () => void;
      const queued2 = new Promise<void>((r) => (secondQueued = r));
      const w2 = onA.acquire(nm, { ttlMs: 5000, onQueued: () => secondQueued() });
      await queued2;
      await b.kill();
      // The first waiter's stream broke; its retry on A reports its place.
      const deadline = Date.now() + 10_000;
      while (firstPlaces.length < 2 && Date.now() < deadline) await delay(50);
      assert.ok(firstPlaces.length >= 2, `places ${firstPlaces}: no report after the retry`);
      assert.equal(firstPlaces.at(-1), 1, `places ${firstPlaces}: the retry lost its place`);
      await holder.release();
      const l1 = await w1;
      let secondGranted = false;
      void w2.then(() => (secondGranted = true));
      await delay(200);
      assert.equal(secondGranted, false, "the later waiter was granted before the retried one released");
      await l1.release();
      await (await w2).release();
    } finally {
      await b?.stop();
      await a.stop();
    }
  });
});

describe("bearer tokens", () => {
  let authed: Gateway;
  const token = randomBytes(16).toString("hex"); // made per run: no secret is kept
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), "leasegate-tokens-"));
    const file = join(dir, "tokens");
    writeFileSync(file, `${token} tenant-a\n`, { mode: 0o600 });
    authed = await start("--auth-tokens", file);
  });
  after(async () => {
    await authed?.stop();
  });

  test("a wrong token is refused with UnauthenticatedError", async () => {
    const c = new Client([authed.url], { token: "wrong" });
    await assert.rejects(c.tryAcquire(name(), { ttlMs: 5000 }), UnauthenticatedError);
  });

  test("a token source is called per request and accepted", async () => {
    let calls = 0;
    const c = new Client([authed.url], {
      token: async () => {
        calls++;
        return token;
      },
    });
    const l = await c.tryAcquire(name(), { ttlMs: 5000 });
    await l.release();
    assert.ok(calls >= 2, `token source called ${calls} times`);
  });
});
