// Fleet overview: one row per shard and the handoff-latency chart, from
// GET /ui/api/overview every 2 s. Rates are the difference of two polls'
// counters over the time between them. The operator sees every tenant's
// figures (scope "process"); anyone else its own tenant's locks only, and
// no rates or latency, which cover every tenant.

import { get } from './api.js';
import { h, table } from './dom.js';
import { latencyChart, windowQuantiles } from './chart.js';
import { say } from './notice.js';

const EVERY = 2000;
const HISTORY = 150; // polls kept for the chart: 5 minutes

export function overviewPage(root) {
  const ctl = new AbortController();
  const history = []; // {t, o}
  const who = document.getElementById('who');
  let timer = 0;

  async function poll() {
    try {
      const o = await get('/ui/api/overview', ctl.signal);
      history.push({ t: Date.parse(o.time), o });
      if (history.length > HISTORY) history.shift();
      who.textContent = o.identity.method === 'none' ? 'no authentication' : `${o.identity.tenant} / ${o.identity.subject} (${[o.identity.method, ...(o.identity.roles || [])].join(', ')})`;
      draw(root, history);
      say('');
    } catch (err) {
      if (ctl.signal.aborted) return;
      if (err.code !== 'unauthenticated') say(`Overview: ${err.message}`);
    }
    if (!ctl.signal.aborted) timer = setTimeout(poll, EVERY);
  }
  poll();
  return () => { ctl.abort(); clearTimeout(timer); };
}

function rate(now, prev, pick) {
  const a = pick(now.o);
  const b = prev && pick(prev.o);
  if (a === undefined || b === undefined || now.t <= prev.t) return '–';
  return ((a - b) / ((now.t - prev.t) / 1000)).toFixed(1);
}

function draw(root, history) {
  const now = history[history.length - 1];
  const prev = history[history.length - 2];
  const o = now.o;
  const rows = o.shards.map((sh) => h('tr', { 'data-shard': sh.name },
    h('td', {}, sh.name),
    h('td', {}, h('span', { class: `pill ${sh.health === 'ok' ? 'good' : sh.health ? 'bad' : ''}` }, sh.health || 'unknown')),
    h('td', {}, h('span', { class: `pill ${sh.breaker === 'closed' ? 'good' : sh.breaker === 'open' ? 'bad' : 'warn'}` }, sh.breaker)),
    h('td', { class: 'num', 'data-col': 'held' }, sh.held ?? '–', sh.partial ? '+' : ''),
    h('td', { class: 'num', 'data-col': 'waiting' }, sh.waiting ?? '–', sh.partial ? '+' : ''),
    h('td', { class: 'num' }, rate(now, prev, (x) => x.shards.find((y) => y.name === sh.name)?.renewals)),
    h('td', { class: 'muted' }, sh.countError || '')));
  const hist = o.handoff;
  const process = o.scope === 'process';
  const whose = process ? 'every tenant’s locks' : `the locks of tenant ${o.identity.tenant || '(unnamed)'}`;
  let metrics = 'This gateway keeps no metrics (--metrics=false): no rates or latency.';
  if (o.metrics && process) metrics = `Session keepalives/s on this gateway: ${rate(now, prev, (x) => x.sessionKeepalives)}`;
  else if (o.metrics) metrics = 'Rates and latency cover every tenant of this gateway: only its operator sees them.';
  root.replaceChildren(
    h('h1', {}, 'Fleet overview'),
    h('p', { class: 'muted', id: 'scope' }, `Shard map epoch ${o.epoch} · ${o.shards.length} shard${o.shards.length === 1 ? '' : 's'} · held and waiting: ${whose} · as of ${new Date(o.time).toLocaleTimeString()}`),
    table(['Shard', 'Health', 'Breaker', 'Held', 'Waiting', 'Keepalives/s', ''], rows, { id: 'shards' }),
    h('p', { class: 'muted' }, metrics),
    h('h2', {}, 'Handoff latency'),
    h('p', { class: 'muted' }, 'From a release to the next waiter’s grant, as this gateway saw it (leasegate_handoff_duration_seconds).'),
    o.metrics && process ? latencyChart(hist, windowQuantiles(history.map((x) => ({ t: x.t, hist: x.o.handoff })))) : h('p', {}, '–'));
}
