// The gateway's APIs as the browser speaks them: Connect with JSON, unary
// (POST application/json) and server streaming (application/connect+json,
// 5-byte envelopes, read with fetch and a ReadableStream), plus the
// console's own GET /ui/api/ endpoints. Every call carries the bearer
// token the operator entered, kept in sessionStorage for this tab.

const TOKEN_KEY = 'leasegate.token';

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || '',
  set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** APIError is a refused call: code is Connect's (unauthenticated, …). */
export class APIError extends Error {
  constructor(code, message) {
    super(message || code);
    this.code = code || 'unknown';
  }
}

const listeners = new Set();
/** onUnauthenticated(fn) calls fn whenever a call lacks valid credentials. */
export function onUnauthenticated(fn) { listeners.add(fn); }

function fail(err) {
  if (err.code === 'unauthenticated') listeners.forEach((fn) => fn(err));
  throw err;
}

function headers(contentType) {
  const hs = { 'Connect-Protocol-Version': '1' };
  if (contentType) hs['Content-Type'] = contentType;
  const t = token.get();
  if (t) hs.Authorization = `Bearer ${t}`;
  return hs;
}

async function errorOf(res) {
  const body = await res.json().catch(() => ({}));
  const e = body.error || body;
  return new APIError(e.code || `http_${res.status}`, e.message || res.statusText);
}

/** call invokes a unary RPC: call('LockService', 'ListLocks', {prefix}). */
export async function call(service, method, req, signal) {
  const res = await fetch(`/leasegate.v1.${service}/${method}`, {
    method: 'POST', headers: headers('application/json'), body: JSON.stringify(req || {}), signal,
  });
  if (!res.ok) fail(await errorOf(res));
  return res.json();
}

/** get fetches one of the console's JSON endpoints. */
export async function get(path, signal) {
  const res = await fetch(path, { headers: headers(), signal, cache: 'no-store' });
  if (!res.ok) fail(await errorOf(res));
  return res.json();
}

function envelope(msg) {
  const body = new TextEncoder().encode(JSON.stringify(msg));
  const out = new Uint8Array(5 + body.length);
  new DataView(out.buffer).setUint32(1, body.length);
  out.set(body, 5);
  return out;
}

/**
 * stream invokes a server-streaming RPC and yields its messages. It ends
 * when the server ends the stream, and throws APIError for an error.
 */
export async function* stream(service, method, req, signal) {
  const res = await fetch(`/leasegate.v1.${service}/${method}`, {
    method: 'POST', headers: headers('application/connect+json'), body: envelope(req || {}), signal,
  });
  if (!res.ok) fail(await errorOf(res));
  const reader = res.body.getReader();
  const text = new TextDecoder();
  let buf = new Uint8Array(0);
  for (;;) {
    while (buf.length >= 5) {
      const len = new DataView(buf.buffer, buf.byteOffset).getUint32(1);
      if (buf.length < 5 + len) break;
      const flags = buf[0];
      const msg = JSON.parse(text.decode(buf.subarray(5, 5 + len)));
      buf = buf.slice(5 + len);
      if (flags & 2) { // end of stream
        if (msg.error) fail(new APIError(msg.error.code, msg.error.message));
        return;
      }
      yield msg;
    }
    const { value, done } = await reader.read();
    if (done) throw new APIError('unavailable', 'the stream ended without its end message');
    const next = new Uint8Array(buf.length + value.length);
    next.set(buf);
    next.set(value, buf.length);
    buf = next;
  }
}

/**
 * watch follows LockService/Watch for a name prefix until signal aborts,
 * calling onMessage for each message. A stream that ends or fails is
 * resumed after its last message's resume token (a pause that grows to
 * 5 s between failures); onError hears each failure.
 */
export async function watch(prefix, onMessage, onError, signal) {
  let resume = '';
  let pause = 250;
  while (!signal.aborted) {
    try {
      for await (const msg of stream('LockService', 'Watch', { prefix, resumeToken: resume }, signal)) {
        if (msg.resumeToken) resume = msg.resumeToken;
        pause = 250;
        onMessage(msg);
      }
    } catch (err) {
      if (signal.aborted) return;
      onError(err);
      if (err.code === 'unauthenticated' || err.code === 'permission_denied') return;
    }
    await new Promise((r) => setTimeout(r, pause));
    pause = Math.min(pause * 2, 5000);
  }
}

let adminProbe = null;
/** isAdmin reports whether the caller may use AdminService (probed once per token). */
export function isAdmin() {
  if (!adminProbe || adminProbe.token !== token.get()) {
    adminProbe = { token: token.get(), result: call('AdminService', 'ListAudit', { pageSize: 1 }).then(() => true, () => false) };
  }
  return adminProbe.result;
}
