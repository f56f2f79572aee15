// Lock table: ListLocks with a name prefix, a page at a time. The page is
// read again whenever LockService/Watch reports a change under the prefix
// (and every 5 s while the watch is down).

import { call, watch } from './api.js';
import { h, table, duration } from './dom.js';
import { say } from './notice.js';

const PAGE = 50; // rows per page unless the URL says size=N

export function locksPage(root, params) {
  const ctl = new AbortController();
  const prefix = params.get('prefix') || '';
  const size = Number(params.get('size')) || PAGE;
  const pages = ['']; // page tokens: pages[i] starts page i
  let page = 0;
  let last = null;
  let pending = 0;
  let watching = false;

  const search = h('input', { type: 'search', name: 'prefix', value: prefix, placeholder: 'name prefix', 'aria-label': 'name prefix' });
  const body = h('div', { id: 'locks' });
  const status = h('p', { class: 'muted', id: 'locks-status' });
  root.append(
    h('h1', {}, 'Locks'),
    h('form', { class: 'search', onsubmit: (e) => { e.preventDefault(); location.hash = `#/locks?prefix=${encodeURIComponent(search.value)}`; } },
      search, h('button', { type: 'submit' }, 'Search')),
    body, status);

  async function load() {
    try {
      last = await call('LockService', 'ListLocks', { prefix, pageSize: size, pageToken: pages[page] }, ctl.signal);
      draw();
    } catch (err) {
      if (!ctl.signal.aborted && err.code !== 'unauthenticated') say(`Locks: ${err.message}`);
    }
  }
  // Changes come in bursts (a release, then a grant): one read per 100 ms.
  function reload() {
    if (!pending) pending = setTimeout(() => { pending = 0; load(); }, 100);
  }

  function draw() {
    const rows = (last.locks || []).map((l) => {
      // A semaphore has up to its limit of holders: the first is shown,
      // and how many more hold beside it.
      const holders = l.holders || [];
      const holder = holders[0];
      const others = holders.length > 1 ? ` and ${holders.length - 1} more` : '';
      // Elections are listed beside locks under their own names: a kind
      // column tells them apart, and an election's page is its queue.
      const election = l.kind === 'LOCK_KIND_ELECTION';
      const href = `#/lock/${encodeURIComponent(l.name)}${election ? '?kind=election' : ''}`;
      return h('tr', election ? { 'data-election': l.name } : { 'data-lock': l.name },
        h('td', {}, h('a', { href }, l.name)),
        h('td', { 'data-col': 'kind' }, election ? 'election' : 'lock'),
        h('td', {}, l.shard),
        h('td', { 'data-col': 'holder', title: holders.length > 1 ? holders.map((x) => x.clientId || '(no client id)').join(', ') : undefined }, holder ? (holder.clientId || '(no client id)') + others : h('span', { class: 'muted' }, 'free')),
        h('td', { class: 'num' }, holder ? holder.fencingToken : ''),
        h('td', { class: 'num', 'data-expires': holder?.expiresAt || '' }, holder ? duration(Date.parse(holder.expiresAt) - Date.now()) : ''),
        h('td', { class: 'num', 'data-col': 'waiters' }, l.waiters || '0'));
    });
    const next = last.nextPageToken;
    body.replaceChildren(
      rows.length ? table(['Name', 'Kind', 'Shard', 'Holder', 'Fencing token', 'Expires in', 'Waiters'], rows) : h('p', { class: 'muted' }, prefix ? `No locks start with “${prefix}”.` : 'No locks.'),
      h('div', { class: 'pager' },
        h('button', { type: 'button', disabled: page === 0, onclick: () => { page--; load(); } }, 'Previous'),
        h('span', { class: 'muted' }, ` page ${page + 1} `),
        h('button', { type: 'button', disabled: !next, onclick: () => { pages[page + 1] = next; page++; load(); } }, 'Next')));
  }

  watch(prefix, (msg) => {
    if (!watching) { watching = true; status.textContent = 'Live: updates as locks change.'; }
    if (msg.kind !== 'WATCH_MESSAGE_KIND_PROGRESS') reload();
  }, (err) => {
    watching = false;
    status.textContent = `Live updates paused (${err.message}); reading every 5 s.`;
  }, ctl.signal);
  const poll = setInterval(() => { if (!watching) load(); }, 5000);
  const tick = setInterval(() => {
    body.querySelectorAll('[data-expires]').forEach((td) => {
      if (td.dataset.expires) td.textContent = duration(Date.parse(td.dataset.expires) - Date.now());
    });
  }, 500);
  load();
  return () => { ctl.abort(); clearInterval(poll); clearInterval(tick); clearTimeout(pending); };
}
