// Session: leases that many locks of one client share, one per shard,
// renewed together by one keepalive call. Each shard's lease is lost on
// its own: a shard that fails costs the session only the locks on it.
import type { Closable, Core } from "./client.js";
import { ClosedError, LeasegateError, LockLostError, ReleasedError, SessionLostError, classify, opMessage, proofRefused, rateLimitDelay } from "./errors.js";
import { ErrorReason } from "./gen/leasegate/v1/errors_pb.js";
import { ShardLeaseState, type SessionShard } from "./gen/leasegate/v1/lock_pb.js";
import { Keeper, deadlineOf } from "./keeper.js";
import { renewIntervalFor } from "./options.js";
import { later, type Timer } from "./retry.js";
import type { LeaseHolder, Lock } from "./lock.js";
import { runLocked } from "./withlock.js";
import { acquire, tryAcquire, type AcquireOptions, type SessionBinding } from "./acquire.js";

/**
 * Session shares one lease per shard among its locks. Its keepalive runs
 * every TTL × renewFraction; a shard's lease whose deadline passes
 * unconfirmed, or that a gateway reports LOST, ends the locks on that
 * shard (their signal's reason is a LockLostError caused by a
 * SessionLostError) and is never renewed again, so it lapses in etcd too.
 * A shard's answer of LIVE with a TTL of 0 or less confirms nothing. The
 * client's close ends the session.
 */
export class Session implements SessionBinding, Closable {
  private id: string;
  private readonly leases = new Map<string, Keeper>();
  private readonly ctl = new AbortController();
  private timer: Timer | undefined;
  private anchor: number;
  private keeping = false;
  private untrack: () => void = () => {};

  private constructor(
    private readonly c: Core,
    id: string,
    /** The session's TTL in ms. */ readonly ttlMs: number,
    anchor: number,
  ) {
    this.id = id;
    this.anchor = anchor;
  }

  /** @internal open opens a session of ttlMs. */
  static async open(c: Core, ttlMs: number, signal?: AbortSignal): Promise<Session> {
    const op = "open session";
    c.checkOpen(op);
    let sent = 0;
    const resp = await c.call(
      op,
      (rpc, o) => {
        sent = c.cfg.now();
        return rpc.openSession({ clientId: c.cfg.clientId, ttlMs: BigInt(Math.ceil(ttlMs)) }, o);
      },
      { signal },
    );
    const s = new Session(c, resp.sessionId, Number(resp.ttlMs) || ttlMs, sent);
    s.apply(sent, resp.shards);
    s.schedule();
    s.untrack = c.track(s);
    return s;
  }

  /** The session id (it changes when the session extends to more shards). */
  get sessionId(): string {
    return this.id;
  }

  /** Aborted, with the cause, when the session is closed or every lease is lost. */
  get signal(): AbortSignal {
    return this.ctl.signal;
  }

  /** @internal lease returns the live lease on shard. */
  lease(shard: string): LeaseHolder | undefined {
    const k = this.leases.get(shard);
    return k && !k.signal.aborted ? k : undefined;
  }

  /** apply credits a session call's per-shard outcomes, sent at `sent`. */
  private apply(sent: number, shards: SessionShard[]): void {
    for (const sh of shards) {
      const op = `session lease on shard ${sh.shard}`;
      if (confirmed(sh)) {
        // Every lease of the session was granted with its TTL.
        const conf = { ttlMs: Math.min(Number(sh.ttlMs), this.ttlMs), validForMs: Number(sh.validForMs) };
        const k = this.leases.get(sh.shard);
        if (k) {
          k.credit(sent, conf);
        } else if (!this.ctl.signal.aborted) {
          const k2 = new Keeper(this.c, op, conf.ttlMs, sent, deadlineOf(this.c, sent, conf), undefined, false);
          this.leases.set(sh.shard, k2);
        }
      } else if (sh.state === ShardLeaseState.LOST) {
        const sl = new SessionLostError(opMessage(op, "session lost"));
        this.leases.get(sh.shard)?.lose(new LockLostError(opMessage(op, "lock lost", sl), sl));
      }
    }
  }

  private live(): string[] {
    return [...this.leases].filter(([, k]) => !k.signal.aborted).map(([s]) => s);
  }

  private schedule(delayMs?: number): void {
    this.timer?.stop();
    if (this.ctl.signal.aborted) return;
    const at = delayMs !== undefined ? this.c.cfg.now() + delayMs : this.anchor + renewIntervalFor(this.c.cfg, this.ttlMs);
    this.timer = later(at - this.c.cfg.now(), () => void this.keepAlive());
  }

  /** keepAlive renews the live leases once, and schedules the next. */
  private async keepAlive(): Promise<void> {
    if (this.keeping || this.ctl.signal.aborted) return;
    this.keeping = true;
    const op = "keep session alive";
    const shards = this.live();
    try {
      if (shards.length === 0) {
        this.untrack();
        this.ctl.abort(new SessionLostError(opMessage(op, "session lost: no lease left")));
        return;
      }
      const [i, rpc] = this.c.pick();
      const sent = this.c.cfg.now();
      try {
        // An answer after the earliest lease's deadline could not save it.
        const earliest = Math.min(...shards.map((s) => this.leases.get(s)!.expires));
        const timeoutMs = Math.max(1, Math.floor(Math.min(this.c.cfg.requestTimeoutMs, earliest - sent)));
        const resp = await rpc.keepAliveSession({ sessionId: this.id, shards }, { signal: this.ctl.signal, timeoutMs });
        this.apply(sent, resp.shards);
        if (sent > this.anchor) this.anchor = sent;
        const unconfirmed = shards.some((s) => !resp.shards.some((sh) => sh.shard === s && (confirmed(sh) || sh.state === ShardLeaseState.LOST)));
        this.schedule(unconfirmed ? this.c.cfg.backoffInitialMs : undefined);
      } catch (err) {
        if (this.ctl.signal.aborted) return;
        const e = classify(op, err);
        if (e.reason === ErrorReason.SESSION_LOST || (proofRefused(err) && e.reason !== ErrorReason.SESSION_SHARD_MISSING)) {
          const lost = e instanceof SessionLostError ? e : new SessionLostError(opMessage(op, "session lost", err), err);
          for (const s of e.shard ? [e.shard] : shards) this.leases.get(s)?.lose(new LockLostError(opMessage(op, "lock lost", lost), lost));
          this.schedule(0);
          return;
        }
        this.c.failed(i);
        const delay = rateLimitDelay(err);
        this.schedule(delay !== undefined && delay > 0 ? delay : this.c.newBackoff().next());
      }
    } finally {
      this.keeping = false;
    }
  }

  /** @internal extend opens the session's lease on shard. */
  async extend(shard: string, signal?: AbortSignal, until?: number): Promise<void> {
    const op = `extend session to shard ${shard}`;
    let sent = 0;
    const resp = await this.c.call(
      op,
      (rpc, o) => {
        sent = this.c.cfg.now();
        return rpc.extendSession({ sessionId: this.id, shards: [shard], ttlMs: BigInt(this.ttlMs), clientId: this.c.cfg.clientId }, o);
      },
      { signal, until },
    );
    this.id = resp.sessionId;
    this.apply(sent, resp.shards);
  }

  /** acquire waits for the lock in the session: the lock lives on the session's lease on its shard. */
  acquire(name: string, opts: AcquireOptions = {}): Promise<Lock> {
    this.checkOpen("acquire lock in session");
    return acquire(this.c, name, opts, this);
  }

  /** tryAcquire takes the lock in the session if it is free, and never waits. */
  tryAcquire(name: string, opts: AcquireOptions = {}): Promise<Lock> {
    this.checkOpen("try to acquire lock in session");
    return tryAcquire(this.c, name, opts, this);
  }

  /** withLock runs fn under the lock taken in the session, as Client.withLock. */
  withLock<T>(name: string, fn: (lock: Lock, signal: AbortSignal) => Promise<T> | T, opts: AcquireOptions = {}): Promise<T> {
    return runLocked(() => this.acquire(name, opts), fn, opts.signal);
  }

  private checkOpen(op: string): void {
    if (this.ctl.signal.aborted) throw this.ctl.signal.reason instanceof LeasegateError ? this.ctl.signal.reason : classify(op, this.ctl.signal.reason);
  }

  /**
   * close revokes the session's leases, releasing every lock attached
   * (their signal's reason is a ReleasedError). A session the client's
   * close already ended sends nothing.
   */
  async close(): Promise<void> {
    if (this.ctl.signal.aborted) return;
    const closed = new ReleasedError(opMessage("close session", "session closed"));
    this.timer?.stop();
    this.untrack();
    this.ctl.abort(closed);
    for (const k of this.leases.values()) k.lose(closed);
    await this.c.call("close session", (rpc, o) => rpc.closeSession({ sessionId: this.id }, o));
  }

  /** end is the client's close: the session's leases can no longer be kept. */
  end(err: ClosedError): void {
    if (this.ctl.signal.aborted) return;
    this.timer?.stop();
    this.ctl.abort(err);
    const lost = new LockLostError(opMessage("session", "lock lost", err), err);
    for (const k of this.leases.values()) k.lose(lost);
  }

  /** Closes the session (for `await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }
}

/** confirmed reports a shard's answer that confirms its lease: LIVE, with a TTL. */
function confirmed(sh: SessionShard): boolean {
  return sh.state === ShardLeaseState.LIVE && sh.ttlMs > 0n;
}
