// Pauses: jittered exponential backoff, timers longer than Node's, and an
// abortable sleep.
import { AbortedError } from "./errors.js";

/** Backoff yields jittered, exponentially growing pauses between retry rounds. */
export class Backoff {
  private cur = 0;

  constructor(
    private readonly initialMs: number,
    private readonly maxMs: number,
  ) {}

  /** next returns between half and all of a nominal pause that doubles per call up to max. */
  next(): number {
    this.cur = this.cur === 0 ? this.initialMs : Math.min(2 * this.cur, this.maxMs);
    const half = this.cur / 2;
    return half + Math.random() * (this.cur - half);
  }
}

/**
 * The longest delay setTimeout counts: Node fires a longer one after 1 ms
 * (a gateway's 30-day RetryInfo would become a retry storm), so a longer
 * wait is a chain of timers of at most this.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Timer is a pending `later`; stop cancels it (idempotent). */
export interface Timer {
  stop(): void;
}

/**
 * later runs fn after ms (of any length, chaining timers past Node's
 * bound). Its timers keep the process running only with keepAlive: a
 * lease's timers must not, a caller's pending retry must.
 */
export function later(ms: number, fn: () => void, keepAlive = false): Timer {
  let t: NodeJS.Timeout | undefined;
  let stopped = false;
  const arm = (left: number) => {
    const step = Math.min(Math.max(left, 0), MAX_TIMER_MS);
    t = setTimeout(() => {
      if (stopped) return;
      if (left > step) arm(left - step);
      else fn();
    }, step);
    if (!keepAlive) t.unref();
  };
  arm(ms);
  return {
    stop() {
      stopped = true;
      clearTimeout(t);
    },
  };
}

/** sleep resolves after ms (of any length), or rejects with an AbortedError when signal aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new AbortedError("leasegate: aborted", signal.reason));
      return;
    }
    const onAbort = () => {
      t.stop();
      reject(new AbortedError("leasegate: aborted", signal?.reason));
    };
    const t = later(ms, () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, true);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
