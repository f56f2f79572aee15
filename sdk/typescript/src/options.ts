// Client options, their defaults and their validation.
import { InvalidArgumentError } from "./errors.js";

/** A token source: called before every request for the bearer token to send. */
export type TokenSource = () => string | Promise<string>;

/** TLS settings for https:// endpoints (PEM strings or Buffers). */
export interface TlsOptions {
  /** CA bundle to trust instead of the system's. */
  ca?: string | Buffer;
  /** Client certificate, for a gateway that verifies clients (mTLS). */
  cert?: string | Buffer;
  /** Private key of `cert`. */
  key?: string | Buffer;
  /** Server name to verify, when it is not the endpoint's host. */
  servername?: string;
}

/** ClientOptions configures a Client; every field is optional. */
export interface ClientOptions {
  /** Caller identity the gateway reports (Describe, ListLocks). Default: "node-" + pid. */
  clientId?: string;
  /** Bearer token: a fixed string, or a source called before every request. Default: none. */
  token?: string | TokenSource;
  /** TLS for https:// endpoints (and the default scheme when set). */
  tls?: TlsOptions;
  /** Wire protocol: "connect" (default) or "grpc". */
  protocol?: "connect" | "grpc";
  /** HTTP version: "2" (default; h2c on http://) or "1.1" (Connect protocol only). */
  httpVersion?: "1.1" | "2";
  /** Bound of one attempt of a unary call, in ms. Default 10000. */
  requestTimeoutMs?: number;
  /** Renewal interval as a fraction of the TTL, in (0, 0.5]. Default 1/3, jittered ±10%. */
  renewFraction?: number;
  /** Safety margin subtracted from every deadline, in ms. Default TTL/100 + 100 ms; at most TTL/3. */
  safetyMarginMs?: number;
  /** First and largest pause between rounds of retries, in ms. Default 100 and 2000. */
  backoffInitialMs?: number;
  /** See backoffInitialMs. */
  backoffMaxMs?: number;
  /** TTL of locks acquired without one, in ms. Default 15000. */
  defaultTtlMs?: number;
  /** Monotonic clock in ms, for tests. Default performance.now. */
  now?: () => number;
  /**
   * Called after each renewal of a lock's or session's lease has been
   * processed, with when it was sent (on `now`'s clock) and, unless the
   * gateway confirmed the lease, its error. The lock's `expires` already
   * counts from a confirmed renewal. Called synchronously on the renewer:
   * keep it short; what it throws is ignored. Default: none.
   */
  onRenew?: (sentMs: number, error?: unknown) => void;
}

/** Config is ClientOptions with every default filled in. */
export interface Config {
  clientId: string;
  token: TokenSource | undefined;
  tls: TlsOptions | undefined;
  protocol: "connect" | "grpc";
  httpVersion: "1.1" | "2";
  requestTimeoutMs: number;
  renewFraction: number;
  safetyMarginMs: number | undefined;
  backoffInitialMs: number;
  backoffMaxMs: number;
  defaultTtlMs: number;
  now: () => number;
  onRenew: ((sentMs: number, error?: unknown) => void) | undefined;
}

function positive(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isFinite(v) || v <= 0) {
    throw new InvalidArgumentError(`leasegate: ${name} is ${v}; want a positive number of milliseconds`);
  }
  return v;
}

/** config validates opts and fills in the defaults. */
export function config(opts: ClientOptions): Config {
  const rf = opts.renewFraction ?? 1 / 3;
  if (!(rf > 0 && rf <= 0.5)) {
    throw new InvalidArgumentError(`leasegate: renewFraction is ${rf}; want a number in (0, 0.5]`);
  }
  if (opts.safetyMarginMs !== undefined && !(opts.safetyMarginMs >= 0)) {
    throw new InvalidArgumentError(`leasegate: safetyMarginMs is ${opts.safetyMarginMs}; want 0 or more`);
  }
  const protocol = opts.protocol ?? "connect";
  const httpVersion = opts.httpVersion ?? "2";
  if (protocol === "grpc" && httpVersion !== "2") {
    throw new InvalidArgumentError(`leasegate: gRPC needs httpVersion "2", not "${httpVersion}"`);
  }
  const token = opts.token;
  return {
    clientId: opts.clientId ?? `node-${process.pid}`,
    token: typeof token === "string" ? () => token : token,
    tls: opts.tls,
    protocol,
    httpVersion,
    requestTimeoutMs: Math.max(1, Math.floor(positive("requestTimeoutMs", opts.requestTimeoutMs, 10_000))),
    renewFraction: rf,
    safetyMarginMs: opts.safetyMarginMs,
    backoffInitialMs: positive("backoffInitialMs", opts.backoffInitialMs, 100),
    backoffMaxMs: positive("backoffMaxMs", opts.backoffMaxMs, 2000),
    defaultTtlMs: positive("defaultTtlMs", opts.defaultTtlMs, 15_000),
    now: opts.now ?? (() => performance.now()),
    onRenew: opts.onRenew,
  };
}

/** marginFor is the safety margin of a lease of ttlMs. */
export function marginFor(cfg: Config, ttlMs: number): number {
  const m = cfg.safetyMarginMs ?? ttlMs / 100 + 100;
  return Math.min(m, ttlMs / 3);
}

/** renewIntervalFor is the jittered pause between a confirmation and the next renewal. */
export function renewIntervalFor(cfg: Config, ttlMs: number): number {
  return ttlMs * cfg.renewFraction * (0.9 + 0.2 * Math.random());
}
