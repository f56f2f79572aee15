// Client: the endpoints, failover among them, credentials and the retry
// rule every call shares.
import { createClient, type Client as RpcClient, type Interceptor } from "@connectrpc/connect";
import { Http2SessionManager, createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { LockService } from "./gen/leasegate/v1/lock_pb.js";
import {
  AbortedError,
  ClosedError,
  InvalidArgumentError,
  LeasegateError,
  UnavailableError,
  classify,
  opMessage,
  rateLimitDelay,
  reasonOf,
  retryable,
} from "./errors.js";
import { ErrorReason } from "./gen/leasegate/v1/errors_pb.js";
import { config, type ClientOptions, type Config } from "./options.js";
import { Backoff, sleep } from "./retry.js";

/** LockRpc is the generated LockService client of one endpoint. */
export type LockRpc = RpcClient<typeof LockService>;

/** CallOptions bound one attempt: its abort signal and timeout. */
export interface AttemptOptions {
  signal: AbortSignal;
  timeoutMs?: number;
}

/** An attempt of a call against one gateway. */
export type Attempt<T> = (rpc: LockRpc, opts: AttemptOptions) => Promise<T>;

/**
 * The largest message the SDK reads from a gateway: leasegate's answers
 * are small, and connect's own bound (4 GiB) would let a broken gateway
 * make the SDK buffer any amount. The Python SDK's bound is the same.
 */
export const MAX_MESSAGE_BYTES = 4 << 20;

/** @internal Closable is what a client's close ends: a lock's keeper or a session. */
export interface Closable {
  end(err: ClosedError): void;
}

interface Endpoint {
  url: string;
  rpc: LockRpc;
  /** The HTTP/2 connection, which close ends; undefined over HTTP/1.1. */
  session: Http2SessionManager | undefined;
}

/**
 * Core talks to one or more leasegate gateways; any gateway serves any
 * call. A call that fails retryably (a gateway down, stopping or cut off
 * from etcd) moves on to the next endpoint, keeping its request id.
 */
export class Core {
  /** @internal */ readonly cfg: Config;
  private readonly eps: Endpoint[];
  private cur = 0;
  private closed = false;
  /** Aborted by close: every call's signal follows it. */
  private readonly closing = new AbortController();
  /** The keepers and sessions close ends. */
  private readonly open = new Set<Closable>();

  /** Creates a client of the given endpoints ("http://host:port", "https://…", or "host:port"). */
  constructor(endpoints: string[], opts: ClientOptions = {}) {
    this.cfg = config(opts);
    if (endpoints.length === 0) {
      throw new InvalidArgumentError("leasegate: no endpoints; want at least one gateway address");
    }
    const interceptors: Interceptor[] = [];
    const token = this.cfg.token;
    if (token) {
      interceptors.push((next) => async (req) => {
        req.header.set("authorization", "Bearer " + (await token()));
        return next(req);
      });
    }
    const tls = this.cfg.tls;
    this.eps = endpoints.map((e) => {
      const url = /^[a-z]+:\/\//.test(e) ? e : (tls ? "https://" : "http://") + e;
      const nodeOptions = tls ? { ca: tls.ca, cert: tls.cert, key: tls.key, servername: tls.servername } : undefined;
      // An HTTP/2 connection of our own, so that close can end it rather
      // than leave it open until it idles out.
      const session = this.cfg.httpVersion === "2" ? new Http2SessionManager(url, undefined, nodeOptions) : undefined;
      const readMaxBytes = MAX_MESSAGE_BYTES;
      const transport =
        this.cfg.protocol === "grpc"
          ? createGrpcTransport({ baseUrl: url, interceptors, sessionManager: session, readMaxBytes })
          : session
            ? createConnectTransport({ baseUrl: url, httpVersion: "2", interceptors, sessionManager: session, readMaxBytes })
            : createConnectTransport({ baseUrl: url, httpVersion: "1.1", interceptors, nodeOptions, readMaxBytes });
      return { url, rpc: createClient(LockService, transport), session };
    });
  }

  /** The endpoints, in order. */
  get endpoints(): string[] {
    return this.eps.map((e) => e.url);
  }

  /**
   * Closes the client and its connections, and ends its locks and
   * sessions: their signals abort at once, a lock's with a LockLostError
   * whose cause is a ClosedError, a session's with the ClosedError. It
   * sends nothing: the locks and sessions are not released on the
   * gateways but lapse there with their leases, within their TTL (release
   * them first to free the names at once). Calls under way fail, later
   * ones throw ClosedError, and no request leaves the client once close
   * has returned. It does not block and is idempotent.
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    const err = new ClosedError("leasegate: the client was closed");
    this.closing.abort(err);
    for (const x of [...this.open]) x.end(err);
    this.open.clear();
    for (const e of this.eps) e.session?.abort(err);
  }

  /** @internal isClosed reports whether close was called. */
  get isClosed(): boolean {
    return this.closed;
  }

  /** @internal checkOpen throws ClosedError on a closed client. */
  checkOpen(op: string, cause?: unknown): void {
    if (this.closed) throw new ClosedError(opMessage(op, "closed"), cause);
  }

  /**
   * @internal track has close end x; the function it returns forgets x.
   * On a closed client it ends x at once.
   */
  track(x: Closable): () => void {
    if (this.closed) {
      x.end(new ClosedError("leasegate: the client was closed"));
      return () => {};
    }
    this.open.add(x);
    return () => this.open.delete(x);
  }

  /** @internal signalFor is a call's signal: aborted by the caller's, or by close. */
  signalFor(caller?: AbortSignal): AbortSignal {
    return caller ? AbortSignal.any([caller, this.closing.signal]) : this.closing.signal;
  }

  /** @internal pick returns the current endpoint's index and client. */
  pick(): [number, LockRpc] {
    const i = this.cur;
    return [i, this.eps[i]!.rpc];
  }

  /** @internal failed moves on from endpoint i, unless another call already did. */
  failed(i: number): void {
    if (this.cur === i) this.cur = (i + 1) % this.eps.length;
  }

  /** @internal endpointCount is the number of endpoints. */
  get endpointCount(): number {
    return this.eps.length;
  }

  /** @internal newBackoff returns a backoff with the client's bounds. */
  newBackoff(): Backoff {
    return new Backoff(this.cfg.backoffInitialMs, this.cfg.backoffMaxMs);
  }

  /**
   * @internal call runs fn against the current endpoint and, while
   * failures are retryable, the next ones: at most max(3, endpoints)
   * attempts, pausing (backoff) only after each round of every endpoint.
   * A rate limit is waited out on the same gateway, for the delay its
   * RetryInfo gives, within the same attempts; when the delay would end
   * after `until` (a reading of the client's clock) it throws at once.
   */
  async call<T>(op: string, fn: Attempt<T>, opts: { signal?: AbortSignal; until?: number; timeoutMs?: number } = {}): Promise<T> {
    this.checkOpen(op);
    const signal = this.signalFor(opts.signal);
    const attempts = Math.max(3, this.eps.length);
    const bo = this.newBackoff();
    let last: unknown;
    let pause = 0;
    for (let a = 0; a < attempts; a++) {
      if (pause === 0 && a > 0 && a % this.eps.length === 0) pause = bo.next();
      if (pause > 0) {
        if (opts.until !== undefined && this.cfg.now() + pause >= opts.until) break;
        await sleep(pause, signal).catch((e: unknown) => {
          this.checkOpen(op, last ?? e);
          throw new AbortedError(opMessage(op, "aborted"), last ?? e);
        });
        pause = 0;
      }
      // A connection close aborted may be opened again: never after close.
      this.checkOpen(op, last);
      const [i, rpc] = this.pick();
      let timeoutMs = opts.timeoutMs ?? this.cfg.requestTimeoutMs;
      if (opts.until !== undefined) timeoutMs = Math.min(timeoutMs, opts.until - this.cfg.now());
      timeoutMs = Math.floor(timeoutMs); // the wire takes whole milliseconds; rounding down is never late
      if (timeoutMs <= 0) break;
      try {
        return await fn(rpc, { signal, timeoutMs });
      } catch (err) {
        if (opts.signal?.aborted) throw new AbortedError(opMessage(op, "aborted"), err);
        this.checkOpen(op, err);
        const delay = rateLimitDelay(err);
        if (delay !== undefined) {
          pause = delay > 0 ? delay : bo.next();
          if (opts.until !== undefined && this.cfg.now() + pause >= opts.until) throw classify(op, err);
          last = err;
          continue;
        }
        if (!retryable(err)) throw classify(op, err);
        this.failed(i);
        last = err;
      }
    }
    if (last !== undefined && rateLimitDelay(last) !== undefined) throw classify(op, last);
    if (last !== undefined && reasonOf(last) === ErrorReason.SHARD_UNAVAILABLE) {
      throw new UnavailableError(opMessage(op, "the gateway answers, but the name's shard does not", last), last);
    }
    throw last instanceof LeasegateError ? last : new UnavailableError(opMessage(op, "no gateway available", last), last);
  }
}
