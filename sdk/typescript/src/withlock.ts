// withLock's body, shared by Client and Session.
import { AbortedError, LockLostError } from "./errors.js";
import type { Lock } from "./lock.js";

/** runLocked acquires with take, runs fn under the lock, and releases it on every exit path. */
export async function runLocked<T>(
  take: () => Promise<Lock>,
  fn: (lock: Lock, signal: AbortSignal) => Promise<T> | T,
  caller: AbortSignal | undefined,
): Promise<T> {
  const lock = await take();
  // The body's signal aborts with the lock's loss, or with an AbortedError
  // when the caller cancels: the body always sees one of the SDK's errors.
  let signal = lock.signal;
  let unlisten = () => {};
  if (caller) {
    const body = new AbortController();
    const end = (reason: unknown) => {
      unlisten();
      body.abort(reason);
    };
    const onLost = () => end(lock.signal.reason);
    const onCancel = () => end(new AbortedError("leasegate: the caller cancelled", caller.reason));
    unlisten = () => {
      lock.signal.removeEventListener("abort", onLost);
      caller.removeEventListener("abort", onCancel);
    };
    if (lock.signal.aborted) onLost();
    else if (caller.aborted) onCancel();
    else {
      lock.signal.addEventListener("abort", onLost, { once: true });
      caller.addEventListener("abort", onCancel, { once: true });
    }
    signal = body.signal;
  }
  let result: T | undefined;
  let failed = false;
  let fnErr: unknown;
  try {
    result = await fn(lock, signal);
  } catch (e) {
    failed = true;
    fnErr = e;
  }
  unlisten();
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
