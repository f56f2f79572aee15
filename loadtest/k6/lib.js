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
// loopback host: these scripts load only this machine.
export function requireLoopback(target) {
  const m = /^(?:[a-z]+:\/\/)?(\[[^\]]+\]|[^:/]+)/i.exec(target);
  const host = m ? m[1].replace(/^\[|\]$/g, '') : '';
  const ok = host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
  if (!ok) {
    throw new Error(`refusing to load ${target}: only loopback targets (127.0.0.0/8, ::1, localhost) are allowed`);
  }
}
