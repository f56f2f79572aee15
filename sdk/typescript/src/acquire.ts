// Acquiring: the server-streaming Acquire with its queue positions,
// TryAcquire, and the turning of a grant into a kept Lock.
import { randomUUID } from "node:crypto";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Core, LockRpc } from "./client.js";
import {
  AbortedError,
  InvalidArgumentError,
  LeasegateError,
  LockLostError,
  NotAcquiredError,
  StreamEndedError,
  UnavailableError,
  WaitTimeoutError,
  classify,
  opMessage,
  proofRefused,
  rateLimitDelay,
  reasonOf,
  retryable,
} from "./errors.js";
import { ErrorReason } from "./gen/leasegate/v1/errors_pb.js";
import type { Granted } from "./gen/leasegate/v1/lock_pb.js";
import { Keeper, deadlineOf, type Confirmation, type RenewFn } from "./keeper.js";
import { Lock, type LeaseHolder } from "./lock.js";
import { later, sleep } from "./retry.js";

/** AcquireOptions tune one acquire; every field is optional. */
export interface AcquireOptions {
  /** Lease TTL in ms (the gateway rounds it up to whole seconds). Default: the client's defaultTtlMs. */
  ttlMs?: number;
  /** Longest wait for a grant, in ms; then WaitTimeoutError. Default: wait until `signal` aborts. */
  waitTimeoutMs?: number;
  /** Called with the caller's place in line (1: next) when it changes (and first on each attempt), as the gateway reports it. */
  onQueued?: (position: number) => void;
  /** Aborting it gives up the wait (the gateway drops the caller from the queue). */
  signal?: AbortSignal;
  /** Idempotency key; a retry with it keeps the queue place. Default: a random UUID. */
  requestId?: string;
  /** Semaphore limit: the first `limit` acquirers hold at once. Default 1. */
  limit?: number;
  /** Lock-delay in ms after an expiry (not a release), 0 to 60000. Default 0. */
  lockDelayMs?: number;
  /** Re-entrant (session locks only). */
  reentrant?: boolean;
  /** Turns the background renewal off: renew with Lock.renew. Ignored for session locks. */
  manualRenew?: boolean;
}

/** What a session lends an acquire: its id and its lease on each shard. */
export interface SessionBinding {
  readonly sessionId: string;
  /** The lease on shard, or undefined when the session has none there. */
  lease(shard: string): LeaseHolder | undefined;
  /** Opens the session's lease on shard (SESSION_SHARD_MISSING), by `until` on the client's clock when given. */
  extend(shard: string, signal?: AbortSignal, until?: number): Promise<void>;
}

const MAX_SHARD_RECOVERIES = 3;

/**
 * How long past its wait deadline an acquire may take to return: the time
 * to confirm a grant that arrived at the deadline. The gateway ends the
 * wait itself; closing an attempt's stream this long after the deadline
 * only guards against a gateway or network that stalls (the Go SDK's
 * waitGrace).
 */
const WAIT_GRACE_MS = 500;

function ms(n: bigint): number {
  return Number(n);
}

function validate(op: string, o: AcquireOptions): void {
  if (o.ttlMs !== undefined && !(o.ttlMs > 0)) throw new InvalidArgumentError(opMessage(op, `ttlMs is ${o.ttlMs}; want a positive number of milliseconds`));
  if (o.waitTimeoutMs !== undefined && !(o.waitTimeoutMs > 0)) throw new InvalidArgumentError(opMessage(op, `waitTimeoutMs is ${o.waitTimeoutMs}; want a positive number of milliseconds`));
  if (o.limit !== undefined && !(Number.isInteger(o.limit) && o.limit >= 1 && o.limit <= 1000)) throw new InvalidArgumentError(opMessage(op, `limit is ${o.limit}; want an integer from 1 to 1000`));
}

/** acquireStream waits in the name's queue until granted, retrying the same request id on the next gateway. */
export async function acquire(c: Core, name: string, o: AcquireOptions, s?: SessionBinding): Promise<Lock> {
  const op = `acquire lock "${name}"`;
  c.checkOpen(op);
  validate(op, o);
  const cfg = c.cfg;
  const anchor = cfg.now();
  const rid = o.requestId ?? randomUUID();
  const waitUntil = o.waitTimeoutMs !== undefined ? anchor + o.waitTimeoutMs : undefined;
  // The latest the call may return, whatever a gateway does.
  const until = waitUntil !== undefined ? waitUntil + WAIT_GRACE_MS : undefined;
  const signal = c.signalFor(o.signal);
  const bo = c.newBackoff();
  let failures = 0;
  let recoveries = 0;
  let last: unknown;
  for (;;) {
    if (o.signal?.aborted) throw new AbortedError(opMessage(op, "aborted"), o.signal.reason);
    c.checkOpen(op, last);
    let waitMs = 0n;
    if (waitUntil !== undefined) {
      const left = Math.ceil(waitUntil - cfg.now());
      if (left <= 0) throw waitTimedOut(op, last);
      waitMs = BigInt(left);
    }
    const [i, rpc] = c.pick();
    const sent = cfg.now();
    let progressed = false;
    // Ends this attempt's stream: once it is done with, or when it stalls
    // past the wait's grace.
    const attempt = new AbortController();
    const guard = until !== undefined ? later(until - cfg.now(), () => attempt.abort()) : undefined;
    try {
      const stream = rpc.acquire(
        {
          name,
          ttlMs: BigInt(Math.ceil(o.ttlMs ?? cfg.defaultTtlMs)),
          clientId: cfg.clientId,
          waitTimeoutMs: waitMs,
          requestId: rid,
          sessionId: s?.sessionId ?? "",
          limit: o.limit ?? 0,
          reentrant: o.reentrant ?? false,
          lockDelayMs: BigInt(o.lockDelayMs ?? 0),
        },
        { signal: AbortSignal.any([signal, attempt.signal]) },
      );
      let position = -1;
      for await (const m of stream) {
        if (m.event.case === "queued") {
          progressed = true;
          // The gateway repeats the position as a heartbeat: report changes.
          const p = ms(m.event.value.position);
          if (p !== position) {
            position = p;
            o.onQueued?.(p);
          }
        } else if (m.event.case === "granted") {
          const g = m.event.value;
          if (o.signal?.aborted) {
            void letGo(c, g);
            throw new AbortedError(opMessage(op, "aborted"), o.signal.reason);
          }
          guard?.stop();
          attempt.abort();
          return await held(c, op, name, g, rid, anchor, sent, o, s, until);
        }
      }
      throw new StreamEndedError();
    } catch (err) {
      if (err instanceof LeasegateError) throw err;
      if (o.signal?.aborted) throw new AbortedError(opMessage(op, "aborted"), err);
      c.checkOpen(op, err);
      if (s && reasonOf(err) === ErrorReason.SESSION_SHARD_MISSING && recoveries < MAX_SHARD_RECOVERIES) {
        recoveries++;
        await s.extend(classify(op, err).shard, o.signal, until);
        continue;
      }
      if (waitUntil !== undefined && cfg.now() >= waitUntil) throw waitTimedOut(op, err);
      last = err;
      const delay = rateLimitDelay(err);
      let pause = 0;
      if (delay !== undefined) {
        // Waited out on the same gateway: another's budget would only hide the tenant's overload.
        pause = delay > 0 ? delay : bo.next();
        if (waitUntil !== undefined && cfg.now() + pause >= waitUntil) throw classify(op, err);
      } else {
        if (!retryable(err)) throw classify(op, err);
        c.failed(i);
        failures = progressed ? 1 : failures + 1;
        if (failures >= Math.max(3, c.endpointCount) * 2) {
          throw new UnavailableError(opMessage(op, "no gateway available", err), err);
        }
        if (failures % c.endpointCount === 0) pause = bo.next();
      }
      if (pause > 0) {
        await sleep(waitUntil !== undefined ? Math.min(pause, Math.max(waitUntil - cfg.now(), 0)) : pause, signal).catch((e) => {
          c.checkOpen(op, last);
          throw new AbortedError(opMessage(op, "aborted"), e);
        });
      }
    } finally {
      guard?.stop();
      attempt.abort();
    }
  }
}

/** waitTimedOut is the error of a wait whose timeout passed between attempts. */
function waitTimedOut(op: string, last?: unknown): LeasegateError {
  return new WaitTimeoutError(opMessage(op, "wait timed out"), last);
}

/** tryAcquire grants the lock if it is free, and never waits. */
export async function tryAcquire(c: Core, name: string, o: AcquireOptions, s?: SessionBinding): Promise<Lock> {
  const op = `try to acquire lock "${name}"`;
  c.checkOpen(op);
  validate(op, o);
  const cfg = c.cfg;
  const anchor = cfg.now();
  const rid = o.requestId ?? randomUUID();
  for (let recoveries = 0; ; recoveries++) {
    let sent = anchor;
    try {
      const resp = await c.call(
        op,
        (rpc, opts) => {
          sent = cfg.now();
          return rpc.tryAcquire(
            {
              name,
              ttlMs: BigInt(Math.ceil(o.ttlMs ?? cfg.defaultTtlMs)),
              clientId: cfg.clientId,
              requestId: rid,
              sessionId: s?.sessionId ?? "",
              limit: o.limit ?? 0,
              reentrant: o.reentrant ?? false,
              lockDelayMs: BigInt(o.lockDelayMs ?? 0),
            },
            opts,
          );
        },
        { signal: o.signal },
      );
      if (!resp.acquired || !resp.granted) {
        const holder = resp.holderExpiresAt ? timestampDate(resp.holderExpiresAt) : undefined;
        const delay = resp.delayUntil ? timestampDate(resp.delayUntil) : undefined;
        const why = delay
          ? `lock "${name}" is free, but an expired holder's lock-delay keeps it from everyone until ${delay.toISOString()}`
          : holder
            ? `lock "${name}" is held until ${holder.toISOString()}`
            : `lock "${name}" is held`;
        throw new NotAcquiredError("leasegate: " + why, holder, delay);
      }
      return await held(c, op, name, resp.granted, rid, anchor, sent, o, s);
    } catch (err) {
      if (s && err instanceof LeasegateError && err.reason === ErrorReason.SESSION_SHARD_MISSING && recoveries < MAX_SHARD_RECOVERIES) {
        await s.extend(err.shard, o.signal);
        continue;
      }
      throw err;
    }
  }
}

/** letGo releases a grant that will not be handed out, best effort: unanswered, it lapses with its lease. */
async function letGo(c: Core, g: Granted): Promise<void> {
  try {
    await c.call("release an unwanted grant", (rpc, opts) => rpc.release({ lockId: g.lockId, fencingToken: g.fencingToken }, opts));
  } catch {
    // It lapses with its lease.
  }
}

/**
 * held turns a grant into a Lock. The first deadline is the tighter of the
 * first attempt's send time plus the TTL (every lease event of the grant
 * follows it) and the granted attempt's send time plus valid_for_ms (which
 * counts from that attempt's arrival). After a long wait that leaves too
 * little, a renewal right away gives a fresh send time; `until` (a reading
 * of the client's clock: a wait's deadline plus its grace) bounds it.
 */
async function held(
  c: Core,
  op: string,
  name: string,
  g: Granted,
  rid: string,
  anchor: number,
  sent: number,
  o: AcquireOptions,
  s?: SessionBinding,
  until?: number,
): Promise<Lock> {
  if (s) {
    const lease = s.lease(g.shard);
    if (!lease) {
      void letGo(c, g);
      throw new UnavailableError(opMessage(op, `granted on shard ${g.shard}, which the session has no lease on; released it`));
    }
    // A lease lost since the grant takes the lock with it, as it should.
    return new Lock(c, name, g, rid, lease, undefined);
  }
  let ttl = ms(g.ttlMs);
  if (!(ttl > 0)) throw new UnavailableError(opMessage(op, `the gateway granted a lease with ttl_ms ${g.ttlMs}`));
  const cfg = c.cfg;
  const renew: RenewFn = async (rpc: LockRpc, opts): Promise<Confirmation> => {
    const r = await rpc.renew({ lockId: g.lockId, fencingToken: g.fencingToken }, opts);
    return { ttlMs: ms(r.ttlMs), validForMs: ms(r.validForMs) };
  };
  let deadline = deadlineOf(c, anchor, { ttlMs: ttl, validForMs: 0 });
  const valid = ms(g.validForMs);
  if (valid > 0) deadline = Math.min(deadline, deadlineOf(c, sent, { ttlMs: ttl, validForMs: valid }));
  if (cfg.now() - anchor >= ttl * cfg.renewFraction) {
    let rsent = 0;
    try {
      const conf = await c.call(
        op,
        (rpc, opts) => {
          rsent = cfg.now();
          return renew(rpc, { signal: opts.signal, timeoutMs: opts.timeoutMs ?? cfg.requestTimeoutMs });
        },
        // Not bounded by the first deadline, which a long wait may have
        // passed: the gateway kept the waiter's lease alive, and this
        // renewal's confirmation, counted from its own send time, is
        // what the lock's deadline then rests on.
        { signal: o.signal, until },
      );
      if (conf.ttlMs > 0) {
        // A TTL of 0 confirms nothing; a renewal never lengthens the TTL.
        ttl = Math.min(conf.ttlMs, ttl);
        anchor = rsent;
        deadline = deadlineOf(c, rsent, { ttlMs: ttl, validForMs: conf.validForMs });
      }
    } catch (err) {
      const cause = err instanceof LeasegateError && err.cause !== undefined ? err.cause : err;
      if (proofRefused(cause)) throw new LockLostError(opMessage(op, "lock lost", cause), classify(op, cause));
    }
  }
  if (cfg.now() >= deadline) {
    void letGo(c, g);
    throw new UnavailableError(opMessage(op, "granted, but no gateway confirmed the lease before its deadline; released it"));
  }
  const keeper = new Keeper(c, `lock "${name}"`, ttl, anchor, deadline, renew, !o.manualRenew);
  return new Lock(c, name, g, rid, keeper, keeper);
}
