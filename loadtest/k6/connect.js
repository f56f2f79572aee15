// acquire (TryAcquire) → renew → release over the Connect protocol with
// JSON bodies (k6/http): what a browser or curl client of the Connect
// service sends.
//
//   k6 run -e LEASEGATE_ENDPOINT=http://127.0.0.1:7070 loadtest/k6/connect.js
import http from 'k6/http';
import { check } from 'k6';
import { shapes, fill, hasAll, capture, requireLoopback, target, bearer, authHeaders, clientCert, httpTLSAuth } from './lib.js';

// Where and as whom: LEASEGATE_ENDPOINT, LEASEGATE_TOKEN or
// LEASEGATE_TOKEN_FILE, LEASEGATE_CERT and LEASEGATE_KEY, and
// LEASEGATE_ALLOW_REMOTE=1 for a target that is not loopback (lib.js).
const TARGET = target(__ENV);
const BASE_URL = TARGET.url;
const TOKEN = bearer(__ENV, open);
const TLS_AUTH = httpTLSAuth(clientCert(__ENV, open));

export const options = {
  vus: Number(__ENV.VUS || 10),
  tlsAuth: TLS_AUTH,
  duration: __ENV.DURATION || '30s',
  thresholds: {
    'http_req_failed': ['rate<0.01'],
    'checks': ['rate>0.99'],
    'http_req_duration{step:acquire}': ['p(99)<250'],
    'http_req_duration{step:renew}': ['p(99)<250'],
    'http_req_duration{step:release}': ['p(99)<250'],
  },
};

export function setup() {
  requireLoopback(BASE_URL, TARGET.allowRemote);
}

export default function () {
  const vars = { name: `k6-connect-${__VU}` };
  for (const s of shapes.connect) {
    const res = http.request(s.method, BASE_URL + s.path, JSON.stringify(fill(s.body, vars)), {
      headers: authHeaders(s.headers, TOKEN),
      tags: { step: s.step },
    });
    const body = res.body ? res.json() : {};
    const ok = check(res, {
      [`${s.step}: status ${s.status.join('|')}`]: (r) => s.status.includes(r.status),
      [`${s.step}: has ${s.reads.join(', ')}`]: () => hasAll(body, s.reads),
    });
    if (!ok || (s.step === 'acquire' && body.acquired !== true)) {
      return;
    }
    capture(vars, body, s.captures);
  }
}
