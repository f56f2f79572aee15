// Client: the SDK's entry point.
import { Core } from "./client.js";
import { LockLostError } from "./errors.js";
import { acquire, tryAcquire, type AcquireOptions } from "./acquire.js";
import type { Lock } from "./lock.js";
import { Session } from "./session.js";

/**
 * Client talks to one or more leasegate gateways; any gateway serves any
 * call, and a call that fails retryably moves on to the next endpoint
 * under the same request id (an acquire keeps its queue place).
 */
export class Client extends Core {
  /**
   * acquire waits in the name's queue (FIFO) until granted, reporting its
   * place through `onQueued`, and returns the held Lock, renewed in the
   * background until released. Throws WaitTimeoutError after
   * `waitTimeoutMs`, AbortedError when `signal` aborts.
   */
  acquire(name: string, opts: AcquireOptions = {}): Promise<Lock> {
    return acquire(this, name, opts);
  }

  /** tryAcquire takes the lock if it is free and never waits; NotAcquiredError when held. */
  tryAcquire(name: string, opts: AcquireOptions = {}): Promise<Lock> {
    return tryAcquire(this, name, opts);
  }

  /**
   * withLock acquires name, runs fn with the lock (pass `lock.signal` to
   * its work and `lock.token` to its writes), and releases the lock on
   * every exit path. It throws, in this order: the acquire's error; fn's;
   * the lock's LockLostError when the lock was lost before fn returned,
   * even though fn succeeded (its work may have run on past the loss);
   * release's.
   */
  async withLock<T>(name: string, fn: (lock: Lock) => Promise<T> | T, opts: AcquireOptions = {}): Promise<T> {
    const lock = await this.acquire(name, opts);
    let result: T | undefined;
    let failed = false;
    let fnErr: unknown;
    try {
      result = await fn(lock);
    } catch (e) {
      failed = true;
      fnErr = e;
    }
    const lost = lock.error instanceof LockLostError ? lock.error : undefined;
    let releaseErr: unknown;
    try {
      await lock.release();
    } catch (e) {
      releaseErr = e;
    }
    if (failed) throw fnErr;
    if (lost) throw lost;
    if (releaseErr !== undefined) throw releaseErr;
    return result as T;
  }

  /** openSession opens a session of ttlMs (default: the client's defaultTtlMs). */
  openSession(opts: { ttlMs?: number; signal?: AbortSignal } = {}): Promise<Session> {
    return Session.open(this, opts.ttlMs ?? this.cfg.defaultTtlMs, opts.signal);
  }
}
