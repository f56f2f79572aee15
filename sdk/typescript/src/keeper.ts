// Keeper: the conservative deadline of one lease and, unless it is kept by
// hand, its background renewal.
//
// The deadline is S + min(TTL, valid_for) − margin, S being the clock
// reading taken just before sending the latest request a gateway answered
// with a confirmation. etcd counts a lease's TTL from when its leader
// handled the confirming grant or keepalive, which follows S; valid_for
// counts from the request's arrival, which follows S too. So while this
// process's clock runs no slower than the etcd leader's, the lease
// outlives the deadline by the margin. A confirmation only ever moves the
// deadline later (an answer to an older request, crediting an earlier S,
// is ignored), and one that arrives once the deadline has passed revives
// nothing: the signal is aborted for good. An answer with a TTL of 0 or
// less confirms nothing, and one with a TTL above the lease's granted TTL
// is counted at the granted TTL: a renewal never changes a lease's TTL.
import {
  ClosedError,
  InvalidArgumentError,
  LeasegateError,
  LockLostError,
  UnavailableError,
  classify,
  opMessage,
  proofRefused,
  rateLimitDelay,
  retryable,
} from "./errors.js";
import type { Closable, Core as Client, LockRpc } from "./client.js";
import { marginFor, renewIntervalFor } from "./options.js";
import { later, sleep, type Timer } from "./retry.js";

/** UnconfirmedError is a renewal's answer that confirms nothing: retried like an outage. */
class UnconfirmedError extends UnavailableError {}

/** A lease confirmation: the TTL and what the gateway says it owes from the request's arrival (0: unsaid). */
export interface Confirmation {
  ttlMs: number;
  validForMs: number;
}

/** A renewal RPC: it confirms the lease or throws the gateway's answer. */
export type RenewFn = (rpc: LockRpc, opts: { signal: AbortSignal; timeoutMs: number }) => Promise<Confirmation>;

/** deadlineOf is the conservative deadline a confirmation of a request sent at `sent` gives. */
export function deadlineOf(c: Client, sent: number, conf: Confirmation): number {
  const d = conf.validForMs > 0 && conf.validForMs < conf.ttlMs ? conf.validForMs : conf.ttlMs;
  return sent + d - marginFor(c.cfg, conf.ttlMs);
}

/**
 * Keeper holds a lease's deadline and aborts `signal` at it unless a
 * confirmation moves it first; with renew set it also renews in the
 * background, every TTL × renewFraction from the latest confirmation's
 * send time, retrying every endpoint with backoff until the deadline.
 * The client's close ends it.
 */
export class Keeper implements Closable {
  /** Aborted, with the cause, when the lease is lost or the keeper stops. */
  readonly signal: AbortSignal;
  private readonly ctl = new AbortController();
  private deadline: number;
  private anchor: number;
  private ttlMs: number;
  /** The TTL the lease was granted with: no answer counts for more. */
  private readonly grantedTtlMs: number;
  private deadlineTimer: Timer | undefined;
  private renewTimer: Timer | undefined;
  private renewing = false;
  private untrack: () => void = () => {};

  constructor(
    private readonly c: Client,
    private readonly op: string,
    ttlMs: number,
    anchor: number,
    deadline: number,
    private readonly renew: RenewFn | undefined,
    private readonly background: boolean,
  ) {
    this.signal = this.ctl.signal;
    this.ttlMs = this.grantedTtlMs = ttlMs;
    this.anchor = anchor;
    this.deadline = deadline;
    this.armDeadline();
    this.scheduleRenewal();
    this.untrack = c.track(this);
  }

  /** The conservative deadline, on the client's clock (ms). */
  get expires(): number {
    return this.deadline;
  }

  /** The lease's TTL in ms. */
  get ttl(): number {
    return this.ttlMs;
  }

  /**
   * credit applies a confirmation of a request sent at `sent`: the
   * deadline moves only later, and not at all once passed or stopped.
   * Returns whether the lease is still held.
   */
  credit(sent: number, conf: Confirmation): boolean {
    if (this.signal.aborted) return false;
    if (this.c.cfg.now() >= this.deadline) {
      // The timer is late (a busy event loop): the deadline still rules.
      this.lose(this.unconfirmed());
      return false;
    }
    if (!(conf.ttlMs > 0)) return true;
    this.ttlMs = Math.min(conf.ttlMs, this.grantedTtlMs);
    const d = deadlineOf(this.c, sent, { ttlMs: this.ttlMs, validForMs: conf.validForMs });
    if (d > this.deadline) {
      this.deadline = d;
      this.armDeadline();
    }
    if (sent > this.anchor) {
      this.anchor = sent;
      this.scheduleRenewal();
    }
    return true;
  }

  /** observe reports a processed renewal to the client's onRenew. */
  private observe(sent: number, err?: unknown): void {
    try {
      this.c.cfg.onRenew?.(sent, err);
    } catch {
      // A hook's failure is not the lease's.
    }
  }

  /** lose aborts the signal with err (the first cause wins) and stops the timers. */
  lose(err: LeasegateError): void {
    if (this.signal.aborted) return;
    this.deadlineTimer?.stop();
    this.renewTimer?.stop();
    this.untrack();
    this.ctl.abort(err);
  }

  /** end is the client's close: the lease can no longer be kept. */
  end(err: ClosedError): void {
    this.lose(new LockLostError(opMessage(this.op, "lock lost", err), err));
  }

  /** The error the deadline passing gives. */
  private unconfirmed(last?: unknown): LockLostError {
    return new LockLostError(
      opMessage(this.op, "lock lost", new UnavailableError("no gateway confirmed the lease before its deadline", last)),
      new UnavailableError(opMessage(this.op, "no gateway confirmed the lease before its deadline", last), last),
    );
  }

  private armDeadline(): void {
    this.deadlineTimer?.stop();
    this.deadlineTimer = later(this.deadline - this.c.cfg.now(), () => this.lose(this.unconfirmed()));
  }

  private scheduleRenewal(): void {
    if (!this.renew || !this.background || this.signal.aborted) return;
    this.renewTimer?.stop();
    const at = this.anchor + renewIntervalFor(this.c.cfg, this.ttlMs);
    this.renewTimer = later(at - this.c.cfg.now(), () => void this.renewNow().catch(() => {}));
  }

  /**
   * renewNow renews until a gateway confirms the lease, one proves it
   * lost, or the deadline passes; it returns the new deadline or throws.
   * A renewal already under way is not doubled: the call waits for the
   * deadline to move or the lock to end.
   */
  async renewNow(): Promise<number> {
    const renew = this.renew;
    if (!renew) throw new InvalidArgumentError(opMessage(this.op, "the lease is not renewed on its own"));
    if (this.signal.aborted) throw this.signal.reason;
    if (this.renewing) {
      const before = this.deadline;
      while (this.renewing && !this.signal.aborted) await sleep(10);
      if (this.signal.aborted) throw this.signal.reason;
      if (this.deadline > before) return this.deadline;
    }
    this.renewing = true;
    try {
      return await this.renewLoop(renew);
    } finally {
      this.renewing = false;
    }
  }

  private async renewLoop(renew: RenewFn): Promise<number> {
    const cfg = this.c.cfg;
    const bo = this.c.newBackoff();
    let last: unknown;
    let tried = 0;
    for (;;) {
      if (this.signal.aborted) throw this.signal.reason;
      const left = this.deadline - cfg.now();
      if (left <= 0) {
        this.lose(this.unconfirmed(last));
        throw this.signal.reason;
      }
      const [i, rpc] = this.c.pick();
      const sent = cfg.now();
      let pause = 0;
      try {
        const conf = await renew(rpc, { signal: this.signal, timeoutMs: Math.max(1, Math.floor(Math.min(cfg.requestTimeoutMs, left))) });
        if (!(conf.ttlMs > 0)) throw new UnconfirmedError(opMessage(this.op, `the gateway answered the renewal with ttl_ms ${conf.ttlMs}, which confirms nothing`));
        if (!this.credit(sent, conf)) throw this.signal.reason;
        this.observe(sent);
        return this.deadline;
      } catch (err) {
        if (err !== this.signal.reason) this.observe(sent, err);
        if (this.signal.aborted) throw this.signal.reason;
        if (proofRefused(err)) {
          const cause = classify(this.op, err);
          this.lose(cause instanceof LockLostError ? cause : new LockLostError(opMessage(this.op, "lock lost", err), cause));
          throw this.signal.reason;
        }
        last = err;
        const delay = rateLimitDelay(err);
        if (delay !== undefined) {
          pause = delay > 0 ? delay : bo.next();
        } else {
          if (retryable(err) || err instanceof UnconfirmedError) this.c.failed(i);
          tried++;
          if (tried % this.c.endpointCount === 0) pause = bo.next();
        }
      }
      if (pause > 0) {
        const until = this.deadline - cfg.now();
        await sleep(Math.min(pause, Math.max(until, 0)), this.signal).catch(() => {});
      }
    }
  }
}
