// Runner of the language-neutral conformance scenarios
// (sdk/conformance/scenarios.json, rules in sdk/conformance/README.md)
// against the conformance harness (internal/conformance):
// LEASEGATE_CONFORMANCE is the harness's JSON description,
// LEASEGATE_CONFORMANCE_SCENARIOS the scenarios' path. Skipped when either
// is unset.
import { test } from "node:test";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { setTimeout as delay } from "node:timers/promises";
import {
  AbortedError,
  Client,
  ClosedError,
  InternalError,
  InvalidArgumentError,
  LimitMismatchError,
  LockLostError,
  NotAcquiredError,
  NotOwnerError,
  PermissionDeniedError,
  QuotaExceededError,
  RateLimitedError,
  ReleasedError,
  SessionLostError,
  UnauthenticatedError,
  UnavailableError,
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
  guarantee: string;
  steps: Step[];
}

const descJson = process.env.LEASEGATE_CONFORMANCE;
const scenariosPath = process.env.LEASEGATE_CONFORMANCE_SCENARIOS;
const skip = !descJson || !scenariosPath ? "LEASEGATE_CONFORMANCE and LEASEGATE_CONFORMANCE_SCENARIOS are not set" : false;

/** Bounds an await step that names no timeoutMs (rule 6). */
const defaultTimeoutMs = 10_000;

// The fields each op takes: a runner refuses an unknown op or field.
const owner = ["client", "session"];
const fields: Record<string, string[]> = {
  client: ["as", "gateways", "token", "tokenSource", "tls", "recordRenewals"],
  rotateToken: ["client", "token"],
  openSession: ["client", "as", "ttlMs"],
  closeSession: ["session", "expectError"],
  acquire: [...owner, "name", "as", "ttlMs", "waitTimeoutMs", "requestId", "manualRenew"],
  tryAcquire: [...owner, "name", "as", "ttlMs", "expectError", "maxElapsedMs"],
  awaitGranted: ["lock", "timeoutMs", "afterLossOf"],
  awaitPosition: ["lock", "position", "timeoutMs"],
  awaitError: ["lock", "error", "timeoutMs", "minElapsedMs", "maxElapsedMs"],
  expectWaiting: ["lock", "forMs"],
  release: ["lock", "expectError"],
  renew: ["lock", "minElapsedMs", "maxElapsedMs", "expectError"],
  expectHeld: ["lock"],
  expectReleased: ["lock", "timeoutMs"],
  awaitLost: ["lock", "withinMs", "error"],
  awaitLostInLease: ["lock", "gateways", "earlyMs", "timeoutMs"],
  withLock: [...owner, "name", "ttlMs", "exit", "expectError"],
  expectTokenAbove: ["lock", "thanLock", "than"],
  expectTokenExact: ["lock", "odd"],
  fenceWrite: ["lock", "expect", "resource"],
  raiseEpoch: ["atLeast"],
  alignRevision: ["next"],
  stopGateway: ["gateway"],
  startGateway: ["gateway"],
  resetRequests: ["gateways"],
  expectRequests: ["gateways", "method", "count", "atLeast", "token"],
  expectRenewals: ["lock", "forMs", "atLeast"],
};

/** The calls whose answer confirms a lock's own lease. */
const confirmingMethods = ["Acquire", "TryAcquire", "Renew"];

/** loadScenarios reads the scenario file, refusing another version, an unknown op or field, or a repeated id. */
function loadScenarios(path: string): Scenario[] {
  const doc = JSON.parse(readFileSync(path, "utf8")) as Record<string, unknown>;
  const extra = (o: Record<string, unknown>, known: string[]) => Object.keys(o).filter((k) => !known.includes(k));
  const bad = extra(doc, ["version", "scenarios"]);
  if (bad.length > 0) throw new Error(`${path}: unknown fields ${bad.join(", ")}`);
  if (doc.version !== 1) throw new Error(`${path}: version ${doc.version}; this runner reads version 1`);
  const scenarios = doc.scenarios as Scenario[];
  const seen = new Set<string>();
  for (const sc of scenarios) {
    const bad = extra(sc as unknown as Record<string, unknown>, ["id", "title", "guarantee", "steps"]);
    if (bad.length > 0) throw new Error(`${path}: scenario ${sc.id}: unknown fields ${bad.join(", ")}`);
    if (!sc.id || seen.has(sc.id)) throw new Error(`${path}: scenario id ${JSON.stringify(sc.id)} is empty or repeated`);
    seen.add(sc.id);
    for (const [i, s] of sc.steps.entries()) {
      const known = fields[s.op];
      if (!known) throw new Error(`${path}: scenario ${sc.id} step ${i}: unknown op ${JSON.stringify(s.op)}`);
      const bad = extra(s, ["op", ...known]);
      if (bad.length > 0) throw new Error(`${path}: scenario ${sc.id} step ${i} (${s.op}): unknown fields ${bad.join(", ")}`);
    }
  }
  return scenarios;
}

/** Changes wakes the waits on an entry: a position reported, the acquire ended, the loss signal. */
class Changes {
  private waiters: (() => void)[] = [];
  notify(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
  next(): Promise<void> {
    return new Promise((r) => this.waiters.push(r));
  }
}

/** A lock a scenario named: its acquire under way, or its outcome. */
interface Entry {
  name: string;
  client?: string;
  ttlMs?: number;
  startedAt: number;
  settled: boolean;
  endedAt?: number;
  lock?: Lock;
  error?: unknown;
  positions: number[];
  cursor: number;
  lostAt?: number; // performance.now() when the loss signal fired
  lostWallMs?: number; // Date.now() then, to compare with the harness's arrivals
  changes: Changes;
  done: Promise<void>;
}

class StepError extends Error {}

class BodyError extends Error {}

function check(ok: boolean, why: string): asserts ok {
  if (!ok) throw new StepError(why);
}

async function control(desc: Description, method: string, path: string, body?: unknown): Promise<any> {
  const resp = await fetch(desc.control + path, {
    method,
    headers: body === undefined ? undefined : { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  if (!resp.ok) throw new StepError(`control ${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : {};
}

// Error kinds in the README's order: when an error matches several, the first wins.
const kinds: [string, new (...a: any[]) => Error][] = [
  ["notAcquired", NotAcquiredError],
  ["waitTimeout", WaitTimeoutError],
  ["lockLost", LockLostError],
  ["released", ReleasedError],
  ["sessionLost", SessionLostError],
  ["rateLimited", RateLimitedError],
  ["quotaExceeded", QuotaExceededError],
  ["permissionDenied", PermissionDeniedError],
  ["notOwner", NotOwnerError],
  ["unauthenticated", UnauthenticatedError],
  ["internal", InternalError],
  ["invalidArgument", InvalidArgumentError],
  ["limitMismatch", LimitMismatchError],
  ["closed", ClosedError],
  ["unavailable", UnavailableError],
];

/** kindOf names err in the step language's error kinds; body holds a withLock body's own errors. */
function kindOf(err: unknown, body: { callback?: unknown; thrown?: unknown } = {}): string {
  if (err === undefined) return "no error";
  for (const [kind, cls] of kinds) if (err instanceof cls) return kind;
  if (body.callback !== undefined && err === body.callback) return "callback";
  if (body.thrown !== undefined && err === body.thrown) return "thrown";
  if (err instanceof AbortedError) return "cancelled";
  return `unexpected ${(err as Error)?.name}: ${(err as Error)?.message}`;
}

/** expectCall runs a call step: it must fail with the step's expectError, or succeed without one. */
async function expectCall<T>(s: Step, call: () => Promise<T>, body: { callback?: unknown; thrown?: unknown } = {}): Promise<T | undefined> {
  let out: T;
  try {
    out = await call();
  } catch (err) {
    const got = kindOf(err, body);
    check(s.expectError !== undefined, `failed with ${got}`);
    check(got === s.expectError, `failed with ${got}; want ${s.expectError}`);
    return undefined;
  }
  check(s.expectError === undefined, `succeeded; want ${s.expectError}`);
  return out;
}

/** until waits, woken by the entry's changes, until ok() holds, and fails after ms. */
async function until(what: string, ms: number, e: Entry, ok: () => boolean): Promise<void> {
  const ac = new AbortController();
  const timeout = delay(ms, undefined, { signal: ac.signal }).then(
    () => true,
    () => false,
  );
  try {
    while (!ok()) {
      if (await Promise.race([timeout, e.changes.next().then(() => false)])) {
        throw new StepError(`timed out after ${ms} ms waiting for ${what}`);
      }
    }
  } finally {
    ac.abort();
  }
}

/** aborted resolves once signal aborts, or rejects after ms. */
async function aborted(signal: AbortSignal, ms: number, what: string): Promise<void> {
  if (signal.aborted) return;
  const ac = new AbortController();
  try {
    const fired = await Promise.race([
      new Promise<boolean>((r) => signal.addEventListener("abort", () => r(true), { once: true, signal: ac.signal })),
      delay(ms, false, { signal: ac.signal }),
    ]);
    check(fired, `${what} within ${ms} ms`);
  } finally {
    ac.abort();
  }
}

function elapsedWithin(s: Step, took: number, what: string): void {
  if (s.minElapsedMs !== undefined) check(took >= (s.minElapsedMs as number), `${what} took ${took.toFixed(0)} ms; want at least ${s.minElapsedMs}`);
  if (s.maxElapsedMs !== undefined) check(took <= (s.maxElapsedMs as number), `${what} took ${took.toFixed(0)} ms; want at most ${s.maxElapsedMs}`);
}

async function runScenario(desc: Description, runID: string, sc: Scenario): Promise<void> {
  const clients = new Map<string, Client>();
  const sessions = new Map<string, Session>();
  const locks = new Map<string, Entry>();
  const entries: Entry[] = [];
  const tokens = new Map<string, { current: string }>(); // clients with a token source
  const renewals = new Map<string, RenewLog>(); // clients with recordRenewals
  const end = new AbortController(); // ends the acquires a failed scenario leaves waiting
  const prefix = `${runID}/${sc.id}/`;
  const timeoutOf = (s: Step) => (s.timeoutMs as number | undefined) ?? defaultTimeoutMs;
  const entry = (k: unknown) => {
    const e = locks.get(k as string);
    check(e !== undefined, `no lock ${k}`);
    return e;
  };
  const held = (k: unknown) => {
    const e = entry(k);
    check(e.lock !== undefined, `lock ${k} is not granted (${e.settled ? kindOf(e.error) : "still waiting"})`);
    return e.lock;
  };
  const ownerOf = (s: Step): Client | Session => {
    const o = s.session !== undefined ? sessions.get(s.session as string) : clients.get(s.client as string);
    check(o !== undefined, s.session !== undefined ? `no session ${s.session}` : `no client ${s.client}`);
    return o;
  };
  const record = (as: string | undefined, s: Step, p: (e: Entry) => Promise<Lock>): Entry => {
    const e: Entry = {
      name: prefix + (s.name as string),
      client: s.client as string | undefined,
      ttlMs: s.ttlMs as number | undefined,
      startedAt: performance.now(),
      settled: false,
      positions: [],
      cursor: 0,
      changes: new Changes(),
      done: Promise.resolve(),
    };
    const settle = () => {
      e.endedAt = performance.now();
      e.settled = true;
      e.changes.notify();
    };
    e.done = p(e).then(
      (l) => {
        e.lock = l;
        const log = e.client === undefined ? undefined : renewals.get(e.client);
        if (log) log.lock = l;
        const lost = () => {
          e.lostAt = performance.now();
          e.lostWallMs = Date.now();
          e.changes.notify();
        };
        if (l.signal.aborted) lost();
        else l.signal.addEventListener("abort", lost, { once: true });
        settle();
      },
      (err) => {
        e.error = err;
        settle();
      },
    );
    if (as !== undefined) locks.set(as, e);
    entries.push(e);
    return e;
  };
  // lastConfirmed is the arrival (Unix ms) at the gateways' fronts of the latest
  // confirming request they answered without error since their reset.
  const lastConfirmed = async (gateways: number[]) => {
    let last = 0;
    for (const g of gateways) {
      const r = await control(desc, "GET", `/gateways/${g}/requests`);
      for (const [path, as] of Object.entries((r.arrivals ?? {}) as Record<string, { atMs: number; ok: boolean }[]>)) {
        if (!confirmingMethods.some((m) => path.endsWith("/" + m))) continue;
        for (const a of as) if (a.ok) last = Math.max(last, a.atMs);
      }
    }
    check(last > 0, `gateways ${gateways} answered no ${confirmingMethods} without error since their reset`);
    return last;
  };

  const step = async (s: Step): Promise<void> => {
    switch (s.op) {
      case "client": {
        const tok = s.token as string;
        let token: string | undefined | (() => string) = tok === "none" ? undefined : desc.tokens[tok];
        check(tok === "none" || token !== undefined, `token ${tok}: want none or one of the description's tokens`);
        if (s.tokenSource && token !== undefined) {
          const box = { current: token };
          tokens.set(s.as as string, box);
          token = () => box.current;
        }
        let endpoints = ((s.gateways as number[] | undefined) ?? []).map((g) => {
          check(desc.gateways[g] !== undefined, `no gateway ${g}`);
          return desc.gateways[g];
        });
        let tls: { ca: Buffer; cert?: Buffer; key?: Buffer } | undefined;
        if (s.tls !== undefined) {
          check(endpoints.length === 0, `client with tls ${s.tls}: its endpoint is the TLS gateway; want no gateways`);
          check(s.tls === "cert" || s.tls === "noCert", `tls ${s.tls}: want cert or noCert`);
          endpoints = [desc.tls.gateway];
          tls = { ca: readFileSync(desc.tls.ca) };
          if (s.tls === "cert") Object.assign(tls, { cert: readFileSync(desc.tls.cert), key: readFileSync(desc.tls.key) });
        }
        let onRenew: ((sent: number, error?: unknown) => void) | undefined;
        if (s.recordRenewals) {
          const log: RenewLog = { seen: [] };
          renewals.set(s.as as string, log);
          onRenew = (sent, error) => log.seen.push({ sent, expires: log.lock?.expires ?? NaN, error });
        }
        clients.set(s.as as string, new Client(endpoints, { token, tls, onRenew }));
        return;
      }
      case "rotateToken": {
        const box = tokens.get(s.client as string);
        check(box !== undefined, `client ${s.client} has no token source`);
        const t = desc.tokens[s.token as string];
        check(t !== undefined, `no token ${s.token} in the description`);
        box.current = t;
        return;
      }
      case "openSession": {
        const c = clients.get(s.client as string);
        check(c !== undefined, `no client ${s.client}`);
        sessions.set(s.as as string, await c.openSession(s.ttlMs === undefined ? {} : { ttlMs: s.ttlMs as number }));
        return;
      }
      case "closeSession": {
        const sess = sessions.get(s.session as string);
        check(sess !== undefined, `no session ${s.session}`);
        await expectCall(s, () => sess.close());
        return;
      }
      case "acquire": {
        const o = ownerOf(s);
        record(s.as as string, s, (e) =>
          o.acquire(e.name, {
            ttlMs: s.ttlMs as number | undefined,
            waitTimeoutMs: s.waitTimeoutMs as number | undefined,
            requestId: s.requestId !== undefined ? prefix + (s.requestId as string) : undefined,
            manualRenew: s.manualRenew as boolean | undefined,
            onQueued: (p) => {
              e.positions.push(p);
              e.changes.notify();
            },
            signal: end.signal,
          }),
        );
        return;
      }
      case "tryAcquire": {
        const o = ownerOf(s);
        const e = record(s.as as string | undefined, s, (e) => o.tryAcquire(e.name, { ttlMs: s.ttlMs as number | undefined }));
        await e.done;
        await expectCall(s, async () => {
          if (!e.lock) throw e.error;
        });
        elapsedWithin(s, e.endedAt! - e.startedAt, "tryAcquire");
        return;
      }
      case "awaitGranted": {
        const e = entry(s.lock);
        await until("the acquire to end", timeoutOf(s), e, () => e.settled);
        check(e.lock !== undefined, `the acquire failed with ${kindOf(e.error)}`);
        if (s.afterLossOf !== undefined) {
          const lost = entry(s.afterLossOf);
          check(
            lost.lostAt !== undefined && lost.lostAt < e.endedAt!,
            `granted at ${e.endedAt}, before ${s.afterLossOf}'s loss signal (${lost.lostAt ?? "not fired"})`,
          );
        }
        return;
      }
      case "awaitPosition": {
        const e = entry(s.lock);
        const want = s.position as number;
        await until(`position ${want} (reported: ${e.positions})`, timeoutOf(s), e, () => {
          const at = e.positions.indexOf(want, e.cursor);
          if (at >= 0) {
            e.cursor = at + 1;
            return true;
          }
          check(!e.settled, `the acquire ended (${e.lock ? "granted" : kindOf(e.error)}) before position ${want}; reported: ${e.positions}`);
          return false;
        });
        return;
      }
      case "awaitError": {
        const e = entry(s.lock);
        await until("the acquire to end", timeoutOf(s), e, () => e.settled);
        check(e.lock === undefined, `granted; want error ${s.error}`);
        check(kindOf(e.error) === s.error, `failed with ${kindOf(e.error)}; want ${s.error}`);
        elapsedWithin(s, e.endedAt! - e.startedAt, "the acquire");
        return;
      }
      case "expectWaiting": {
        const e = entry(s.lock);
        await until(`${s.forMs} ms`, s.forMs as number, e, () => e.settled).then(
          () => check(false, `the acquire ended (${e.lock ? "granted" : kindOf(e.error)}); want it still waiting`),
          (err) => {
            if (!(err instanceof StepError) || e.settled) throw err;
          },
        );
        return;
      }
      case "release": {
        const l = held(s.lock);
        await expectCall(s, () => l.release());
        return;
      }
      case "renew": {
        const l = held(s.lock);
        const t0 = performance.now();
        await expectCall(s, () => l.renew());
        elapsedWithin(s, performance.now() - t0, "renew");
        return;
      }
      case "expectHeld": {
        const l = held(s.lock);
        check(!l.signal.aborted, `not held: ${kindOf(l.signal.reason)}`);
        return;
      }
      case "expectReleased": {
        const l = held(s.lock);
        await aborted(l.signal, timeoutOf(s), "the done signal fires");
        check(kindOf(l.signal.reason) === "released", `ended with ${kindOf(l.signal.reason)}; want released`);
        return;
      }
      case "awaitLost": {
        const l = held(s.lock);
        const e = entry(s.lock);
        check(s.withinMs !== undefined, "awaitLost needs withinMs");
        const deadline = l.expires;
        const limit = deadline + (s.withinMs as number);
        await aborted(l.signal, Math.max(limit - performance.now(), 0) + 5000, `the loss signal fires, 5 s past the deadline`);
        const want = (s.error as string | undefined) ?? "lockLost";
        check(kindOf(l.signal.reason) === want, `lost with ${kindOf(l.signal.reason)}; want ${want}`);
        check(e.lostAt! <= limit, `loss signalled ${(e.lostAt! - deadline).toFixed(0)} ms after its conservative deadline; want at most ${s.withinMs}`);
        return;
      }
      case "awaitLostInLease": {
        const l = held(s.lock);
        const e = entry(s.lock);
        const gateways = s.gateways as number[] | undefined;
        check(e.ttlMs !== undefined && s.earlyMs !== undefined && (gateways?.length ?? 0) > 0, "awaitLostInLease needs gateways, earlyMs and a lock with ttlMs");
        await aborted(l.signal, timeoutOf(s), "the loss signal fires");
        const lease = (await lastConfirmed(gateways!)) + e.ttlMs;
        const lost = e.lostWallMs!;
        check(lost <= lease, `loss signalled ${lost - lease} ms after the lease could have lapsed in etcd (last confirmed arrival + ${e.ttlMs} ms)`);
        check(lost >= lease - (s.earlyMs as number), `loss signalled ${lease - lost} ms before the lease could have lapsed in etcd; want at most ${s.earlyMs}`);
        return;
      }
      case "withLock": {
        const o = ownerOf(s);
        const body = { callback: new BodyError("the body's own error"), thrown: new BodyError("the body throws") };
        const cancel = new AbortController();
        let ran = false;
        await expectCall(
          s,
          () =>
            o.withLock(
              prefix + (s.name as string),
              async (_l, signal) => {
                ran = true;
                switch (s.exit) {
                  case "return":
                    return;
                  case "error":
                    return Promise.reject(body.callback);
                  case "throw":
                    throw body.thrown;
                  case "cancel":
                    // The body's signal ends the way the SDK ends it; its reason is the error.
                    cancel.abort();
                    await aborted(signal, defaultTimeoutMs, "the body's signal ends after the caller cancelled");
                    signal.throwIfAborted();
                    throw new StepError("the body's signal is aborted without a reason");
                }
                throw new StepError(`exit ${s.exit}: want return, error, throw or cancel`);
              },
              { ttlMs: s.ttlMs as number | undefined, signal: cancel.signal },
            ),
          body,
        );
        check(ran, "the body never ran");
        return;
      }
      case "expectTokenAbove": {
        const l = held(s.lock);
        check(s.thanLock !== undefined || s.than !== undefined, "expectTokenAbove needs thanLock or than");
        const than = s.thanLock !== undefined ? held(s.thanLock).token : BigInt(s.than as string);
        check(l.token > than, `${l.token} is not above ${than}`);
        return;
      }
      case "expectTokenExact": {
        const l = held(s.lock);
        const h = await control(desc, "GET", `/holder?name=${encodeURIComponent(l.name)}`);
        check(h.held === true && h.token === l.token.toString(), `the SDK's token is ${l.token}; the gateway reads ${JSON.stringify(h)}`);
        if (s.odd) check(l.token % 2n === 1n, `token ${l.token} is even; the scenario arranged an odd one`);
        return;
      }
      case "fenceWrite": {
        const l = held(s.lock);
        const resource = s.resource !== undefined ? prefix + (s.resource as string) : l.name;
        const r = await control(desc, "POST", "/fence", { resource, token: l.token.toString() });
        check(r.accepted === (s.expect === "accepted"), `write under token ${l.token}: ${JSON.stringify(r)}; want ${s.expect}`);
        return;
      }
      case "raiseEpoch": {
        const r = await control(desc, "POST", "/epoch", { atLeast: s.atLeast });
        check(r.epoch >= (s.atLeast as number), `epoch ${r.epoch} after raising to at least ${s.atLeast}`);
        return;
      }
      case "alignRevision":
        await control(desc, "POST", "/revision", { next: s.next });
        return;
      case "stopGateway":
      case "startGateway":
        check(s.gateway !== undefined, `${s.op} needs a gateway`);
        await control(desc, "POST", `/gateways/${s.gateway}/${s.op === "stopGateway" ? "stop" : "start"}`);
        return;
      case "resetRequests":
        for (const g of s.gateways as number[]) await control(desc, "POST", `/gateways/${g}/requests/reset`);
        return;
      case "expectRequests": {
        check((s.count === undefined) !== (s.atLeast === undefined) && s.method !== undefined, "expectRequests needs a method and a count or atLeast");
        let n = 0;
        for (const g of s.gateways as number[]) {
          const r = await control(desc, "GET", `/gateways/${g}/requests`);
          const paths = s.token !== undefined ? (r.byToken?.[s.token as string] ?? {}) : (r.byPath ?? {});
          for (const [path, c] of Object.entries(paths)) if (path.endsWith("/" + (s.method as string))) n += c as number;
        }
        if (s.count !== undefined) check(n === s.count, `${n} ${s.method} requests (token ${s.token ?? "any"}); want ${s.count}`);
        else check(n >= (s.atLeast as number), `${n} ${s.method} requests (token ${s.token ?? "any"}); want at least ${s.atLeast}`);
        return;
      }
      case "expectRenewals": {
        const e = entry(s.lock);
        const l = held(s.lock);
        const log = e.client === undefined ? undefined : renewals.get(e.client);
        check(log !== undefined && e.ttlMs !== undefined, "expectRenewals needs a client with recordRenewals and a lock with ttlMs");
        const from = log.seen.length;
        await aborted(l.signal, s.forMs as number, "").catch(() => {}); // the lock left alone for forMs, unless lost first
        check(!l.signal.aborted, `lost while held: ${kindOf(l.signal.reason)}`);
        const confirmed = log.seen.slice(from).filter((r) => r.error === undefined);
        for (const r of confirmed) {
          check(r.expires <= r.sent + e.ttlMs, `a renewal sent at ${r.sent} left the deadline at ${r.expires}, past send time + ${e.ttlMs} ms`);
        }
        check(confirmed.length >= (s.atLeast as number), `${confirmed.length} renewals confirmed in ${s.forMs} ms; want at least ${s.atLeast}`);
        return;
      }
    }
    throw new StepError(`unknown op ${s.op}`);
  };

  try {
    for (const [i, s] of sc.steps.entries()) {
      try {
        await step(s);
      } catch (err) {
        throw new Error(`scenario ${sc.id} step ${i} (${s.op}): ${(err as Error).message}`, { cause: err });
      }
    }
  } finally {
    end.abort();
    for (const e of entries) {
      await Promise.race([e.done, delay(2000)]);
      await e.lock?.release().catch(() => {});
    }
    for (const s of sessions.values()) await s.close().catch(() => {});
    for (const c of clients.values()) c.close();
    await control(desc, "POST", "/reset");
  }
}

test("conformance scenarios", { skip }, async (t) => {
  const desc = JSON.parse(descJson!) as Description;
  const scenarios = loadScenarios(scenariosPath!);
  const runID = `conf-ts-${randomBytes(6).toString("hex")}`;
  await control(desc, "POST", "/reset");
  for (const sc of scenarios) {
    await t.test(`${sc.id}: ${sc.title}`, () => runScenario(desc, runID, sc));
  }
});
