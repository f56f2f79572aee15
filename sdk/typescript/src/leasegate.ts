// Client: the SDK's entry point.
import { Core } from "./client.js";
import { acquire, tryAcquire, type AcquireOptions } from "./acquire.js";
import type { Lock } from "./lock.js";
import { Session } from "./session.js";
import { runLocked } from "./withlock.js";

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
   * withLock acquires name, runs fn with the lock and a signal, and
   * releases the lock on every exit path. The signal is aborted when the
   * lock ends or `opts.signal` aborts: pass it to fn's work, and
   * `lock.token` to its writes. withLock throws, in this order: the
   * acquire's error; fn's, unchanged; the lock's LockLostError when the
   * lock was lost before fn returned, even though fn succeeded (its work
   * may have run on past the loss); release's.
   */
  withLock<T>(name: string, fn: (lock: Lock, signal: AbortSignal) => Promise<T> | T, opts: AcquireOptions = {}): Promise<T> {
    return runLocked(() => this.acquire(name, opts), fn, opts.signal);
  }

  /** openSession opens a session of ttlMs (default: the client's defaultTtlMs). */
  openSession(opts: { ttlMs?: number; signal?: AbortSignal } = {}): Promise<Session> {
    return Session.open(this, opts.ttlMs ?? this.cfg.defaultTtlMs, opts.signal);
  }
}
