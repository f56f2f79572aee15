// Streaming Acquire over gRPC (k6/net/grpc, service found by server
// reflection), then Release. VUs share NAMES names, so most acquires wait
// in line and the stream reports queue positions before the grant.
//
//   k6 run -e GRPC_ADDR=127.0.0.1:7070 -e VUS=20 -e NAMES=4 loadtest/k6/grpc_stream.js
import grpc from 'k6/net/grpc';
import { check } from 'k6';
import { Rate, Trend } from 'k6/metrics';
import { shapes, fill, hasAll, capture, requireLoopback, target, bearer, clientCert } from './lib.js';

// Where and as whom: LEASEGATE_ENDPOINT (its scheme decides TLS) or
// GRPC_ADDR, LEASEGATE_TOKEN or LEASEGATE_TOKEN_FILE, LEASEGATE_CACERT,
// LEASEGATE_CERT and LEASEGATE_KEY, and LEASEGATE_ALLOW_REMOTE=1 for a
// target that is not loopback (lib.js).
const TARGET = target(__ENV);
const GRPC_ADDR = TARGET.grpcAddr;
const TOKEN = bearer(__ENV, open);
const TLS = clientCert(__ENV, open);
// Reflection needs no credentials; the lock service's calls do.
const METADATA = TOKEN ? { authorization: `Bearer ${TOKEN}` } : {};
const NAMES = Number(__ENV.NAMES || 4);

// grant_ms is from opening the stream to the Granted message; errors
// counts iterations that did not end with a grant and a release; queued is
// the share of acquires that waited in line (a Queued message came first).
const grantMs = new Trend('grant_ms', true);
const errors = new Rate('errors');
const queued = new Rate('queued');

export const options = {
  vus: Number(__ENV.VUS || 8),
  duration: __ENV.DURATION || '30s',
  thresholds: {
    'errors': ['rate<0.01'],
    'grant_ms': ['p(99)<5000'],
    'grpc_req_duration{step:release}': ['p(99)<250'],
  },
};

const client = new grpc.Client();
let connected = false;

export function setup() {
  requireLoopback(GRPC_ADDR, TARGET.allowRemote);
}

export default function () {
  if (!connected) {
    const params = { plaintext: TARGET.plaintext, reflect: true };
    if (TLS) {
      params.tls = TLS;
    }
    client.connect(GRPC_ADDR, params);
    connected = true;
  }
  const a = shapes.grpc.acquire;
  const vars = { name: `k6-stream-${__VU % NAMES}` };
  const started = Date.now();
  let granted = null;
  let sawQueued = false;

  const stream = new grpc.Stream(client, a.method, { tags: { step: 'acquire' }, metadata: METADATA });
  stream.on('data', (msg) => {
    if (msg.queued && hasAll(msg, a.queuedReads)) {
      sawQueued = true;
    }
    if (msg.granted) {
      granted = msg;
      grantMs.add(Date.now() - started);
    }
  });
  // k6 emits 'end' after 'error' too: each iteration is counted once, by
  // whichever of the two sees its outcome first.
  let counted = false;
  const count = (failed) => {
    if (!counted) {
      counted = true;
      errors.add(failed);
    }
  };
  stream.on('error', () => {
    count(true);
  });
  stream.on('end', () => {
    const ok = check(granted, {
      'acquire: granted with lockId and fencingToken': (g) => g !== null && hasAll(g, a.reads),
    });
    if (!ok) {
      count(true);
      return;
    }
    capture(vars, granted, a.captures);
    const r = shapes.grpc.release;
    const res = client.invoke(r.method, fill(r.message, vars), { tags: { step: 'release' }, metadata: METADATA });
    const released = check(res, {
      'release: status OK': (x) => x && x.status === grpc.StatusOK,
      'release: has released': (x) => x && hasAll(x.message, r.reads),
    });
    count(!released);
    queued.add(sawQueued);
  });
  stream.write(fill(a.message, vars));
  stream.end();
}
