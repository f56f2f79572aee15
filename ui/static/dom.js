// Small helpers to build the DOM without innerHTML: every string from the
// gateway becomes a text node, never markup.

const SVG = 'http://www.w3.org/2000/svg';

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** h('td', {class: 'num'}, 'text', child…) creates an HTML element. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** s('rect', {x: 1}) creates an SVG element. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG, tag), attrs, children);
}

/** table(headings, rows) builds a table; rows are arrays of cells or <tr>s. */
export function table(headings, rows, attrs) {
  return h('table', attrs,
    h('thead', {}, h('tr', {}, headings.map((t) => h('th', {}, t)))),
    h('tbody', {}, rows));
}

/** duration formats milliseconds for people: 850 ms, 12.3 s, 4 m 05 s. */
export function duration(ms) {
  if (!Number.isFinite(ms)) return '–';
  if (ms < 0) return 'expired';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  return `${m} m ${String(Math.floor((ms % 60000) / 1000)).padStart(2, '0')} s`;
}

/** since formats how long ago an RFC 3339 time was. */
export function since(iso) {
  return iso ? duration(Date.now() - Date.parse(iso)) : '–';
}
