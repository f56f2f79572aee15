// Pauses: jittered exponential backoff and an abortable sleep.
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

/** sleep resolves after ms, or rejects with an AbortedError when signal aborts first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(new AbortedError("leasegate: aborted", signal.reason));
      return;
    }
    const onAbort = () => {
      clearTimeout(t);
      reject(new AbortedError("leasegate: aborted", signal?.reason));
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(ms, 0));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
