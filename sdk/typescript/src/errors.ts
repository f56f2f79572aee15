// Typed errors: one class per thing a program does next, as the Go SDK's
// sentinels (client/errors.go). A gateway's answer is classified once, by
// classify, from its Connect code and the ErrorReason in its ErrorInfo.
import { Code, ConnectError } from "@connectrpc/connect";
import { errorInfo, retryInfoMs } from "./details.js";
import { ErrorReason } from "./gen/leasegate/v1/errors_pb.js";

/**
 * LeasegateError is the base of every error the SDK throws. `reason` is
 * the gateway's ErrorReason (ERROR_REASON_UNSPECIFIED when it gave none),
 * `code` its Connect code, `shard` the shard its ErrorInfo names, and
 * `cause` the ConnectError it answered, when it came from a gateway.
 */
export class LeasegateError extends Error {
  /** The gateway's reason, or ERROR_REASON_UNSPECIFIED. */
  readonly reason: ErrorReason;
  /** The Connect code of the gateway's answer, when there was one. */
  readonly code: Code | undefined;
  /** The shard the gateway's answer concerns, or "". */
  readonly shard: string;

  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    if (cause instanceof ConnectError) {
      this.code = cause.code;
      this.reason = reasonOf(cause);
      this.shard = errorInfo(cause)?.metadata["shard"] ?? "";
    } else if (cause instanceof LeasegateError) {
      this.code = cause.code;
      this.reason = cause.reason;
      this.shard = cause.shard;
    } else {
      this.code = undefined;
      this.reason = ErrorReason.ERROR_REASON_UNSPECIFIED;
      this.shard = "";
    }
  }
}

/**
 * LockLostError: the lock is no longer held, or can no longer be proven
 * held before its conservative deadline. Stop writing under it. The cause
 * is the gateway's proof (LOCK_EXPIRED, LOCK_STOLEN, …) or an
 * UnavailableError when no gateway confirmed the lease in time.
 */
export class LockLostError extends LeasegateError {}

/** EvictedError: an administrator force-released the lock. It is a LockLostError. */
export class EvictedError extends LockLostError {}

/** ReleasedError: the lock was released on purpose (by this or another handle of its lock id). */
export class ReleasedError extends LeasegateError {}

/** WaitTimeoutError: the acquire's wait timeout passed before a grant; nothing is held. */
export class WaitTimeoutError extends LeasegateError {}

/**
 * NotAcquiredError: tryAcquire found the name held or contended.
 * `holderExpires` is when the holder's lease lapses on the gateway's
 * clock, `delayUntil` when a pending lock-delay ends (a try after it may
 * succeed); either is undefined when the gateway did not say.
 */
export class NotAcquiredError extends LeasegateError {
  /** When the holder's lease lapses unless renewed, on the gateway's clock. */
  holderExpires: Date | undefined;
  /** When an expired holder's lock-delay ends, on the gateway's clock. */
  delayUntil: Date | undefined;

  constructor(message: string, holderExpires?: Date, delayUntil?: Date) {
    super(message);
    this.holderExpires = holderExpires;
    this.delayUntil = delayUntil;
  }
}

/** SessionLostError: a session's lease (on a shard, or all of them) is gone. */
export class SessionLostError extends LeasegateError {}

/** UnavailableError: no gateway answered, or each answered with a retryable failure, within the attempts allowed. */
export class UnavailableError extends LeasegateError {}

/** NotOwnerError: a lock id, token, request id or session id is not the caller's (NOT_OWNER). Not retried. */
export class NotOwnerError extends LeasegateError {}

/** PermissionDeniedError: the tenant's name policy refuses the name. Not retried. */
export class PermissionDeniedError extends LeasegateError {}

/**
 * RateLimitedError: a gateway's rate limit refused the call after the SDK
 * waited the gateway's delay and retried as often as the call allows.
 * `retryAfterMs` is the gateway's RetryInfo delay (0 when it gave none),
 * `limit` the limit's name.
 */
export class RateLimitedError extends LeasegateError {
  /** The delay the gateway asked for, in milliseconds (0: unsaid). */
  readonly retryAfterMs: number;
  /** Which rate limit refused the call (tenant_acquire_rate, …), or "". */
  readonly limit: string;

  constructor(message: string, cause: unknown, retryAfterMs: number, limit: string) {
    super(message, cause);
    this.retryAfterMs = retryAfterMs;
    this.limit = limit;
  }
}

/** QuotaExceededError: a cap on keys or waiters refused the call; `limit` names it. Not retried. */
export class QuotaExceededError extends LeasegateError {
  /** Which cap refused the call (name_waiters, tenant_keys, …), or "". */
  readonly limit: string;

  constructor(message: string, cause: unknown, limit: string) {
    super(message, cause);
    this.limit = limit;
  }
}

/** UnauthenticatedError: the gateway refused the credentials (token or certificate). Not retried. */
export class UnauthenticatedError extends LeasegateError {}

/** InternalError: a gateway answered with an unexpected failure of its own. Not retried. */
export class InternalError extends LeasegateError {}

/** LimitMismatchError: a semaphore acquire's limit is not the name's. Not retried. */
export class LimitMismatchError extends LeasegateError {}

/** InvalidArgumentError: a bad option or request field; the message names it. */
export class InvalidArgumentError extends LeasegateError {}

/** ClosedError: use of a closed Client or Session. */
export class ClosedError extends LeasegateError {}

/** AbortedError: the caller's AbortSignal ended the call. */
export class AbortedError extends LeasegateError {}

/**
 * reasonOf returns the leasegate ErrorReason a gateway error carries, or
 * ERROR_REASON_UNSPECIFIED when it has none or one this SDK does not know.
 */
export function reasonOf(err: unknown): ErrorReason {
  if (err instanceof LeasegateError) return err.reason;
  if (!(err instanceof ConnectError)) return ErrorReason.ERROR_REASON_UNSPECIFIED;
  const info = errorInfo(err);
  if (!info) return ErrorReason.ERROR_REASON_UNSPECIFIED;
  const v = (ErrorReason as unknown as Record<string, number | undefined>)[info.reason];
  return typeof v === "number" ? (v as ErrorReason) : ErrorReason.ERROR_REASON_UNSPECIFIED;
}

/** The message of a ConnectError without connect's "[code]" prefix. */
function rawMessage(err: unknown): string {
  if (err instanceof ConnectError) return err.rawMessage || Code[err.code];
  if (err instanceof Error) return err.message;
  return String(err);
}

/** message builds "leasegate: OP: CAUSE". */
export function opMessage(op: string, what: string, cause?: unknown): string {
  const c = cause === undefined ? "" : rawMessage(cause);
  return `leasegate: ${op}: ${what}${c && !c.startsWith(what) ? ": " + c : ""}`;
}

/**
 * wireError reports whether a ConnectError came from a gateway's answer
 * rather than from this side (a connection broken mid-call reads as
 * unknown or internal too): only a gateway's own internal failure is an
 * InternalError; the other is an outage, retried elsewhere.
 */
function serverFailure(err: ConnectError): boolean {
  switch (err.code) {
    case Code.Unknown:
    case Code.Internal:
    case Code.DataLoss:
    case Code.Unimplemented:
      // A gateway's answer carries its metadata (at least a content type);
      // an error connect made up from a broken connection has none.
      return err.metadata.has("content-type") || errorInfo(err) !== undefined;
  }
  return false;
}

/**
 * Node's codes for a TLS handshake that either side refused over
 * certificates: the gateway asking for or rejecting a client certificate
 * (its alerts), or this side not trusting the gateway's. Retrying another
 * gateway with the same credentials cannot help.
 */
const TLS_REFUSALS = [
  /^ERR_SSL_(SSLV3|TLSV1|TLSV13)_ALERT_(CERTIFICATE_REQUIRED|BAD_CERTIFICATE|UNKNOWN_CA|CERTIFICATE_UNKNOWN|CERTIFICATE_EXPIRED|CERTIFICATE_REVOKED|UNSUPPORTED_CERTIFICATE|ACCESS_DENIED)$/,
  /^(UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT(_LOCALLY)?|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|CERT_HAS_EXPIRED|CERT_NOT_YET_VALID|CERT_UNTRUSTED|ERR_TLS_CERT_ALTNAME_INVALID)$/,
];

/** tlsRefusal reports a call that failed because a TLS handshake refused a certificate. */
function tlsRefusal(err: unknown): boolean {
  for (let e = err, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && TLS_REFUSALS.some((re) => re.test(code))) return true;
    if (/alert (certificate required|bad certificate|unknown ca|certificate unknown)/.test(e.message)) return true;
  }
  return false;
}

/** classify turns a failed call's error into the SDK error for op. */
export function classify(op: string, err: unknown): LeasegateError {
  if (err instanceof LeasegateError) return err;
  if (tlsRefusal(err)) {
    return new UnauthenticatedError(opMessage(op, "unauthenticated: a TLS certificate was refused or not trusted", err), err);
  }
  if (!(err instanceof ConnectError)) {
    if (err instanceof Error && err.name === "AbortError") return new AbortedError(opMessage(op, "aborted"), err);
    return new UnavailableError(opMessage(op, "no gateway available"), err);
  }
  const reason = reasonOf(err);
  switch (err.code) {
    case Code.InvalidArgument:
    case Code.OutOfRange:
      return new InvalidArgumentError(opMessage(op, "invalid argument", err), err);
    case Code.Unauthenticated:
      return new UnauthenticatedError(opMessage(op, "unauthenticated", err), err);
    case Code.PermissionDenied:
      if (reason === ErrorReason.NOT_OWNER) return new NotOwnerError(opMessage(op, "not the lock's owner", err), err);
      return new PermissionDeniedError(opMessage(op, "permission denied", err), err);
    case Code.ResourceExhausted: {
      if (!errorInfo(err) && /readMaxBytes/.test(err.rawMessage)) {
        // Connect's own refusal of a message above the SDK's read bound:
        // a gateway that sends one is broken, and asking again will not mend it.
        return new InternalError(opMessage(op, "a gateway's answer exceeds the SDK's message size bound", err), err);
      }
      const limit = errorInfo(err)?.metadata["limit"] ?? "";
      const delay = retryInfoMs(err);
      if (reason === ErrorReason.RATE_LIMITED || (reason !== ErrorReason.QUOTA_EXCEEDED && delay !== undefined)) {
        return new RateLimitedError(opMessage(op, "rate limited", err), err, delay ?? 0, limit);
      }
      return new QuotaExceededError(opMessage(op, "quota exceeded" + (limit ? ` (${limit})` : ""), err), err, limit);
    }
    case Code.DeadlineExceeded:
      if (reason === ErrorReason.WAIT_TIMEOUT) return new WaitTimeoutError(opMessage(op, "wait timed out", err), err);
      break;
    case Code.FailedPrecondition:
    case Code.Aborted:
      switch (reason) {
        case ErrorReason.SESSION_LOST:
          return new SessionLostError(opMessage(op, "session lost", err), err);
        case ErrorReason.LOCK_EXPIRED:
        case ErrorReason.LOCK_STOLEN:
        case ErrorReason.LEASE_LOST:
          return new LockLostError(opMessage(op, "lock lost", err), err);
        case ErrorReason.LOCK_RELEASED:
          return new ReleasedError(opMessage(op, "lock released", err), err);
        case ErrorReason.LOCK_EVICTED:
          return new EvictedError(opMessage(op, "lock evicted", err), err);
        case ErrorReason.LIMIT_MISMATCH:
          if (err.code === Code.FailedPrecondition) {
            return new LimitMismatchError(opMessage(op, "semaphore limit mismatch", err), err);
          }
      }
      break;
    case Code.Unknown:
    case Code.Internal:
    case Code.DataLoss:
    case Code.Unimplemented:
      if (serverFailure(err)) return new InternalError(opMessage(op, "gateway internal error", err), err);
      return new UnavailableError(opMessage(op, "no gateway available", err), err);
    case Code.Unavailable:
      return new UnavailableError(opMessage(op, "no gateway available", err), err);
    case Code.Canceled:
      // The caller's own abort is told apart before classifying (each
      // call checks its signal first): this one is a stream the gateway
      // or the connection cancelled, an outage.
      return new UnavailableError(opMessage(op, "no gateway available", err), err);
  }
  return new LeasegateError(opMessage(op, Code[err.code], err), err);
}

/**
 * retryable reports whether another attempt, on the next endpoint, may
 * succeed where err failed: the gateway was unreachable, stopping, cut off
 * from etcd, or the stream broke. A rate limit is not retryable in this
 * sense: the caller waits the gateway's delay and asks the same gateway.
 */
export function retryable(err: unknown): boolean {
  if (err instanceof StreamEndedError) return true;
  if (tlsRefusal(err)) return false;
  if (!(err instanceof ConnectError)) return false;
  const reason = reasonOf(err);
  switch (err.code) {
    case Code.Unknown:
    case Code.Internal:
      return !serverFailure(err);
    case Code.Unavailable:
    case Code.Canceled:
      return true;
    case Code.DeadlineExceeded:
      return reason !== ErrorReason.WAIT_TIMEOUT;
    case Code.Aborted:
      // The waiter's lease died: a retry enqueues again. Or an earlier
      // attempt of this call took the waiter over: a retry takes it back,
      // keeping the place.
      return reason === ErrorReason.LEASE_LOST || reason === ErrorReason.SUPERSEDED;
  }
  return false;
}

/**
 * proofRefused reports an answer that proves a lease or lock gone or not
 * the caller's: the only answers on which a renewer declares loss before
 * the deadline. Anything else is retried until the deadline.
 */
export function proofRefused(err: unknown): boolean {
  if (!(err instanceof ConnectError)) return false;
  return err.code === Code.FailedPrecondition || err.code === Code.PermissionDenied || err.code === Code.InvalidArgument;
}

/** rateLimit returns the delay a rate-limited answer asks for (ms, 0 unsaid), or undefined when err is no rate limit. */
export function rateLimitDelay(err: unknown): number | undefined {
  if (!(err instanceof ConnectError) || err.code !== Code.ResourceExhausted) return undefined;
  const c = classify("", err);
  return c instanceof RateLimitedError ? c.retryAfterMs : undefined;
}

/** StreamEndedError: an acquire stream that ended cleanly without a grant (retryable). */
export class StreamEndedError extends Error {
  constructor() {
    super("the acquire stream ended without a grant");
  }
}
