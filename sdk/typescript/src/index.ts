// @leasegate/client: the TypeScript/Node SDK for leasegate.
export { Client } from "./leasegate.js";
export { Lock } from "./lock.js";
export { Session } from "./session.js";
export type { AcquireOptions } from "./acquire.js";
export type { ClientOptions, TlsOptions, TokenSource } from "./options.js";
export {
  AbortedError,
  ClosedError,
  EvictedError,
  InternalError,
  InvalidArgumentError,
  LeasegateError,
  LimitMismatchError,
  LockLostError,
  NotAcquiredError,
  NotOwnerError,
  PermissionDeniedError,
  QuotaExceededError,
  RateLimitedError,
  ReleasedError,
  SessionLostError,
  UnauthenticatedError,
  UnavailableError,
  WaitTimeoutError,
  reasonOf,
} from "./errors.js";
export { ErrorReason } from "./gen/leasegate/v1/errors_pb.js";
export { decodeErrorInfo, decodeRetryDelayMs } from "./details.js";
