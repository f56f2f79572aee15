// Decoding of the google.rpc error details a gateway attaches to its
// errors: ErrorInfo (the leasegate reason, its shard and limit) and
// RetryInfo (a rate limit's delay). They are read with the wire reader of
// @bufbuild/protobuf rather than generated, so that the SDK carries no copy
// of googleapis: both messages are a few stable fields.
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";
import { ConnectError } from "@connectrpc/connect";

/** The domain of the ErrorInfo detail of leasegate's errors. */
export const ERROR_DOMAIN = "leasegate.dev";

const ERROR_INFO = "google.rpc.ErrorInfo";
const RETRY_INFO = "google.rpc.RetryInfo";

/** google.rpc.ErrorInfo. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

/** rawDetails returns the encoded details of typeName that err carries. */
function rawDetails(err: ConnectError, typeName: string): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (const d of err.details) {
    // A received detail keeps its type name and encoded bytes.
    if ("type" in d && d.type === typeName && d.value instanceof Uint8Array) {
      out.push(d.value);
    }
  }
  return out;
}

/** decodeErrorInfo reads an ErrorInfo message (reason 1, domain 2, metadata 3). */
export function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const r = new BinaryReader(bytes);
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (field === 1 && wt === WireType.LengthDelimited) {
      info.reason = r.string();
    } else if (field === 2 && wt === WireType.LengthDelimited) {
      info.domain = r.string();
    } else if (field === 3 && wt === WireType.LengthDelimited) {
      const entry = new BinaryReader(r.bytes());
      let k = "";
      let v = "";
      while (entry.pos < entry.len) {
        const [ef, ewt] = entry.tag();
        if (ef === 1 && ewt === WireType.LengthDelimited) k = entry.string();
        else if (ef === 2 && ewt === WireType.LengthDelimited) v = entry.string();
        else entry.skip(ewt);
      }
      info.metadata[k] = v;
    } else {
      r.skip(wt);
    }
  }
  return info;
}

/**
 * decodeRetryDelayMs reads a RetryInfo message (retry_delay 1, a
 * google.protobuf.Duration of seconds 1 and nanos 2) as milliseconds,
 * rounded up and never negative.
 */
export function decodeRetryDelayMs(bytes: Uint8Array): number {
  const r = new BinaryReader(bytes);
  let ms = 0;
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (field === 1 && wt === WireType.LengthDelimited) {
      const d = new BinaryReader(r.bytes());
      let seconds = 0n;
      let nanos = 0;
      while (d.pos < d.len) {
        const [df, dwt] = d.tag();
        if (df === 1 && dwt === WireType.Varint) seconds = BigInt(d.int64());
        else if (df === 2 && dwt === WireType.Varint) nanos = d.int32();
        else d.skip(dwt);
      }
      ms = Number(seconds) * 1000 + Math.ceil(nanos / 1e6);
    } else {
      r.skip(wt);
    }
  }
  return Math.max(ms, 0);
}

/** errorInfo returns the leasegate ErrorInfo of a gateway error, if any. */
export function errorInfo(err: ConnectError): ErrorInfo | undefined {
  for (const raw of rawDetails(err, ERROR_INFO)) {
    try {
      const info = decodeErrorInfo(raw);
      if (info.domain === ERROR_DOMAIN) return info;
    } catch {
      // A detail that does not decode is not leasegate's.
    }
  }
  return undefined;
}

/** retryInfoMs returns the RetryInfo delay of a gateway error in ms, if it has one. */
export function retryInfoMs(err: ConnectError): number | undefined {
  for (const raw of rawDetails(err, RETRY_INFO)) {
    try {
      return decodeRetryDelayMs(raw);
    } catch {
      // Not decodable: as if absent.
    }
  }
  return undefined;
}
