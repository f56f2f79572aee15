// withLock's body, shared by Client and Session.
import { LockLostError } from "./errors.js";
import type { Lock } from "./lock.js";

/** runLocked acquires with take, runs fn under the lock, and releases it on every exit path. */
export async function runLocked<T>(
  take: () => Promise<Lock>,
  fn: (lock: Lock, signal: AbortSignal) => Promise<T> | T,
  caller: AbortSignal | undefined,
): Promise<T> {
  const lock = await take();
  const signal = caller ? AbortSignal.any([lock.signal, caller]) : lock.signal;
  let result: T | undefined;
  let failed = false;
  let fnErr: unknown;
  try {
    result = await fn(lock, signal);
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
