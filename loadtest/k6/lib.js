// Helpers shared by the leasegate k6 scripts.

// shapes are the requests the scripts send and the fields they read; the
// Go test replay_test.go replays the same file against a real gateway.
export const shapes = JSON.parse(open('./shapes.json'));

// fill returns a copy of template with every string "$x" replaced by
// vars[x], keeping its type (a fencing token stays a number in REST).
export function fill(template, vars) {
  if (typeof template === 'string' && template.startsWith('$')) {
    const key = template.slice(1);
    if (!(key in vars)) {
      throw new Error(`no value for ${template}`);
    }
    return vars[key];
  }
  if (Array.isArray(template)) {
    return template.map((v) => fill(v, vars));
  }
  if (template !== null && typeof template === 'object') {
    const out = {};
    for (const [k, v] of Object.entries(template)) {
      out[k] = fill(v, vars);
    }
    return out;
  }
  return template;
}

// field reads a dotted path ("granted.lockId") from an object, or
// undefined.
export function field(obj, path) {
  let v = obj;
  for (const part of path.split('.')) {
    if (v === null || typeof v !== 'object') {
      return undefined;
    }
    v = v[part];
  }
  return v;
}

// hasAll reports whether every path in paths is present in obj.
export function hasAll(obj, paths) {
  return paths.every((p) => field(obj, p) !== undefined);
}

// capture sets vars[name] from obj at path for each entry of captures.
export function capture(vars, obj, captures) {
  for (const [name, path] of Object.entries(captures)) {
    vars[name] = field(obj, path);
  }
}

// requireLoopback throws unless target (a URL or host:port) names a
// loopback host, or allowRemote is set: by default these scripts load
// only this machine.
export function requireLoopback(target, allowRemote = false) {
  const m = /^(?:[a-z]+:\/\/)?(\[[^\]]+\]|[^:/]+)/i.exec(target);
  const host = m ? m[1].replace(/^\[|\]$/g, '') : '';
  const ok = host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
  if (!ok && !allowRemote) {
    throw new Error(`refusing to load ${target}: only loopback targets (127.0.0.0/8, ::1, localhost) are allowed ` +
      'unless LEASEGATE_ALLOW_REMOTE=1 (load only gateways you run)');
  }
}

const defaultEndpoint = 'http://127.0.0.1:7070';

// target reads where to send load from the environment (k6 gives the
// process environment and every -e NAME=value as __ENV):
//   LEASEGATE_ENDPOINT       the gateway's base URL, http:// or https://;
//                            default http://127.0.0.1:7070
//   GRPC_ADDR                host:port for gRPC; default the endpoint's
//   LEASEGATE_ALLOW_REMOTE   1 to allow a target that is not loopback
// It returns { url, grpcAddr, plaintext, allowRemote } and throws on a
// malformed value, naming it.
export function target(env) {
  const allow = env.LEASEGATE_ALLOW_REMOTE || '';
  if (allow !== '' && allow !== '0' && allow !== '1') {
    throw new Error(`LEASEGATE_ALLOW_REMOTE=${allow}: want 1 (allow a remote target) or 0`);
  }
  const url = (env.LEASEGATE_ENDPOINT || defaultEndpoint).replace(/\/+$/, '');
  const m = /^(https?):\/\/(\[[^\]]+\]|[^:/]+)(?::(\d+))?$/.exec(url);
  if (!m) {
    throw new Error(`LEASEGATE_ENDPOINT=${url}: want http://HOST[:PORT] or https://HOST[:PORT], without a path`);
  }
  const port = m[3] || (m[1] === 'https' ? '443' : '80');
  const grpcAddr = env.GRPC_ADDR || `${m[2]}:${port}`;
  return { url, grpcAddr, plaintext: m[1] === 'http', allowRemote: allow === '1' };
}

// bearer reads the bearer token (a static token or a JWT) from
// LEASEGATE_TOKEN, or from the file LEASEGATE_TOKEN_FILE names (read once,
// with readFile: k6's open, in the init context, which resolves a relative
// path against the script's directory), trimmed of whitespace.
// It returns '' when neither is set, and throws when both are, or on a
// token that cannot be sent in a header.
export function bearer(env, readFile) {
  if (env.LEASEGATE_TOKEN && env.LEASEGATE_TOKEN_FILE) {
    throw new Error('LEASEGATE_TOKEN and LEASEGATE_TOKEN_FILE are both set; set one');
  }
  let token = (env.LEASEGATE_TOKEN || '').trim();
  if (env.LEASEGATE_TOKEN_FILE) {
    token = readFile(env.LEASEGATE_TOKEN_FILE).trim();
    if (token === '') {
      throw new Error(`LEASEGATE_TOKEN_FILE=${env.LEASEGATE_TOKEN_FILE} is empty`);
    }
  }
  if (/[\s\x00-\x1f\x7f]/.test(token)) {
    throw new Error('the bearer token contains whitespace or a control character; want the bare token');
  }
  return token;
}

// authHeaders is headers plus the Authorization header of token, if any.
export function authHeaders(headers, token) {
  return token ? Object.assign({}, headers, { Authorization: `Bearer ${token}` }) : headers;
}

// clientCert reads a client certificate for mTLS from LEASEGATE_CERT and
// LEASEGATE_KEY (PEM files, read with readFile) and LEASEGATE_CACERT;
// null without one. Both or neither of cert and key must be set.
export function clientCert(env, readFile) {
  if (!env.LEASEGATE_CERT !== !env.LEASEGATE_KEY) {
    throw new Error('LEASEGATE_CERT and LEASEGATE_KEY go together; got only one');
  }
  const out = {};
  if (env.LEASEGATE_CERT) {
    out.cert = readFile(env.LEASEGATE_CERT);
    out.key = readFile(env.LEASEGATE_KEY);
  }
  if (env.LEASEGATE_CACERT) {
    out.cacerts = [readFile(env.LEASEGATE_CACERT)];
  }
  return Object.keys(out).length ? out : null;
}

// httpTLSAuth is k6/http's tlsAuth option for the client certificate of
// clientCert (undefined without one). k6/http trusts only the system's CA
// roots, so a private CA (LEASEGATE_CACERT) must be added there instead.
export function httpTLSAuth(tls) {
  if (tls && tls.cacerts) {
    throw new Error('LEASEGATE_CACERT: k6/http trusts only the system\'s CA roots; add the CA to them and unset LEASEGATE_CACERT');
  }
  return tls && tls.cert ? [{ cert: tls.cert, key: tls.key }] : undefined;
}
