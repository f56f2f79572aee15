// Unit tests of the decoding the live tests cannot reach: fencing tokens
// above 2^53, and the error details of answers a test gateway does not give.
import { test } from "node:test";
import assert from "node:assert/strict";
import { create, fromBinary, fromJsonString, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter } from "@bufbuild/protobuf/wire";
import { Code, ConnectError } from "@connectrpc/connect";
import { AcquireResponseSchema, TryAcquireResponseSchema } from "../src/gen/leasegate/v1/lock_pb.js";
import { classify } from "../src/errors.js";
import { ErrorReason, NotOwnerError, QuotaExceededError, RateLimitedError, WaitTimeoutError, LockLostError, UnavailableError, InternalError } from "../src/index.js";

const big = (1n << 60n) + 7n; // above 2^53: a double would round it

test("a fencing token above 2^53 decodes exactly from binary and JSON", () => {
  const wire = toBinary(AcquireResponseSchema, create(AcquireResponseSchema, { event: { case: "granted", value: { lockId: "l", fencingToken: big, ttlMs: 1000n } } }));
  const m = fromBinary(AcquireResponseSchema, wire);
  assert.equal(m.event.case, "granted");
  assert.equal(m.event.case === "granted" && m.event.value.fencingToken, big);
  // The Connect JSON codec sends int64 as a decimal string.
  const j = fromJsonString(TryAcquireResponseSchema, `{"acquired":true,"granted":{"lockId":"l","fencingToken":"${big}"}}`);
  assert.equal(j.granted?.fencingToken, big);
  assert.equal(typeof j.granted?.fencingToken, "bigint");
});

function errorInfo(reason: string, metadata: Record<string, string> = {}): Uint8Array {
  const w = new BinaryWriter();
  w.tag(1, 2).string(reason);
  w.tag(2, 2).string("leasegate.dev");
  for (const [k, v] of Object.entries(metadata)) {
    w.tag(3, 2).fork().tag(1, 2).string(k).tag(2, 2).string(v).join();
  }
  return w.finish();
}

function retryInfo(seconds: number, nanos: number): Uint8Array {
  return new BinaryWriter().tag(1, 2).fork().tag(1, 0).int64(seconds).tag(2, 0).int32(nanos).join().finish();
}

function wireError(code: Code, reason: string, more: { type: string; value: Uint8Array }[] = [], metadata: Record<string, string> = {}): ConnectError {
  // Details as connect-es keeps the ones it receives: type name and bytes.
  const details = [{ type: "google.rpc.ErrorInfo", value: errorInfo(reason, metadata) }, ...more];
  return new ConnectError("msg", code, new Headers({ "content-type": "application/proto" }), details as unknown as ConstructorParameters<typeof ConnectError>[3]);
}

test("classify maps each reason to its class", () => {
  const cases: [ConnectError, new (...a: never[]) => Error][] = [
    [wireError(Code.PermissionDenied, "NOT_OWNER"), NotOwnerError],
    [wireError(Code.DeadlineExceeded, "WAIT_TIMEOUT"), WaitTimeoutError],
    [wireError(Code.FailedPrecondition, "LOCK_STOLEN"), LockLostError],
    [wireError(Code.ResourceExhausted, "QUOTA_EXCEEDED", [], { limit: "name_waiters" }), QuotaExceededError],
    [wireError(Code.Unavailable, "SHUTTING_DOWN"), UnavailableError],
    [wireError(Code.Internal, ""), InternalError],
    [new ConnectError("stream reset", Code.Internal), UnavailableError],
  ];
  for (const [err, want] of cases) {
    const got = classify("op", err);
    assert.ok(got instanceof want, `classify(${Code[err.code]} ${got.reason}) = ${got.name}; want ${want.name}`);
  }
  assert.equal(classify("op", wireError(Code.FailedPrecondition, "LOCK_STOLEN")).reason, ErrorReason.LOCK_STOLEN);
});

test("a rate limit carries the gateway's RetryInfo delay and limit", () => {
  const err = wireError(Code.ResourceExhausted, "RATE_LIMITED", [{ type: "google.rpc.RetryInfo", value: retryInfo(1, 250_000_000) }], { limit: "tenant_acquire_rate" });
  const got = classify("op", err);
  assert.ok(got instanceof RateLimitedError);
  assert.equal(got.retryAfterMs, 1250);
  assert.equal(got.limit, "tenant_acquire_rate");
});

test("the deadline: send time + min(TTL, valid_for) − margin, moved only later, never revived", async () => {
  const { Core } = await import("../src/client.js");
  const { Keeper, deadlineOf } = await import("../src/keeper.js");
  let now = 0;
  const c = new Core(["http://127.0.0.1:1"], { now: () => now });
  const margin = 3000 / 100 + 100; // the default for a 3 s TTL
  const k = new Keeper(c, "lock", 3000, 0, deadlineOf(c, 0, { ttlMs: 3000, validForMs: 0 }), undefined, false);
  assert.equal(k.expires, 3000 - margin);
  now = 1000;
  assert.ok(k.credit(1000, { ttlMs: 3000, validForMs: 0 }));
  assert.equal(k.expires, 1000 + 3000 - margin);
  assert.ok(k.credit(500, { ttlMs: 3000, validForMs: 0 }), "an older answer is no loss");
  assert.equal(k.expires, 1000 + 3000 - margin, "an older answer does not move the deadline");
  now = 3000;
  assert.ok(k.credit(3000, { ttlMs: 3000, validForMs: 1500 }));
  assert.equal(k.expires, 3000 + 1500 - margin, "valid_for_ms tightens the TTL");
  now = 3000 + 1500 - margin; // the deadline, the timer not yet run
  assert.equal(k.credit(now - 1, { ttlMs: 3000, validForMs: 0 }), false, "an answer at the deadline revives nothing");
  assert.ok(k.signal.aborted);
  assert.ok(k.signal.reason instanceof LockLostError);
  assert.ok((k.signal.reason as LockLostError).cause instanceof UnavailableError);
});
