// The console's shell: the token form, the notice line and a router on the
// URL fragment (#/, #/locks?prefix=…, #/lock/<name>, #/lock/<name>?kind=election).
// Each page is a function that fills a container and returns a stop function.

import { onUnauthenticated, token } from './api.js';
import { overviewPage } from './overview.js';
import { locksPage } from './locks.js';
import { lockPage } from './lock.js';
import { say } from './notice.js';

const main = document.getElementById('main');
const form = document.getElementById('token-form');
const input = document.getElementById('token-input');

document.getElementById('token-button').addEventListener('click', () => {
  form.hidden = !form.hidden;
  if (!form.hidden) input.focus();
});
form.addEventListener('submit', (e) => {
  e.preventDefault();
  token.set(input.value.trim());
  input.value = '';
  form.hidden = true;
  say('');
  render();
});
document.getElementById('token-clear').addEventListener('click', () => {
  token.clear();
  render();
});
onUnauthenticated((err) => {
  form.hidden = false;
  say(`The gateway wants a bearer token: ${err.message}`);
});

let stop = () => {};

function render() {
  stop();
  main.replaceChildren();
  const hash = location.hash || '#/';
  const [path, query] = hash.slice(1).split('?');
  const params = new URLSearchParams(query || '');
  let page = 'overview';
  if (path.startsWith('/lock/')) {
    page = 'lock';
    stop = lockPage(main, decodeURIComponent(path.slice('/lock/'.length)), params.get('kind') === 'election');
  } else if (path === '/locks') {
    page = 'locks';
    stop = locksPage(main, params);
  } else {
    stop = overviewPage(main);
  }
  document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', a.dataset.nav === page || (page === 'lock' && a.dataset.nav === 'locks')));
}

window.addEventListener('hashchange', render);
render();
