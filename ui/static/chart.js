// The handoff-latency chart, drawn by hand as inline SVG: the distribution
// since the gateway started (bars per histogram bucket) and, beside it,
// p50 and p99 of each poll interval that saw handoffs.

import { h, s } from './dom.js';

const W = 360, H = 160, PAD = 28;

/** quantile of a cumulative histogram ({bounds, cumulative, count}); seconds. */
export function quantile(hist, q) {
  if (!hist || !hist.count) return NaN;
  const rank = q * hist.count;
  for (let i = 0; i < hist.bounds.length; i++) {
    if (hist.cumulative[i] >= rank) {
      const lo = i ? hist.bounds[i - 1] : 0;
      const below = i ? hist.cumulative[i - 1] : 0;
      const inBucket = hist.cumulative[i] - below;
      return lo + (hist.bounds[i] - lo) * (inBucket ? (rank - below) / inBucket : 1);
    }
  }
  return hist.bounds[hist.bounds.length - 1];
}

function minus(a, b) {
  if (!a) return null;
  if (!b) return a;
  return { bounds: a.bounds, cumulative: a.cumulative.map((c, i) => c - (b.cumulative[i] || 0)), count: a.count - b.count };
}

/** windowQuantiles turns polls [{t, hist}] into [{t, p50, p99}] per interval. */
export function windowQuantiles(polls) {
  const out = [];
  for (let i = 1; i < polls.length; i++) {
    const d = minus(polls[i].hist, polls[i - 1].hist);
    out.push({ t: polls[i].t, p50: quantile(d, 0.5), p99: quantile(d, 0.99) });
  }
  return out;
}

const ms = (sec) => (sec >= 1 ? `${sec.toFixed(1)} s` : `${(sec * 1000).toFixed(sec < 0.01 ? 1 : 0)} ms`);

function distribution(hist) {
  const n = hist.bounds.length;
  const counts = hist.cumulative.map((c, i) => c - (i ? hist.cumulative[i - 1] : 0));
  counts.push(hist.count - (hist.cumulative[n - 1] || 0)); // +Inf
  const top = Math.max(1, ...counts);
  const bw = (W - 2 * PAD) / counts.length;
  const g = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': 'handoff latency distribution' });
  g.append(s('line', { x1: PAD, y1: H - PAD, x2: W - PAD, y2: H - PAD, class: 'axis' }));
  counts.forEach((c, i) => {
    const bh = ((H - 2 * PAD) * c) / top;
    g.append(s('rect', { x: PAD + i * bw + 1, y: H - PAD - bh, width: Math.max(1, bw - 2), height: bh, class: 'bar' },
      s('title', {}, `≤ ${i < n ? ms(hist.bounds[i]) : '∞'}: ${c}`)));
    if (i % Math.ceil(counts.length / 6) === 0) {
      g.append(s('text', { x: PAD + i * bw + bw / 2, y: H - PAD + 14, class: 'tick' }, i < n ? ms(hist.bounds[i]) : '∞'));
    }
  });
  g.append(s('text', { x: PAD, y: PAD - 10, class: 'tick start' }, `${top} max per bucket`));
  return g;
}

function overTime(points) {
  const g = s('svg', { viewBox: `0 0 ${W} ${H}`, class: 'chart', role: 'img', 'aria-label': 'handoff latency over time' });
  g.append(s('line', { x1: PAD, y1: H - PAD, x2: W - PAD, y2: H - PAD, class: 'axis' }));
  const seen = points.filter((p) => Number.isFinite(p.p99));
  if (seen.length === 0) {
    g.append(s('text', { x: W / 2, y: H / 2, class: 'tick' }, 'no handoffs while this page was open'));
    return g;
  }
  const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
  const top = Math.max(...seen.map((p) => p.p99));
  const x = (t) => PAD + ((W - 2 * PAD) * (t - t0)) / (t1 - t0);
  const y = (v) => H - PAD - ((H - 2 * PAD) * v) / top;
  for (const [key, cls] of [['p99', 'p99'], ['p50', 'p50']]) {
    const pts = seen.map((p) => `${x(p.t).toFixed(1)},${y(p[key]).toFixed(1)}`).join(' ');
    g.append(s('polyline', { points: pts, class: `line ${cls}` }));
    seen.forEach((p) => g.append(s('circle', { cx: x(p.t), cy: y(p[key]), r: 2, class: `dot ${cls}` })));
  }
  g.append(s('text', { x: PAD, y: PAD - 10, class: 'tick start' }, `top ${ms(top)} · p99 (dark), p50 (light) per 2 s`));
  return g;
}

/** latencyChart draws hist (cumulative, may be null) and points [{t, p50, p99}]. */
export function latencyChart(hist, points) {
  if (!hist || !hist.count) {
    return h('div', { class: 'charts', id: 'handoff' }, h('p', { class: 'muted' }, 'No handoffs yet: a handoff is a waiter granted when the holder ahead goes.'));
  }
  return h('div', { class: 'charts', id: 'handoff' },
    h('figure', {}, distribution(hist),
      h('figcaption', {}, `${hist.count} handoff${hist.count === 1 ? '' : 's'} since start · p50 ${ms(quantile(hist, 0.5))} · p99 ${ms(quantile(hist, 0.99))} · mean ${ms(hist.sum / hist.count)}`)),
    h('figure', {}, overTime(points), h('figcaption', {}, 'Per poll interval, while this page is open')));
}
