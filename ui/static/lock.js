// One lock (or election): its holders with a lease countdown and its
// queue, kept live by LockService/Watch (each event moves the queue at
// once; DescribeQueue is then read again for what events do not carry,
// such as a new holder's expiry and the places that moved up). Places are
// the gateway's, numbered as each waiter's own Acquire stream numbers
// them: the page never counts them itself. Admins get a force release of a
// lock that asks for a reason and then shows the audit record
// (AdminService/ListAudit); an election ends a term only by its leader.

import { call, watch, isAdmin } from './api.js';
import { h, table, duration, since } from './dom.js';
import { say } from './notice.js';

const T = (type) => `LOCK_EVENT_TYPE_${type}`;

export function lockPage(root, name, election) {
  const kind = election ? 'LOCK_KIND_ELECTION' : 'LOCK_KIND_LOCK';
  const ctl = new AbortController();
  let q = { entries: [], shard: '', revision: 0 }; // DescribeQueue's shape
  let applied = 0; // revision of the last event or read applied
  let described = 0; // revision of the last DescribeQueue kept: it already shows every event up to it
  let pending = 0;
  const events = []; // the latest events, newest first
  let admin = false;

  const head = h('p', { class: 'muted' });
  const holderBox = h('div', { id: 'holder' });
  const queueBox = h('div', { id: 'queue' });
  const eventsBox = h('div', { id: 'events' });
  const adminBox = h('div', { id: 'admin' });
  root.append(h('p', {}, h('a', { href: '#/locks' }, '← Locks')), h('h1', { id: 'lock-name' }, election ? `Election ${name}` : name), head,
    h('h2', {}, election ? 'Leader' : 'Holder'), holderBox, h('h2', {}, 'Queue'), queueBox, adminBox, h('h2', {}, 'Recent events'), eventsBox);

  async function describe() {
    try {
      const d = await call('LockService', 'DescribeQueue', { name, kind }, ctl.signal);
      const rev = Number(d.revision || 0);
      if (rev >= applied) { q = { ...d, entries: d.entries || [] }; applied = described = rev; }
      draw();
    } catch (err) {
      if (!ctl.signal.aborted && err.code !== 'unauthenticated') say(`DescribeQueue: ${err.message}`);
    }
  }
  function redescribe() {
    if (!pending) pending = setTimeout(() => { pending = 0; describe(); }, 150);
  }

  // same tells whether entry x is the key event e is about: a waiter
  // carries no token, so it is known by its client id, enqueue time and
  // lease kind.
  const same = (x, e) => (x.clientId || '') === (e.clientId || '') && x.waitingSince === e.enqueuedAt && !!x.session === !!e.session;

  function apply(e) {
    events.unshift({ ...e, seen: new Date().toLocaleTimeString() });
    events.length = Math.min(events.length, 20);
    if (Number(e.revision || 0) <= described) return; // the last read shows it
    const list = q.entries;
    const waiters = (d) => { q.waiters = String(Math.max(Number(q.waiters || 0) + d, 0)); };
    switch (e.type) {
      case T('QUEUED'): // a new key: the newest, so the last
        waiters(1);
        list.push({ clientId: e.clientId, waitingSince: e.enqueuedAt, session: e.session, position: e.position });
        break;
      case T('HELD'): {
        const i = list.findIndex((x) => !x.holder && same(x, e));
        const held = { clientId: e.clientId, waitingSince: e.enqueuedAt, session: e.session, holder: true, fencingToken: e.fencingToken, position: '0' };
        if (i >= 0) { list[i] = { ...list[i], ...held }; waiters(-1); } else list.push(held);
        break;
      }
      case T('LEFT'): {
        const i = list.findIndex((x) => !x.holder && same(x, e));
        if (i >= 0) { list.splice(i, 1); waiters(-1); }
        break;
      }
      default: { // RELEASED, EXPIRED, FORCE_RELEASED: a holder went
        const i = list.findIndex((x) => x.holder && x.fencingToken === e.fencingToken);
        if (i >= 0) list.splice(i, 1);
      }
    }
    applied = Math.max(applied, Number(e.revision || 0));
  }

  function draw() {
    const holders = q.entries.filter((x) => x.holder);
    const waiters = q.entries.filter((x) => !x.holder);
    head.textContent = q.shard ? `Shard ${q.shard} · read at revision ${applied}` : '';
    holderBox.replaceChildren(holders.length
      ? table(['Client', 'Fencing token', 'Lease ends in', 'TTL', 'Kind', 'Enqueued'], holders.map((x) => h('tr', { 'data-holder': x.clientId || '' },
        h('td', {}, x.clientId || '(no client id)'),
        h('td', { class: 'num', 'data-col': 'token' }, x.fencingToken),
        h('td', { class: 'num', 'data-expires': x.expiresAt || '' }, x.expiresAt ? duration(Date.parse(x.expiresAt) - Date.now()) : '…'),
        h('td', { class: 'num' }, x.ttlMs ? duration(Number(x.ttlMs)) : ''),
        h('td', {}, x.session ? 'session' : 'own lease'),
        h('td', {}, `${since(x.waitingSince)} ago`))))
      : h('p', { class: 'muted', id: 'free' }, election ? 'No leader: no one leads this election.' : 'Free: no one holds this lock.'));
    queueBox.replaceChildren(waiters.length
      ? table(['Position', 'Client', 'Waiting for', 'Kind'], waiters.map((x) => h('tr', { 'data-position': x.position, 'data-client': x.clientId || '' },
        h('td', { class: 'num' }, x.position),
        h('td', {}, x.clientId || '(no client id)'),
        h('td', { class: 'num', 'data-since': x.waitingSince || '' }, since(x.waitingSince)),
        h('td', {}, x.session ? 'session' : 'own lease'))))
      : h('p', { class: 'muted', id: 'no-waiters' }, 'No one is waiting.'),
      // A long queue is cut to fit one message; waiters counts all of it.
      Number(q.waiters || 0) > waiters.length ? h('p', { class: 'muted', id: 'more-waiters' }, `… and ${Number(q.waiters) - waiters.length} more waiting, not listed.`) : '');
    eventsBox.replaceChildren(events.length
      ? h('ul', { class: 'events' }, events.map((e) => h('li', {}, `${e.seen} · ${e.type.replace('LOCK_EVENT_TYPE_', '').toLowerCase()} · ${e.clientId || '(no client id)'} · position ${e.position || 0}${e.fencingToken && e.fencingToken !== '0' ? ` · token ${e.fencingToken}` : ''}`)))
      : h('p', { class: 'muted' }, 'None since this page opened.'));
    if (admin) drawAdmin(holders[0]);
  }

  // Admin: force release, then the audit trail of this lock. The action
  // part is rebuilt only when what it acts on changes, so a redraw never
  // takes the reason from under the operator's fingers.
  let audit = [];
  let highlight = '';
  let asking = false;
  let actionKey = '';
  let typed = '';
  const actionBox = h('div');
  const auditBox = h('div');
  function drawAdmin(holder) {
    if (!adminBox.firstChild) adminBox.append(h('h2', {}, 'Admin'), actionBox, h('h3', {}, 'Audit records for this lock'), auditBox);
    const key = `${asking}:${holder?.fencingToken || ''}`;
    if (key !== actionKey) {
      actionKey = key;
      const reason = h('textarea', { name: 'reason', required: true, maxlength: 512, rows: 2, placeholder: 'Why is the holder evicted? (recorded in the audit log)', oninput: (e) => { typed = e.target.value; } });
      reason.value = typed;
      const ask = h('form', { id: 'force-form', onsubmit: (e) => { e.preventDefault(); forceRelease(holder, reason.value.trim()); } },
        reason, h('div', {}, h('button', { type: 'submit', class: 'danger' }, `Evict ${holder?.clientId || 'holder'} (token ${holder?.fencingToken})`),
          ' ', h('button', { type: 'button', onclick: () => { asking = false; draw(); } }, 'Cancel')));
      actionBox.replaceChildren(holder
        ? (asking ? ask : h('button', { type: 'button', id: 'force-release', class: 'danger', onclick: () => { asking = true; draw(); } }, 'Force release…'))
        : h('p', { class: 'muted' }, 'Nothing to release.'));
      if (asking) reason.focus();
    }
    auditBox.replaceChildren(audit.length
      ? table(['When', 'Action', 'Actor', 'Reason', 'Evicted', 'Token'], audit.map((r) => h('tr', { 'data-audit': r.id, class: r.id === highlight ? 'new' : '' },
        h('td', {}, new Date(r.at).toLocaleString()), h('td', {}, r.action), h('td', {}, r.actor), h('td', { class: 'reason' }, r.reason),
        h('td', {}, r.evictedClientId || ''), h('td', { class: 'num' }, r.evictedFencingToken))), { id: 'audit' })
      : h('p', { class: 'muted', id: 'audit' }, 'None kept.'));
  }

  async function loadAudit() {
    const page = await call('AdminService', 'ListAudit', { pageSize: 1000 }, ctl.signal);
    audit = (page.records || []).filter((r) => r.name === name);
  }

  async function forceRelease(holder, reason) {
    if (!reason) { say('A reason is required.'); return; }
    try {
      const r = await call('AdminService', 'ForceRelease', { name, reason, fencingToken: holder.fencingToken }, ctl.signal);
      asking = false;
      typed = '';
      say(r.released ? `Evicted ${r.evictedClientId || 'the holder'} (token ${r.evictedFencingToken}).` : 'The lock was already free.');
      highlight = r.audit?.id || '';
      await loadAudit();
      draw();
      redescribe();
    } catch (err) {
      if (!ctl.signal.aborted) say(`Force release: ${err.message}`);
    }
  }

  watch(name, (msg) => {
    const mine = (msg.events || []).filter((e) => e.name === name && (e.kind || 'LOCK_KIND_LOCK') === kind);
    if (msg.kind === 'WATCH_MESSAGE_KIND_EVENTS' && mine.length) {
      mine.forEach(apply);
      draw();
      redescribe();
    } else if (msg.kind === 'WATCH_MESSAGE_KIND_SNAPSHOT_END' || msg.kind === 'WATCH_MESSAGE_KIND_RESYNC') {
      redescribe();
    }
  }, (err) => say(`Live updates paused: ${err.message}`), ctl.signal);

  const tick = setInterval(() => {
    root.querySelectorAll('[data-expires]').forEach((td) => { if (td.dataset.expires) td.textContent = duration(Date.parse(td.dataset.expires) - Date.now()); });
    root.querySelectorAll('[data-since]').forEach((td) => { if (td.dataset.since) td.textContent = since(td.dataset.since); });
  }, 250);
  describe();
  isAdmin().then(async (yes) => {
    admin = yes && !election; // ForceRelease is a lock's
    adminBox.dataset.admin = String(yes);
    if (yes) { try { await loadAudit(); } catch (err) { say(`ListAudit: ${err.message}`); } draw(); }
  });
  return () => { ctl.abort(); clearInterval(tick); clearTimeout(pending); };
}
