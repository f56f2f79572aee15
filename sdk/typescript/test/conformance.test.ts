// Runner of the language-neutral conformance scenarios
// (sdk/conformance/scenarios.json) against the conformance harness
// (internal/conformance): LEASEGATE_CONFORMANCE is the harness's JSON
// description, LEASEGATE_CONFORMANCE_SCENARIOS the scenarios' path.
// Skipped when either is unset.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { setTimeout as delay } from "node:timers/promises";
import {
  AbortedError,
  Client,
  InvalidArgumentError,
  LockLostError,
  NotAcquiredError,
  RateLimitedError,
  ReleasedError,
  UnauthenticatedError,
  WaitTimeoutError,
  type Lock,
  type Session,
} from "../src/index.js";

interface Description {
  gateways: string[];
  control: string;
  tokens: Record<string, string>;
  limited: { gateway: number; renewEveryMs: number };
  tls: { gateway: string; ca: string; cert: string; key: string };
}

/** A client's renewals as its onRenew saw them, with the deadline of its latest lock right after each. */
interface RenewLog {
  lock?: Lock;
  seen: { sent: number; expires: number; error?: unknown }[];
}

type Step = Record<string, unknown> & { op: string };

interface Scenario {
  id: string;
  title: string;
  steps: Step[];
}

const descJson = process.env.LEASEGATE_CONFORMANCE;
const scenariosPath = process.env.LEASEGATE_CONFORMANCE_SCENARIOS;
const skip = !descJson || !scenariosPath ? "LEASEGATE_CONFORMANCE and LEASEGATE_CONFORMANCE_SCENARIOS are not set" : false;

/** A lock a scenario named: its acquire under way, or its outcome. */
interface Entry {
  name: string;
  client?: string;
  ttlMs?: number;
  startedAt: number;
  settled: boolean;
  lock?: Lock;
  error?: unknown;
  positions: number[];
  cursor: number;
  grantedAt?: number;
  lostAt?: number;
  done: Promise<void>;
}

class BodyError extends Error {}

async function control(desc: Description, method: string, path: string, body?: unknown): Promise<any> {
  const resp = await fetch(desc.control + path, {
    method,
    headers: body === undefined ? undefined : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`control ${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

function kindOf(err: unknown, body: Record<string, unknown>): string {
  if (err instanceof NotAcquiredError) return "notAcquired";
  if (err instanceof WaitTimeoutError) return "waitTimeout";
  if (err instanceof RateLimitedError) return "rateLimited";
  if (err instanceof UnauthenticatedError) return "unauthenticated";
  if (err instanceof InvalidArgumentError) return "invalidArgument";
  if (err instanceof LockLostError) return "lockLost";
  if (err instanceof ReleasedError) return "released";
  if (err instanceof AbortedError) return "cancelled";
  if (err === body.callback) return "callback";
  if (err === body.thrown) return "thrown";
  return `unexpected ${(err as Error)?.name}: ${(err as Error)?.message}`;
}

async function until(what: string, ms: number, ok: () => boolean): Promise<void> {
  const end = performance.now() + ms;
  while (!ok()) {
    if (performance.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await delay(10);
  }
}

async function runScenario(desc: Description, sc: Scenario): Promise<void> {
  await control(desc, "POST", "/reset");
  const clients = new Map<string, Client>();
  const sessions = new Map<string, Session>();
  const locks = new Map<string, Entry>();
  const tokens = new Map<string, { current: string }>(); // clients with a token source
  const renewals = new Map<string, RenewLog>(); // clients with recordRenewals
  const run = `${sc.id}-${process.pid}-${Date.now()}`;
  const scoped = (n: string) => `${run}/${n}`;
  const entry = (k: unknown) => {
    const e = locks.get(k as string);
    if (!e) throw new Error(`no lock ${k}`);
    return e;
  };
  const held = (k: unknown) => {
    const e = entry(k);
    if (!e.lock) throw new Error(`lock ${k} is not granted (${e.error})`);
    return e.lock;
  };
  const owner = (s: Step) => (s.session ? sessions.get(s.session as string)! : clients.get(s.client as string)!);
  const record = (as: string | undefined, s: Step, p: (e: Entry) => Promise<Lock>): Entry => {
    const e: Entry = {
      name: s.name as string,
      client: s.client as string | undefined,
      ttlMs: s.ttlMs as number | undefined,
      startedAt: performance.now(),
      settled: false,
      positions: [],
      cursor: 0,
      done: Promise.resolve(),
    };
    e.done = p(e).then(
      (l) => {
        e.lock = l;
        const log = e.client === undefined ? undefined : renewals.get(e.client);
        if (log) log.lock = l;
        e.grantedAt = performance.now();
        l.signal.addEventListener("abort", () => (e.lostAt = performance.now()), { once: true });
        e.settled = true;
      },
      (err) => {
        e.error = err;
        e.settled = true;
      },
    );
    if (as) locks.set(as, e);
    return e;
  };
  try {
    for (const [i, s] of sc.steps.entries()) {
      const where = `step ${i} ${JSON.stringify(s)}`;
      try {
        switch (s.op) {
          case "client": {
            const tok = s.token as string;
            let token: string | undefined | (() => string) = tok === "none" ? undefined : desc.tokens[tok];
            if (tok !== "none" && token === undefined) throw new Error(`no token ${tok} in the description`);
            if (s.tokenSource && token !== undefined) {
              const box = { current: token };
              tokens.set(s.as as string, box);
              token = () => box.current;
            }
            let endpoints = ((s.gateways as number[] | undefined) ?? []).map((g) => desc.gateways[g]!);
            let tls: { ca: Buffer; cert?: Buffer; key?: Buffer } | undefined;
            if (s.tls) {
              assert.equal(endpoints.length, 0, "a tls client's endpoint is the TLS gateway");
              endpoints = [desc.tls.gateway];
              tls = { ca: readFileSync(desc.tls.ca) };
              if (s.tls === "cert") Object.assign(tls, { cert: readFileSync(desc.tls.cert), key: readFileSync(desc.tls.key) });
              else assert.equal(s.tls, "noCert");
            }
            let onRenew: ((sent: number, error?: unknown) => void) | undefined;
            if (s.recordRenewals) {
              const log: RenewLog = { seen: [] };
              renewals.set(s.as as string, log);
              onRenew = (sent, error) => log.seen.push({ sent, expires: log.lock?.expires ?? NaN, error });
            }
            clients.set(s.as as string, new Client(endpoints, { token, tls, onRenew, backoffInitialMs: 50 }));
            break;
          }
          case "rotateToken": {
            const box = tokens.get(s.client as string);
            if (!box) throw new Error(`client ${s.client} has no token source`);
            const t = desc.tokens[s.token as string];
            if (t === undefined) throw new Error(`no token ${s.token} in the description`);
            box.current = t;
            break;
          }
          case "alignRevision":
            await control(desc, "POST", "/revision", { next: s.next });
            break;
          case "expectRenewals": {
            const e = entry(s.lock);
            const l = held(s.lock);
            const log = e.client === undefined ? undefined : renewals.get(e.client);
            if (!log || e.ttlMs === undefined) throw new Error("expectRenewals needs a client with recordRenewals and a lock with ttlMs");
            const from = log.seen.length;
            await Promise.race([delay(s.forMs as number), new Promise((r) => l.signal.addEventListener("abort", r, { once: true }))]);
            assert.equal(l.signal.aborted, false, `lost while held: ${l.signal.reason}`);
            const confirmed = log.seen.slice(from).filter((r) => r.error === undefined);
            for (const r of confirmed) {
              assert.ok(r.expires <= r.sent + e.ttlMs, `a renewal sent at ${r.sent} left the deadline at ${r.expires}, past send time + ${e.ttlMs} ms`);
            }
            assert.ok(confirmed.length >= (s.atLeast as number), `${confirmed.length} renewals confirmed; want at least ${s.atLeast}`);
            break;
          }
          case "openSession":
            sessions.set(s.as as string, await clients.get(s.client as string)!.openSession({ ttlMs: s.ttlMs as number }));
            break;
          case "closeSession":
            await sessions.get(s.session as string)!.close();
            break;
          case "acquire": {
            const o = owner(s);
            record(s.as as string, s, (e) =>
              o.acquire(scoped(s.name as string), {
                ttlMs: s.ttlMs as number | undefined,
                waitTimeoutMs: s.waitTimeoutMs as number | undefined,
                requestId: s.requestId ? `${run}-${s.requestId}` : undefined,
                manualRenew: s.manualRenew as boolean | undefined,
                onQueued: (p) => e.positions.push(p),
              }),
            );
            break;
          }
          case "tryAcquire": {
            const o = owner(s);
            const e = record(s.as as string | undefined, s, () => o.tryAcquire(scoped(s.name as string), { ttlMs: s.ttlMs as number | undefined }));
            await e.done;
            const elapsed = performance.now() - e.startedAt;
            if (s.expectError) assert.equal(kindOf(e.error, {}), s.expectError);
            else assert.ok(e.lock, `tryAcquire failed: ${e.error}`);
            if (s.maxElapsedMs !== undefined) assert.ok(elapsed <= (s.maxElapsedMs as number), `took ${elapsed} ms`);
            break;
          }
          case "awaitGranted": {
            const e = entry(s.lock);
            await Promise.race([e.done, delay((s.timeoutMs as number | undefined) ?? 10_000)]);
            assert.ok(e.lock, `not granted: ${e.error ?? "still waiting"}`);
            if (s.afterLossOf) {
              const lost = entry(s.afterLossOf);
              assert.ok(lost.lostAt !== undefined && lost.lostAt <= e.grantedAt!, `granted before ${s.afterLossOf} was told it lost the lock`);
            }
            break;
          }
          case "awaitPosition": {
            const e = entry(s.lock);
            await until(`position ${s.position}`, 10_000, () => {
              const at = e.positions.indexOf(s.position as number, e.cursor);
              if (at < 0) return false;
              e.cursor = at + 1;
              return true;
            });
            break;
          }
          case "expectWaiting": {
            const e = entry(s.lock);
            await delay(s.forMs as number);
            assert.equal(e.settled, false, `settled: ${e.lock ? "granted" : e.error}`);
            break;
          }
          case "release":
            await held(s.lock).release();
            break;
          case "expectReleased":
            assert.ok(held(s.lock).signal.reason instanceof ReleasedError, `reason ${held(s.lock).signal.reason}`);
            break;
          case "expectHeld":
            assert.equal(held(s.lock).signal.aborted, false, `ended: ${held(s.lock).signal.reason}`);
            break;
          case "expectTokenAbove": {
            const than = s.thanLock ? held(s.thanLock).token : BigInt(s.than as string);
            assert.ok(held(s.lock).token > than, `${held(s.lock).token} is not above ${than}`);
            break;
          }
          case "expectTokenExact": {
            const l = held(s.lock);
            const h = await control(desc, "GET", `/holder?name=${encodeURIComponent(l.name)}`);
            assert.equal(l.token.toString(), h.token);
            if (s.odd) assert.equal(l.token % 2n, 1n, `token ${l.token} is even; the scenario arranged an odd one`);
            break;
          }
          case "awaitError": {
            const e = entry(s.lock);
            await Promise.race([e.done, delay((s.timeoutMs as number | undefined) ?? 10_000)]);
            assert.ok(e.settled && !e.lock, `no error: ${e.lock ? "granted" : "still waiting"}`);
            assert.equal(kindOf(e.error, {}), s.error);
            const took = performance.now() - e.startedAt;
            if (s.minElapsedMs !== undefined) assert.ok(took >= (s.minElapsedMs as number), `ended after ${took} ms`);
            if (s.maxElapsedMs !== undefined) assert.ok(took <= (s.maxElapsedMs as number), `ended after ${took} ms`);
            break;
          }
          case "awaitLost": {
            const l = held(s.lock);
            const deadline = l.expires;
            if (!l.signal.aborted) await new Promise((r) => l.signal.addEventListener("abort", r, { once: true }));
            const e = entry(s.lock);
            assert.ok(e.lostAt! <= deadline + ((s.withinMs as number | undefined) ?? 0), `lost ${e.lostAt! - deadline} ms after the deadline`);
            assert.equal(kindOf(l.signal.reason, {}), s.error);
            break;
          }
          case "fenceWrite": {
            const l = held(s.lock);
            const r = await control(desc, "POST", "/fence", { resource: `${run}/${entry(s.lock).name}`, token: l.token.toString() });
            assert.equal(r.accepted, s.expect === "accepted", `fence answered ${JSON.stringify(r)}`);
            break;
          }
          case "stopGateway":
            await control(desc, "POST", `/gateways/${s.gateway}/stop`);
            break;
          case "startGateway":
            await control(desc, "POST", `/gateways/${s.gateway}/start`);
            break;
          case "resetRequests":
            for (const g of s.gateways as number[]) await control(desc, "POST", `/gateways/${g}/requests/reset`);
            break;
          case "expectRequests": {
            let n = 0;
            for (const g of s.gateways as number[]) {
              const r = await control(desc, "GET", `/gateways/${g}/requests`);
              const paths = s.token ? (r.byToken?.[s.token as string] ?? {}) : (r.byPath ?? {});
              for (const [path, c] of Object.entries(paths)) if (path.endsWith("/" + (s.method as string))) n += c as number;
            }
            if (s.count !== undefined) assert.equal(n, s.count, `${s.method} requests (token ${s.token ?? "any"})`);
            else assert.ok(n >= (s.atLeast as number), `${n} ${s.method} requests; want at least ${s.atLeast}`);
            break;
          }
          case "renew": {
            const t0 = performance.now();
            await held(s.lock).renew();
            const took = performance.now() - t0;
            if (s.minElapsedMs !== undefined) assert.ok(took >= (s.minElapsedMs as number), `renew took ${took} ms`);
            if (s.maxElapsedMs !== undefined) assert.ok(took <= (s.maxElapsedMs as number), `renew took ${took} ms`);
            break;
          }
          case "withLock": {
            const o = owner(s);
            const body = { callback: new BodyError("callback"), thrown: new BodyError("thrown") };
            const cancel = new AbortController();
            let err: unknown;
            try {
              await o.withLock(
                scoped(s.name as string),
                async (_l, signal) => {
                  switch (s.exit) {
                    case "return":
                      return;
                    case "error":
                      return Promise.reject(body.callback);
                    case "throw":
                      throw body.thrown;
                    case "cancel":
                      cancel.abort();
                      await new Promise((r) => (signal.aborted ? r(null) : signal.addEventListener("abort", r, { once: true })));
                      throw new AbortedError("leasegate: the caller cancelled", signal.reason);
                  }
                },
                { ttlMs: s.ttlMs as number | undefined, signal: cancel.signal },
              );
            } catch (e) {
              err = e;
            }
            if (s.expectError) assert.equal(kindOf(err, body), s.expectError);
            else assert.equal(err, undefined);
            break;
          }
          case "raiseEpoch":
            await control(desc, "POST", "/epoch", { atLeast: s.atLeast });
            break;
          default:
            throw new Error(`unknown op ${s.op}`);
        }
      } catch (err) {
        throw new Error(`${sc.id}: ${where}: ${(err as Error).message}`, { cause: err });
      }
    }
  } finally {
    for (const e of locks.values()) {
      await Promise.race([e.done, delay(2000)]); // a wait left behind by a failed step ends with its lease
      await e.lock?.release().catch(() => {});
    }
    for (const s of sessions.values()) await s.close().catch(() => {});
    for (const c of clients.values()) c.close();
  }
}

test("conformance scenarios", { skip }, async (t) => {
  const desc = JSON.parse(descJson!) as Description;
  const doc = JSON.parse(readFileSync(scenariosPath!, "utf8")) as { scenarios: Scenario[] };
  for (const sc of doc.scenarios) {
    await t.test(`${sc.id}: ${sc.title}`, () => runScenario(desc, sc));
  }
});
