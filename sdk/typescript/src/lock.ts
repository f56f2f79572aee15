// Lock: one held lock, its fencing token, its deadline and its loss signal.
import type { Core as Client } from "./client.js";
import { InvalidArgumentError, LeasegateError, LockLostError, ReleasedError, UnavailableError, classify, opMessage } from "./errors.js";
import type { Keeper } from "./keeper.js";
import type { Granted } from "./gen/leasegate/v1/lock_pb.js";

/** What a lock's lease is kept by: its own keeper, or its session's lease on the lock's shard. */
export interface LeaseHolder {
  readonly signal: AbortSignal;
  readonly expires: number;
  lose(err: LeasegateError): void;
}

/**
 * Lock is a held lock. Its `signal` is aborted — with the cause as
 * `signal.reason`, a LockLostError (or EvictedError) or a ReleasedError —
 * at the first of: a gateway proving the lock gone, the conservative
 * deadline passing without a confirmation, release, or its session's
 * close. Pass `signal` to the work done under the lock, and send `token`
 * with every write so the resource can refuse a stale holder's.
 */
export class Lock {
  /** The lock's name. */
  readonly name: string;
  /** The fencing token: only grows for the name. Exact above 2^53. */
  readonly token: bigint;
  /** The opaque lock id (carries the holder's secret). */
  readonly id: string;
  /** The shard (etcd cluster) the lock lives on. */
  readonly shard: string;
  /** The request id the lock was acquired under. */
  readonly requestId: string;
  /** The lock's holds (more than 1 for a re-entered session lock). */
  readonly holdCount: number;
  /** Aborted, with the cause as its reason, when the lock ends. */
  readonly signal: AbortSignal;
  private readonly ctl = new AbortController();
  private released = false;

  /** @internal */
  constructor(
    private readonly client: Client,
    name: string,
    g: Granted,
    requestId: string,
    /** @internal */ readonly lease: LeaseHolder,
    private readonly keeper: Keeper | undefined,
  ) {
    this.name = name;
    this.token = g.fencingToken;
    this.id = g.lockId;
    this.shard = g.shard;
    this.requestId = requestId;
    this.holdCount = Math.max(g.holdCount, 1);
    this.signal = this.ctl.signal;
    // A session's lease outlives its locks: the listener goes when the
    // lock ends, or every released lock would stay referenced by it.
    const forward = () => this.ctl.abort(lease.signal.reason);
    if (lease.signal.aborted) forward();
    else {
      lease.signal.addEventListener("abort", forward, { once: true });
      this.signal.addEventListener("abort", () => lease.signal.removeEventListener("abort", forward), { once: true });
    }
  }

  /** The conservative deadline on the client's monotonic clock (ms, as `ClientOptions.now`). */
  get expires(): number {
    return this.lease.expires;
  }

  /** The conservative deadline as a wall-clock Date (derived from the monotonic one). */
  get expiresAt(): Date {
    return new Date(Date.now() + (this.lease.expires - this.client.cfg.now()));
  }

  /** The error the lock ended with, or undefined while it is held. */
  get error(): LeasegateError | undefined {
    return this.signal.aborted ? (this.signal.reason as LeasegateError) : undefined;
  }

  /**
   * throwIfLost throws the lock's error when it has ended, or when its
   * deadline has passed on the clock even if the timer has not run yet
   * (a busy event loop): call it right before a write.
   */
  throwIfLost(): void {
    if (!this.signal.aborted && this.client.cfg.now() >= this.lease.expires) {
      // The deadline rules, whatever the timer's lateness.
      const op = `lock "${this.name}"`;
      const why = new UnavailableError(opMessage(op, "no gateway confirmed the lease before its deadline"));
      this.lease.lose(new LockLostError(opMessage(op, "lock lost", why), why));
    }
    if (this.signal.aborted) throw this.signal.reason;
  }

  /**
   * renew renews the lease now and returns the new deadline. Throws the
   * lock's error if a gateway proves it lost; a renewal no gateway
   * answered leaves the deadline unchanged and throws UnavailableError.
   * A session lock has no lease of its own: renew its session.
   */
  async renew(): Promise<number> {
    if (!this.keeper) {
      throw new InvalidArgumentError(`leasegate: renew lock "${this.name}": the lock belongs to a session, which keeps its lease`);
    }
    return this.keeper.renewNow();
  }

  /**
   * release frees the lock and aborts `signal` with a ReleasedError.
   * Returns false when the lock was already gone (released or expired).
   * Idempotent; it can never free a lock another holder acquired since.
   * On a closed client it sends nothing and throws ClosedError.
   */
  async release(): Promise<boolean> {
    const op = `release lock "${this.name}"`;
    if (this.released) return false;
    this.released = true;
    const wasHeld = !this.signal.aborted;
    const released = new ReleasedError(opMessage(op, "lock released"));
    if (this.keeper) this.keeper.lose(released); // stops its renewals too
    this.ctl.abort(released);
    try {
      const resp = await this.client.call(op, (rpc, o) =>
        rpc.release({ lockId: this.id, fencingToken: this.token }, o),
      );
      return resp.released && wasHeld;
    } catch (err) {
      throw classify(op, err);
    }
  }

  /** Releases the lock (for `await using`). */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}
