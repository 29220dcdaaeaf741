// Carillon web console: a single-page app over the admin REST API (/api/v1).
// Vanilla ES2020, no dependency, no build step. The DOM is built with createElement and
// textContent only: job names, errors and outputs are user data and are never parsed as HTML.
// The page runs under a strict CSP (no inline script or style attribute).

'use strict';

const TOKEN_KEY = 'carillon.console.token';
const RETURN_KEY = 'carillon.console.return';
const API = '/api/v1';
const PAGE_SIZE = 50;
const JOB_RUNS_PAGE = 20;

const RUN_STATES = ['pending', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped', 'no_executor', 'done'];
const UNFINISHED_RUN = new Set(['pending', 'queued', 'running']);
const DEAD_RUN = new Set(['failed', 'no_executor']);
const JOB_STATES = ['stopped', 'running', 'done'];
const SCHEDULE_KINDS = [
  ['cron', 'Cron', 'Unix (5 fields) or Quartz (6–7 fields with seconds), e.g. 0 30 2 * * ? or */5 * * * *'],
  ['rrule', 'RRULE', 'RFC 5545 lines: DTSTART, RRULE, RDATE, EXDATE'],
  ['at', 'One-shot at', 'An instant: 2026-12-01T09:00:00 (wall time in the zone) or RFC 3339'],
  ['every', 'Every', 'A duration from the job\u2019s start: 30s, 5m, 1h30m, 2d'],
];
const BALANCES = ['round_robin', 'random', 'weighted', 'least_busy', 'consistent_hash'];
const BACKOFFS = ['fixed', 'exponential'];
const MISFIRES = ['fire_once', 'skip', 'catch_up'];
const OVERLAPS = ['allow', 'skip', 'queue', 'replace'];
const ALERT_FORMATS = ['json', 'slack'];
const COMMON_ZONES = [
  'UTC', 'Europe/London', 'Europe/Dublin', 'Europe/Lisbon', 'Europe/Paris', 'Europe/Berlin',
  'Europe/Madrid', 'Europe/Rome', 'Europe/Amsterdam', 'Europe/Brussels', 'Europe/Zurich',
  'Europe/Stockholm', 'Europe/Warsaw', 'Europe/Athens', 'Europe/Helsinki', 'Europe/Kyiv',
  'Europe/Istanbul', 'Europe/Moscow', 'Africa/Cairo', 'Africa/Johannesburg', 'Africa/Lagos',
  'Africa/Nairobi', 'Asia/Dubai', 'Asia/Karachi', 'Asia/Kolkata', 'Asia/Dhaka', 'Asia/Bangkok',
  'Asia/Jakarta', 'Asia/Singapore', 'Asia/Shanghai', 'Asia/Hong_Kong', 'Asia/Taipei',
  'Asia/Seoul', 'Asia/Tokyo', 'Australia/Perth', 'Australia/Adelaide', 'Australia/Sydney',
  'Pacific/Auckland', 'Pacific/Honolulu', 'America/Anchorage', 'America/Los_Angeles',
  'America/Vancouver', 'America/Denver', 'America/Phoenix', 'America/Chicago',
  'America/Mexico_City', 'America/New_York', 'America/Toronto', 'America/Bogota',
  'America/Lima', 'America/Santiago', 'America/Sao_Paulo', 'America/Argentina/Buenos_Aires',
  'Atlantic/Reykjavik',
];

// ---------------------------------------------------------------------------------------------
// DOM helpers

/** Creates an element. `props`: class, text, testid, dataset, on<event>, DOM properties
 *  (value, checked, disabled, hidden, selected, htmlFor…) or plain attributes. */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  applyProps(el, props);
  append(el, children);
  return el;
}

function applyProps(el, props) {
  if (!props) return;
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'testid') el.setAttribute('data-testid', value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'style') throw new Error('inline styles are refused by the CSP');
    else if (['value', 'checked', 'disabled', 'hidden', 'selected', 'htmlFor', 'readOnly', 'required', 'multiple'].includes(key)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';
function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

let uid = 0;
const nextId = (prefix) => `${prefix}-${++uid}`;

function bellIcon() {
  return svg('svg', { viewBox: '0 0 24 24', 'aria-hidden': 'true', focusable: 'false' },
    svg('path', { d: 'M6 16V11a6 6 0 1 1 12 0v5l1.5 2h-15z' }),
    svg('path', { d: 'M10 20a2 2 0 0 0 4 0' }),
    svg('path', { d: 'M12 3v2' }));
}

// ---------------------------------------------------------------------------------------------
// Formatting

const pad = (n, w = 2) => String(n).padStart(w, '0');

function parseTime(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** `2026-11-23 18:00:05` in the browser's zone. */
function localStamp(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  const neg = ms < 0;
  let v = Math.abs(ms);
  let out;
  if (v < 1000) out = `${Math.round(v)} ms`;
  else if (v < 60_000) out = `${(v / 1000).toFixed(v < 10_000 ? 1 : 0)} s`;
  else if (v < 3_600_000) {
    const m = Math.floor(v / 60_000);
    const s = Math.round((v % 60_000) / 1000);
    out = s ? `${m} min ${s} s` : `${m} min`;
  } else if (v < 86_400_000) {
    const hours = Math.floor(v / 3_600_000);
    const m = Math.round((v % 3_600_000) / 60_000);
    out = m ? `${hours} h ${m} min` : `${hours} h`;
  } else {
    const d = Math.floor(v / 86_400_000);
    const hours = Math.round((v % 86_400_000) / 3_600_000);
    out = hours ? `${d} d ${hours} h` : `${d} d`;
  }
  return neg ? `-${out}` : out;
}

function relative(d) {
  const diff = d.getTime() - Date.now();
  if (Math.abs(diff) < 1000) return 'now';
  return diff > 0 ? `in ${fmtDuration(diff)}` : `${fmtDuration(-diff)} ago`;
}

/** A <time> element: local wall time, the UTC instant in its tooltip. */
function timeEl(iso, { rel = false } = {}) {
  const d = parseTime(iso);
  if (!d) return h('span', { class: 'muted', text: '—' });
  return h('time', { datetime: iso, title: `${d.toISOString()} (UTC)`, class: 'nowrap' },
    rel ? `${localStamp(d)} · ${relative(d)}` : localStamp(d));
}

function durationBetween(a, b) {
  const da = parseTime(a);
  const db = parseTime(b);
  return da && db ? fmtDuration(db - da) : '—';
}

function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function scheduleOf(schedule) {
  const s = schedule || {};
  for (const [kind, label] of SCHEDULE_KINDS) {
    if (typeof s[kind] === 'string') return { kind, label, expr: s[kind] };
  }
  return { kind: '', label: '', expr: JSON.stringify(s) };
}

function scheduleEl(schedule) {
  const { kind, expr } = scheduleOf(schedule);
  return h('span', { class: 'schedule' },
    kind ? h('span', { class: 'muted', text: `${kind} ` }) : null,
    h('code', { text: kind === 'rrule' ? expr.replace(/\s*\n\s*/g, ' ') : expr }));
}

const STATE_TONE = {
  succeeded: 'ok', running: 'info', pending: 'info', queued: 'info', active: 'ok', healthy: 'ok',
  failed: 'fail', no_executor: 'fail', timed_out: 'fail', lost: 'fail', unhealthy: 'fail',
  cancelled: 'warn', skipped: 'warn', draining: 'warn', drained: 'warn', stopped: '', done: '', left: '',
};

function badge(state, extraClass) {
  const text = String(state ?? '—');
  const tone = STATE_TONE[text] ?? '';
  return h('span', { class: ['badge', tone, extraClass].filter(Boolean).join(' '), text: text.replace(/_/g, ' '), dataset: { state: text } });
}

function problemText(err) {
  if (!err) return '';
  if (err instanceof ApiError) {
    const detail = err.detail || err.title || `HTTP ${err.status}`;
    return err.field && !detail.startsWith(`${err.field}:`) ? `${err.field}: ${detail}` : detail;
  }
  return err.message || String(err);
}

/** An alert box showing an API problem (detail, and the field when there is one). */
function errorBox(err, testid) {
  const box = h('div', { class: 'alert error', role: 'alert', testid });
  fillError(box, err);
  return box;
}

function fillError(box, err, prefix) {
  clear(box);
  if (!err) return box;
  if (prefix) append(box, [h('strong', { text: prefix }), ' ']);
  if (err instanceof ApiError && err.field) {
    append(box, [h('span', { class: 'field-name', text: err.field }), ': ']);
    const detail = err.detail || err.title || '';
    append(box, [detail.startsWith(`${err.field}: `) ? detail.slice(err.field.length + 2) : detail]);
  } else {
    append(box, [problemText(err)]);
  }
  return box;
}

// ---------------------------------------------------------------------------------------------
// The API

class ApiError extends Error {
  constructor(status, problem) {
    const p = problem && typeof problem === 'object' ? problem : {};
    super(p.detail || p.title || `HTTP ${status}`);
    this.status = status;
    this.title = p.title || '';
    this.detail = p.detail || '';
    this.field = p.field || '';
    this.type = p.type || '';
  }
}

function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Calls the API; answers the parsed JSON (null for 204). A 401 signs the user out. */
async function api(method, path, body, { signal, tokenOverride, noSignOut } = {}) {
  const headers = { Accept: 'application/json, application/problem+json' };
  const t = tokenOverride ?? token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit', signal };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(API + path, init);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError(0, { title: 'Network error', detail: 'the server could not be reached; check your connection and retry' });
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data || { title: res.statusText, detail: text.slice(0, 500) || `HTTP ${res.status}` });
    // Only if the refused token is still the one in use: a late answer to a request made
    // with an older token must not sign out whoever has just signed in again.
    if (res.status === 401 && !noSignOut && t && t === token()) signOut('Your token was refused: sign in again.');
    throw err;
  }
  learnJobNames(data);
  return data;
}

// Runs carry their job's name (`job_name`, null once the job is deleted): remember it, so a
// run shows its job without asking for the job.
function learnJobNames(data) {
  if (!data || typeof data !== 'object') return;
  const learn = (r) => {
    if (!r || r.job_id === undefined || !('job_name' in r)) return;
    if (typeof r.job_name === 'string') rememberJob({ id: r.job_id, name: r.job_name });
    else forgetJob(r.job_id);
  };
  learn(data);
  for (const r of data.runs || []) learn(r);
  for (const r of data.recent_failures || []) learn(r);
  for (const l of data.late_fires || []) learn(l && l.run);
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

const enc = encodeURIComponent;

// Job names, fetched once per id (runs show their job by name). `null` = the job is gone.
const jobNames = new Map();
const nameQueue = [];
let namesInFlight = 0;

function rememberJob(job) {
  if (job && job.id !== undefined) jobNames.set(String(job.id), { name: job.name, promise: Promise.resolve(job.name) });
}

function forgetJob(id) {
  jobNames.set(String(id), { name: null, promise: Promise.resolve(null) });
}

function jobName(id) {
  const key = String(id);
  const known = jobNames.get(key);
  if (known) return known.promise;
  const entry = { name: undefined };
  entry.promise = new Promise((resolve) => {
    nameQueue.push(async () => {
      try {
        const job = await api('GET', `/jobs/${enc(key)}`);
        entry.name = job.name;
      } catch (e) {
        // A deleted job shows as its id; a passing error is retried next time.
        if (e instanceof ApiError && e.status === 404) entry.name = null;
        else jobNames.delete(key);
      }
      resolve(entry.name ?? null);
    });
    pumpNames();
  });
  jobNames.set(key, entry);
  return entry.promise;
}

function pumpNames() {
  while (namesInFlight < 4 && nameQueue.length) {
    const task = nameQueue.shift();
    namesInFlight += 1;
    task().finally(() => {
      namesInFlight -= 1;
      pumpNames();
    });
  }
}

/** A link to a job, showing its name once known; a deleted job shows its id. */
function jobLink(id) {
  const key = String(id);
  const known = jobNames.get(key);
  const a = h('a', { href: `#/jobs/${enc(key)}`, class: 'job-link', text: known && known.name ? known.name : `job ${key}` });
  if (known && known.name === null) return h('span', { class: 'muted', title: 'deleted job', text: `job ${key} (deleted)` });
  if (!known || known.name === undefined) {
    const holder = h('span', null, a);
    jobName(key).then((name) => {
      if (name) a.textContent = name;
      else replace(holder, h('span', { class: 'muted', title: 'deleted job', text: `job ${key} (deleted)` }));
    });
    return holder;
  }
  return a;
}

// ---------------------------------------------------------------------------------------------
// Views: each gets a context that dies when the user navigates away

class ViewContext {
  constructor(root) {
    this.root = root;
    this.alive = true;
    this.cleanups = [];
  }

  onCleanup(fn) {
    this.cleanups.push(fn);
  }

  destroy() {
    this.alive = false;
    for (const fn of this.cleanups.splice(0)) {
      try {
        fn();
      } catch {
        /* ignore */
      }
    }
  }

  /** Calls `fn` every `ms` after the previous call ended, skipping while the tab is hidden. */
  poll(fn, ms) {
    let timer = null;
    const tick = async () => {
      timer = null;
      if (!this.alive) return;
      if (!document.hidden) {
        try {
          await fn();
        } catch {
          /* the view shows its own errors */
        }
      }
      if (this.alive) timer = setTimeout(tick, ms);
    };
    timer = setTimeout(tick, ms);
    const onVisible = () => {
      if (!document.hidden && this.alive && timer !== null) {
        clearTimeout(timer);
        tick();
      }
    };
    document.addEventListener('visibilitychange', onVisible);
    this.onCleanup(() => {
      if (timer !== null) clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisible);
    });
  }

  /** A debounced call, cancelled with the view. */
  debounce(fn, ms) {
    let timer = null;
    this.onCleanup(() => clearTimeout(timer));
    const run = (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        if (this.alive) fn(...args);
      }, ms);
    };
    run.now = (...args) => {
      clearTimeout(timer);
      if (this.alive) fn(...args);
    };
    return run;
  }
}

function pageHead(title, { subtitle, badges = [], actions = [] } = {}) {
  const h1 = h('h1', { tabindex: '-1', text: title });
  return h('div', { class: 'page-head' },
    h('div', null,
      h('div', { class: 'title' }, h1, badges),
      subtitle ? h('p', { class: 'subtitle' }, subtitle) : null),
    actions.length ? h('div', { class: 'actions' }, actions) : null);
}

let flashArea = null;
function flash(message, tone = 'ok', ms = 4000) {
  if (!flashArea) return;
  const box = h('div', { class: `alert ${tone}`, role: tone === 'error' ? 'alert' : 'status' });
  if (message instanceof Error) fillError(box, message);
  else append(box, [message]);
  flashArea.append(box);
  setTimeout(() => box.remove(), ms);
}

/** Runs an action from a button: disables it meanwhile, reports failures in `errorTarget`. */
async function act(button, fn, errorTarget) {
  if (button) button.disabled = true;
  if (errorTarget) clear(errorTarget);
  try {
    return await fn();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return undefined;
    if (errorTarget) fillError(errorTarget, e);
    else flash(e, 'error', 8000);
    return undefined;
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}

/** A table inside a horizontally scrolling wrapper that becomes stacked cards on phones. */
function table(columns, testid) {
  const tbody = h('tbody');
  const t = h('table', { class: 'stack', testid },
    h('thead', null, h('tr', null, columns.map((c) => h('th', { scope: 'col', class: colClass(c), text: c.label })))),
    tbody);
  return { wrap: h('div', { class: 'table-wrap' }, t), table: t, tbody, columns };
}

function colClass(c) {
  return [c.num ? 'num' : '', c.cls || ''].filter(Boolean).join(' ') || null;
}

function row(columns, cells, props) {
  return h('tr', props, cells.map((cell, i) => {
    const c = columns[i] || {};
    return h('td', { 'data-label': c.label || '', class: colClass(c) }, cell);
  }));
}

function emptyRow(columns, text) {
  return h('tr', { class: 'empty-row' }, h('td', { colspan: String(columns.length), class: 'empty', 'data-label': '', text }));
}

/** Cursor paging: a stack of the cursors of the pages seen. */
class Pager {
  constructor(onChange) {
    this.cursors = [null];
    this.next = null;
    this.onChange = onChange;
    this.info = h('span', { class: 'page-no', 'aria-live': 'polite' });
    this.first = h('button', { type: 'button', class: 'small', text: 'First page', onclick: () => this.go(0) });
    this.prev = h('button', { type: 'button', class: 'small', text: 'Previous page', onclick: () => this.go(this.cursors.length - 2) });
    this.nextBtn = h('button', { type: 'button', class: 'small', text: 'Next page', onclick: () => this.forward() });
    this.el = h('nav', { class: 'pager', 'aria-label': 'Pages' }, this.info, this.first, this.prev, this.nextBtn);
    this.render();
  }

  get cursor() {
    return this.cursors[this.cursors.length - 1];
  }

  reset() {
    this.cursors = [null];
    this.next = null;
  }

  go(index) {
    if (index < 0) return;
    this.cursors = this.cursors.slice(0, index + 1);
    this.onChange();
  }

  forward() {
    if (!this.next) return;
    this.cursors.push(this.next);
    this.onChange();
  }

  update(nextCursor, count) {
    this.next = nextCursor || null;
    this.render(count);
  }

  render(count) {
    const n = this.cursors.length;
    this.info.textContent = `Page ${n}${count !== undefined ? ` · ${count} shown` : ''}`;
    this.first.disabled = n <= 1;
    this.prev.disabled = n <= 1;
    this.nextBtn.disabled = !this.next;
  }
}

/** Reads the `?a=b` part of the hash route. */
function routeParams() {
  const hash = location.hash.slice(1);
  const i = hash.indexOf('?');
  return new URLSearchParams(i >= 0 ? hash.slice(i + 1) : '');
}

/** Rewrites the query part of the current route without re-rendering. */
function setRouteParams(params) {
  const hash = location.hash.slice(1) || '/dashboard';
  const path = hash.split('?')[0];
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  const target = `#${path}${s ? `?${s}` : ''}`;
  if (target !== location.hash) history.replaceState(history.state, '', target);
}

function selectEl(props, options, value) {
  const sel = h('select', props, options.map(([v, label]) => h('option', { value: v, text: label })));
  sel.value = value ?? options[0][0];
  return sel;
}

function field(labelText, control, { hint, id, wide, errorId } = {}) {
  const controlId = control.id || id || nextId('f');
  control.id = controlId;
  const hintEl = hint ? h('span', { class: 'hint', id: `${controlId}-hint`, text: hint }) : null;
  const err = h('p', { class: 'field-error', id: errorId || `${controlId}-error`, 'aria-live': 'polite' });
  const described = [hintEl && hintEl.id, err.id].filter(Boolean).join(' ');
  control.setAttribute('aria-describedby', described);
  const wrap = h('div', { class: `field${wide ? ' wide' : ''}` },
    h('label', { for: controlId, text: labelText }), control, hintEl, err);
  wrap.errorEl = err;
  wrap.hintEl = hintEl;
  return wrap;
}

// ---------------------------------------------------------------------------------------------
// Shell: login, header, router

let currentView = null;
let appRoot = null;

function signOut(message) {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* ignore */
  }
  jobNames.clear();
  const here = location.hash;
  if (message && here && here !== '#/login') {
    try {
      sessionStorage.setItem(RETURN_KEY, here);
    } catch {
      /* ignore */
    }
  }
  renderLogin(message);
}

function renderLogin(message) {
  if (currentView) currentView.destroy();
  currentView = null;
  const input = h('input', { type: 'password', id: 'login-token', name: 'token', autocomplete: 'current-password', required: true, spellcheck: 'false' });
  const errorEl = h('p', { class: 'alert error', role: 'alert', testid: 'login-error' });
  const button = h('button', { type: 'submit', class: 'primary', text: 'Sign in' });
  const form = h('form', { class: 'card', 'aria-labelledby': 'login-title', novalidate: true },
    h('h1', { id: 'login-title' }, bellIcon(), 'Carillon'),
    h('p', { class: 'muted', text: 'Sign in with an admin (or read-only) API token.' }),
    message ? h('p', { class: 'alert info', role: 'status', text: message }) : null,
    errorEl,
    h('div', { class: 'field' }, h('label', { for: 'login-token', text: 'Token' }), input),
    button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(errorEl);
    const t = input.value.trim();
    if (!t) {
      errorEl.textContent = 'Enter a token.';
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      await api('GET', '/cluster', undefined, { tokenOverride: t, noSignOut: true });
      sessionStorage.setItem(TOKEN_KEY, t);
      let target = '#/dashboard';
      try {
        target = sessionStorage.getItem(RETURN_KEY) || target;
        sessionStorage.removeItem(RETURN_KEY);
      } catch {
        /* ignore */
      }
      if (!/^#\/[a-z]/.test(target) || target.startsWith('#/login')) target = '#/dashboard';
      if (location.hash === target) route();
      else location.hash = target;
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) errorEl.textContent = 'That token was refused';
      else fillError(errorEl, e, 'Could not sign in:');
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  document.title = 'Sign in · Carillon';
  replace(appRoot, h('main', { id: 'main', class: 'login' }, form));
  input.focus();
}

const NAV = [
  ['dashboard', 'Dashboard'],
  ['jobs', 'Jobs'],
  ['runs', 'Runs'],
  ['executors', 'Executors'],
];

function renderShell() {
  const main = h('main', { id: 'main', class: 'page', tabindex: '-1' });
  const skip = h('a', { class: 'skip-link', href: '#/', text: 'Skip to content' });
  skip.addEventListener('click', (ev) => {
    ev.preventDefault();
    main.focus();
  });
  const nav = h('nav', { class: 'nav', 'aria-label': 'Main' },
    h('ul', null, NAV.map(([key, label]) => h('li', null, h('a', { href: `#/${key}`, dataset: { nav: key }, text: label })))));
  const header = h('header', { class: 'topbar' },
    h('a', { class: 'brand', href: '#/dashboard', 'aria-label': 'Carillon home' }, bellIcon(), h('span', { text: 'Carillon' })),
    nav,
    h('div', { class: 'topbar-end' },
      h('button', { type: 'button', class: 'small', text: 'Sign out', onclick: () => { signOut(); history.replaceState(null, '', '#/login'); } })));
  flashArea = h('div', { class: 'flash-area', 'aria-live': 'polite' });
  replace(appRoot, skip, header, main, flashArea);
  return { main, nav };
}

let shell = null;

const ROUTES = [
  [/^\/dashboard$/, 'dashboard', (ctx) => viewDashboard(ctx)],
  [/^\/jobs$/, 'jobs', (ctx) => viewJobs(ctx)],
  [/^\/jobs\/new$/, 'jobs', (ctx) => viewJobForm(ctx, null)],
  [/^\/jobs\/(\d+)$/, 'jobs', (ctx, m) => viewJob(ctx, m[1])],
  [/^\/jobs\/(\d+)\/edit$/, 'jobs', (ctx, m) => viewJobForm(ctx, m[1])],
  [/^\/runs$/, 'runs', (ctx) => viewRuns(ctx)],
  [/^\/runs\/(\d+)$/, 'runs', (ctx, m) => viewRun(ctx, m[1])],
  [/^\/executors$/, 'executors', (ctx) => viewExecutors(ctx)],
];

function route() {
  const hash = location.hash.slice(1);
  const path = (hash.split('?')[0] || '').replace(/\/+$/, '');
  if (!token()) {
    if (path && path !== '/login') {
      try {
        sessionStorage.setItem(RETURN_KEY, `#${hash}`);
      } catch {
        /* ignore */
      }
    }
    renderLogin();
    return;
  }
  if (!path || path === '/' || path === '/login') {
    history.replaceState(null, '', '#/dashboard');
    route();
    return;
  }
  if (!shell || !shell.main.isConnected) shell = renderShell();
  if (currentView) currentView.destroy();
  const main = clear(shell.main);
  const ctx = new ViewContext(main);
  currentView = ctx;
  let section = null;
  let matched = false;
  for (const [re, nav, view] of ROUTES) {
    const m = path.match(re);
    if (m) {
      section = nav;
      matched = true;
      Promise.resolve()
        .then(() => view(ctx, m))
        .catch((e) => {
          if (!ctx.alive || (e instanceof ApiError && e.status === 401)) return;
          append(main, [errorBox(e, 'view-error')]);
        });
      break;
    }
  }
  for (const a of shell.nav.querySelectorAll('a')) {
    if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!matched) {
    document.title = 'Not found · Carillon';
    append(main, [pageHead('Page not found'), h('p', null, 'Nothing lives at this address. ', h('a', { href: '#/dashboard', text: 'Go to the dashboard' }), '.')]);
  }
}

/** Re-renders `container` with `render()`, giving focus back to the control that had it
 *  (matched by its text), so that a refresh does not pull a button from under the user. */
function keepFocus(container, render) {
  const active = document.activeElement;
  const had = active && container.contains(active) ? { tag: active.tagName, text: active.textContent } : null;
  render();
  if (!had) return;
  for (const el of container.querySelectorAll(had.tag)) {
    if (el.textContent === had.text) {
      el.focus({ preventScroll: true });
      return;
    }
  }
}

function setTitle(ctx, title) {
  if (ctx.alive) document.title = `${title} · Carillon`;
}

function focusHeading(ctx) {
  const h1 = ctx.root.querySelector('h1');
  if (h1 && ctx.alive && document.activeElement === document.body) h1.focus({ preventScroll: true });
}

// ---------------------------------------------------------------------------------------------
// Dashboard

async function viewDashboard(ctx) {
  setTitle(ctx, 'Dashboard');
  const updated = h('span', { class: 'muted small', 'aria-live': 'off' });
  const clusterBody = h('div', { testid: 'cluster' }, h('p', { class: 'muted', text: 'Loading…' }));
  const appsBody = h('div', { testid: 'apps-summary' }, h('p', { class: 'muted', text: 'Loading…' }));
  const statsBody = h('div', { testid: 'stats' }, h('p', { class: 'muted', text: 'Loading…' }));
  const failuresBody = h('div', { testid: 'recent-failures' });
  const lateBody = h('div', { testid: 'late-fires' });
  append(ctx.root, [
    pageHead('Dashboard', { actions: [updated] }),
    h('div', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'h-cluster' }, h('h2', { id: 'h-cluster', text: 'Cluster' }), clusterBody),
      h('section', { class: 'card', 'aria-labelledby': 'h-apps' },
        h('h2', { id: 'h-apps' }, h('span', { text: 'Executors by app' }), h('a', { href: '#/executors', class: 'small', text: 'All executors' })),
        appsBody)),
    h('section', { class: 'card', 'aria-labelledby': 'h-stats' }, h('h2', { id: 'h-stats', text: 'Runs in the last 60 minutes' }), statsBody),
    h('div', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'h-fail' },
        h('h2', { id: 'h-fail' }, h('span', { text: 'Recent failures' }), h('a', { href: '#/runs?dead=1', class: 'small', text: 'Dead letters' })),
        failuresBody),
      h('section', { class: 'card', 'aria-labelledby': 'h-late' }, h('h2', { id: 'h-late', text: 'Late fires' }), lateBody)),
  ]);
  focusHeading(ctx);

  const loadCluster = async () => {
    try {
      const c = await api('GET', '/cluster');
      if (ctx.alive) renderCluster(clusterBody, c);
    } catch (e) {
      if (ctx.alive) replace(clusterBody, errorBox(e));
    }
  };
  const loadApps = async () => {
    try {
      const a = await api('GET', '/apps');
      if (ctx.alive) renderAppsSummary(appsBody, a.apps || []);
    } catch (e) {
      if (ctx.alive) replace(appsBody, errorBox(e));
    }
  };
  const loadStats = async () => {
    try {
      const s = await api('GET', '/stats?minutes=60');
      if (!ctx.alive) return;
      renderStats(statsBody, s);
      renderFailures(failuresBody, s.recent_failures || []);
      renderLate(lateBody, s.late_fires || [], s.late_after_ms);
    } catch (e) {
      if (!ctx.alive) return;
      if (e instanceof ApiError && e.status === 404) {
        const note = 'This server does not offer run statistics (GET /api/v1/stats answered 404).';
        replace(statsBody, h('p', { class: 'muted', text: note }));
        replace(failuresBody, h('p', { class: 'muted' }, 'See the ', h('a', { href: '#/runs?dead=1', text: 'dead letters' }), '.'));
        replace(lateBody, h('p', { class: 'muted', text: 'Not available.' }));
      } else {
        replace(statsBody, errorBox(e));
      }
    }
  };
  const refresh = async () => {
    await Promise.all([loadCluster(), loadApps(), loadStats()]);
    if (ctx.alive) updated.textContent = `Updated ${localStamp(new Date()).slice(11)} · refreshes every 5 s`;
  };
  await refresh();
  ctx.poll(refresh, 5000);
}

function renderCluster(body, c) {
  const leader = c.leader;
  const cols = [{ label: 'Node' }, { label: 'Address' }, { label: 'Alive' }, { label: 'Partitions', num: true }, { label: 'Last heartbeat' }];
  const t = table(cols, 'cluster-nodes');
  const nodes = c.nodes || [];
  for (const n of nodes) {
    const partitions = (n.partitions || []).length;
    t.tbody.append(row(cols, [
      h('span', { class: 'nowrap', title: n.version ? `version ${n.version}` : null }, h('code', { text: n.node_id }), ' ', n.leader ? h('span', { class: 'badge leader', text: 'leader' }) : null),
      h('code', { text: n.address || '—' }),
      n.alive ? badge('alive', 'ok') : h('span', { class: 'badge fail', text: 'down' }),
      `${partitions}${(n.handing_off || []).length ? ` (${n.handing_off.length} handing off)` : ''}`,
      timeEl(n.last_heartbeat_at),
    ], { dataset: { node: n.node_id } }));
  }
  if (!nodes.length) t.tbody.append(emptyRow(cols, 'No node has registered.'));
  const me = c.this_node || {};
  replace(body,
    h('p', { testid: 'leader' },
      leader
        ? ['Leader ', h('code', { text: leader.node_id }), ` · term ${leader.term}`, leader.lease_until ? h('span', { class: 'muted' }, ' · lease until ', timeEl(leader.lease_until)) : null]
        : h('span', { class: 'badge fail', text: 'no leader' }),
      h('span', { class: 'muted', text: ` · ${c.partition_count ?? 0} partitions` })),
    t.wrap,
    h('p', { class: 'muted small' }, 'Answered by ', h('code', { text: me.node_id || '?' }),
      `${me.member ? '' : ' (not a member)'} · acting on ${me.acting_partitions ?? 0} partitions · ${me.jobs_held ?? 0} jobs held`));
}

function renderAppsSummary(body, apps) {
  const cols = [{ label: 'App' }, { label: 'Healthy' }, { label: 'Capacity', num: true }, { label: 'Handlers' }];
  const t = table(cols, 'apps-table');
  for (const a of apps) {
    const allHealthy = a.healthy_executors === a.executors && a.executors > 0;
    t.tbody.append(row(cols, [
      h('code', { text: a.name }),
      h('span', { class: `badge ${allHealthy ? 'ok' : a.healthy_executors ? 'warn' : 'fail'}`, text: `${a.healthy_executors} / ${a.executors}` }),
      String(a.capacity ?? 0),
      (a.handlers || []).join(', ') || '—',
    ]));
  }
  if (!apps.length) t.tbody.append(emptyRow(cols, 'No executor has registered.'));
  replace(body, t.wrap);
}

function renderStats(body, s) {
  const per = s.per_minute || [];
  const finished = (s.succeeded || 0) + (s.failed || 0) + (s.other || 0);
  const rate = s.success_rate === null || s.success_rate === undefined ? '—' : `${(s.success_rate * 100).toFixed(s.success_rate >= 0.995 || s.success_rate === 0 ? 0 : 1)}%`;
  const late = typeof s.late === 'number' ? s.late : (s.late_fires || []).length;
  const tile = (label, value, tone, testid) => h('div', { class: `tile ${tone || ''}`, testid },
    h('div', { class: 'value', text: value }), h('div', { class: 'label', text: label }));
  const rateTone = s.success_rate === null || s.success_rate === undefined ? '' : s.success_rate >= 0.99 ? 'ok' : s.success_rate >= 0.9 ? 'warn' : 'fail';
  replace(body,
    h('div', { class: 'tiles' },
      tile('success rate', rate, rateTone, 'success-rate'),
      tile('succeeded', String(s.succeeded ?? 0), '', 'succeeded-count'),
      tile('failed', String(s.failed ?? 0), s.failed ? 'fail' : '', 'failed-count'),
      tile('other (cancelled, skipped…)', String(s.other ?? 0), '', 'other-count'),
      tile(`late (> ${fmtDuration(s.late_after_ms ?? 60000)})`, String(late), late ? 'warn' : '', 'late-count')),
    chart(per, finished, s.window_minutes || per.length));
}

function chart(per, finished, minutes) {
  const n = Math.max(per.length, 1);
  const W = n * 10;
  const H = 100;
  const max = Math.max(1, ...per.map((m) => (m.succeeded || 0) + (m.failed || 0) + (m.other || 0)));
  const slots = per.map((m, i) => {
    const x = i * 10 + 1;
    const parts = [['bar-ok', m.succeeded || 0], ['bar-fail', m.failed || 0], ['bar-other', m.other || 0]];
    let y = H;
    const rects = [];
    for (const [cls, v] of parts) {
      if (!v) continue;
      const hgt = Math.max(1, (v / max) * (H - 4));
      y -= hgt;
      rects.push(svg('rect', { class: cls, x, y: y.toFixed(2), width: 8, height: hgt.toFixed(2) }));
    }
    const d = parseTime(m.minute);
    const label = `${d ? localStamp(d).slice(11, 16) : m.minute}: ${m.succeeded || 0} succeeded, ${m.failed || 0} failed, ${m.other || 0} other`;
    return svg('g', { class: 'slot' }, svg('title', null, label), svg('rect', { x: i * 10, y: 0, width: 10, height: H, fill: 'transparent' }), rects);
  });
  const first = parseTime(per[0] && per[0].minute);
  const last = parseTime(per[per.length - 1] && per[per.length - 1].minute);
  return h('figure', { class: 'chart-figure', testid: 'runs-chart' },
    svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': `Runs finished per minute over the last ${minutes} minutes: ${finished} in all, at most ${max === 1 && !finished ? 0 : max} in a minute` }, slots),
    h('figcaption', null,
      h('div', { class: 'chart-axis' }, h('span', { text: first ? localStamp(first).slice(11, 16) : '' }), h('span', { text: `runs finished per minute (max ${finished ? max : 0})` }), h('span', { text: last ? localStamp(last).slice(11, 16) : '' })),
      h('div', { class: 'legend' }, h('span', { class: 'l-ok', text: 'succeeded' }), h('span', { class: 'l-fail', text: 'failed' }), h('span', { class: 'l-other', text: 'other' }))));
}

function renderFailures(body, runs) {
  if (!runs.length) {
    replace(body, h('p', { class: 'muted', text: 'No failure in the window.' }));
    return;
  }
  replace(body, h('ul', { class: 'plain' }, runs.map((r) => h('li', null,
    h('a', { href: `#/runs/${enc(r.id)}`, text: `Run ${r.id}` }),
    badge(r.state),
    h('span', { class: 'grow' }, jobLink(r.job_id), r.message ? h('span', { class: 'muted', text: ` — ${r.message}` }) : null),
    timeEl(r.finished_at || r.created_at)))));
}

function renderLate(body, late, lateAfter) {
  if (!late.length) {
    replace(body, h('p', { class: 'muted', text: `No fire started more than ${fmtDuration(lateAfter ?? 60000)} late.` }));
    return;
  }
  replace(body, h('ul', { class: 'plain' }, late.map((l) => {
    const r = l.run || {};
    return h('li', null,
      h('a', { href: `#/runs/${enc(r.id)}`, text: `Run ${r.id}` }),
      h('span', { class: 'badge warn', text: `${fmtDuration(l.lateness_ms)} late` }),
      h('span', { class: 'grow' }, jobLink(r.job_id)),
      timeEl(r.scheduled_at));
  })));
}

// ---------------------------------------------------------------------------------------------
// Jobs list

async function viewJobs(ctx) {
  setTitle(ctx, 'Jobs');
  const params = routeParams();
  const search = h('input', { type: 'search', id: 'jobs-search', value: params.get('search') || '', placeholder: 'Name contains…', autocomplete: 'off', spellcheck: 'false' });
  const stateSel = selectEl({ id: 'jobs-state' }, [['', 'Any state'], ...JOB_STATES.map((s) => [s, s])], params.get('state') || '');
  const appInput = h('input', { type: 'text', id: 'jobs-app', value: params.get('app') || '', list: 'jobs-app-list', placeholder: 'Any app', autocomplete: 'off', spellcheck: 'false', size: '12' });
  const appList = h('datalist', { id: 'jobs-app-list' });
  const sortSel = selectEl({ id: 'jobs-sort' }, [['-created', 'Newest first'], ['created', 'Oldest first'], ['name', 'Name A–Z'], ['-name', 'Name Z–A']], params.get('sort') || '-created');
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'jobs-error' });
  const cols = [{ label: 'Name', cls: 'col-name' }, { label: 'App / handler' }, { label: 'Schedule', cls: 'col-schedule' }, { label: 'Time zone' }, { label: 'State' }, { label: 'Next fire' }, { label: 'Last fired' }, { label: 'Actions' }];
  const t = table(cols, 'jobs-table');
  t.table.setAttribute('aria-label', 'Jobs');
  const pager = new Pager(() => load());
  append(ctx.root, [
    pageHead('Jobs', { actions: [h('a', { class: 'button primary', href: '#/jobs/new', text: 'New job' })] }),
    h('section', { class: 'card' },
      h('form', { class: 'toolbar', role: 'search', onsubmit: (e) => { e.preventDefault(); reload.now(); } },
        h('div', { class: 'field grow' }, h('label', { for: 'jobs-search', text: 'Search jobs' }), search),
        h('div', { class: 'field' }, h('label', { for: 'jobs-state', text: 'State' }), stateSel),
        h('div', { class: 'field' }, h('label', { for: 'jobs-app', text: 'App' }), appInput, appList),
        h('div', { class: 'field' }, h('label', { for: 'jobs-sort', text: 'Sort' }), sortSel)),
      errorEl,
      t.wrap,
      pager.el),
  ]);
  focusHeading(ctx);

  api('GET', '/apps').then((a) => {
    if (ctx.alive) replace(appList, (a.apps || []).map((x) => h('option', { value: x.name })));
  }).catch(() => {});

  let seq = 0;
  let controller = null;
  async function load() {
    const mine = ++seq;
    if (controller) controller.abort();
    controller = new AbortController();
    const filters = { search: search.value.trim(), state: stateSel.value, app: appInput.value.trim(), sort: sortSel.value === '-created' ? '' : sortSel.value };
    setRouteParams(filters);
    t.table.classList.add('loading');
    t.table.setAttribute('aria-busy', 'true');
    try {
      const page = await api('GET', `/jobs${query({ ...filters, limit: PAGE_SIZE, cursor: pager.cursor })}`, undefined, { signal: controller.signal });
      if (!ctx.alive || mine !== seq) return;
      clear(errorEl);
      const jobs = page.jobs || [];
      jobs.forEach(rememberJob);
      replace(t.tbody, jobs.map((j) => jobRow(j)));
      if (!jobs.length) t.tbody.append(emptyRow(cols, pager.cursors.length > 1 ? 'No more jobs.' : 'No job matches.'));
      pager.update(page.next_cursor, jobs.length);
    } catch (e) {
      if (e && e.name === 'AbortError') return;
      if (!ctx.alive || mine !== seq) return;
      fillError(errorEl, e);
    } finally {
      if (mine === seq) {
        t.table.classList.remove('loading');
        t.table.removeAttribute('aria-busy');
      }
    }
  }

  function jobRow(j) {
    const rowError = h('span', { class: 'field-error', role: 'alert' });
    const name = j.name;
    const actions = h('div', { class: 'actions' });
    const afterChange = () => load();
    const startStop = j.state === 'running'
      ? h('button', { type: 'button', class: 'small', text: 'Stop', 'aria-label': `Stop ${name}`, onclick: (e) => act(e.currentTarget, async () => { await api('POST', `/jobs/${enc(j.id)}/stop`); flash(`Stopped ${name}`); afterChange(); }, rowError) })
      : h('button', { type: 'button', class: 'small', text: 'Start', 'aria-label': `Start ${name}`, onclick: (e) => act(e.currentTarget, async () => { await api('POST', `/jobs/${enc(j.id)}/start`); flash(`Started ${name}`); afterChange(); }, rowError) });
    append(actions, [
      startStop,
      h('button', { type: 'button', class: 'small', text: 'Trigger', 'aria-label': `Trigger ${name}`, title: 'Run once now', onclick: (e) => act(e.currentTarget, async () => {
        const run = await api('POST', `/jobs/${enc(j.id)}/trigger`);
        flash(h('span', null, `Triggered ${name}: `, h('a', { href: `#/runs/${enc(run.id)}`, text: `run ${run.id}` })));
      }, rowError) }),
      h('button', { type: 'button', class: 'small danger', text: 'Delete', 'aria-label': `Delete ${name}`, onclick: (e) => {
        if (!confirm(`Delete job "${name}"? Its runs stay in the log.`)) return;
        act(e.currentTarget, async () => { await api('DELETE', `/jobs/${enc(j.id)}`); forgetJob(j.id); flash(`Deleted ${name}`); afterChange(); }, rowError);
      } }),
    ]);
    return row(cols, [
      h('a', { href: `#/jobs/${enc(j.id)}`, class: 'job-link', text: name }),
      h('span', null, h('code', { text: j.app }), h('span', { class: 'muted', text: ' / ' }), h('code', { text: j.handler })),
      scheduleEl(j.schedule),
      j.timezone,
      badge(j.state),
      timeEl(j.next_fire_at),
      timeEl(j.last_fired_at),
      h('div', null, actions, rowError),
    ], { dataset: { jobId: String(j.id), jobName: name } });
  }

  const reload = ctx.debounce(() => {
    pager.reset();
    load();
  }, 300);
  search.addEventListener('input', reload);
  appInput.addEventListener('input', reload);
  stateSel.addEventListener('change', reload.now);
  sortSel.addEventListener('change', reload.now);
  ctx.onCleanup(() => controller && controller.abort());
  await load();
}

// ---------------------------------------------------------------------------------------------
// Job create / edit form

/** The job document the form shows, from a JobView (for edits) or the defaults. */
function docFromJob(job) {
  const sharding = job.sharding || {};
  const retry = job.retry || {};
  const alerts = job.alerts && job.alerts.webhook ? job.alerts : null;
  return {
    name: job.name,
    app: job.app,
    handler: job.handler,
    schedule: job.schedule,
    timezone: job.timezone,
    args: job.args === undefined ? null : job.args,
    balance: job.balance || 'round_robin',
    retry: {
      max_attempts: retry.max_attempts ?? 1,
      backoff: retry.backoff || 'fixed',
      initial_delay_ms: retry.initial_delay_ms ?? 1000,
      max_delay_ms: retry.max_delay_ms ?? 60000,
    },
    timeout_ms: job.timeout_ms ?? null,
    misfire: job.misfire || 'fire_once',
    catch_up_window_ms: job.catch_up_window_ms ?? 3600000,
    overlap: job.overlap || 'allow',
    priority: job.priority ?? 5,
    sharding: sharding.split ? { split: true } : sharding.broadcast ? { broadcast: true } : sharding.count ? { count: sharding.count } : {},
    alerts: alerts ? { webhook: alerts.webhook, format: alerts.format || 'json', late_after_ms: alerts.late_after_ms ?? 60000 } : null,
  };
}

function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

async function viewJobForm(ctx, id) {
  const editing = id !== null;
  setTitle(ctx, editing ? 'Edit job' : 'New job');
  let original = null;
  let version = null;
  if (editing) {
    const job = await api('GET', `/jobs/${enc(id)}`);
    if (!ctx.alive) return;
    rememberJob(job);
    original = docFromJob(job);
    version = job.version;
    setTitle(ctx, `Edit ${job.name}`);
  }
  const start = original || {
    name: '', app: '', handler: '', schedule: { cron: '' }, timezone: browserZone(), args: null,
    balance: 'round_robin', retry: { max_attempts: 1, backoff: 'fixed', initial_delay_ms: 1000, max_delay_ms: 60000 },
    timeout_ms: null, misfire: 'fire_once', catch_up_window_ms: 3600000, overlap: 'allow', priority: 5, sharding: {}, alerts: null,
  };
  const sched = scheduleOf(start.schedule);

  // --- controls
  const c = {};
  c.name = h('input', { type: 'text', id: 'job-name', name: 'name', value: start.name, maxlength: '200', autocomplete: 'off', spellcheck: 'false' });
  c.app = h('input', { type: 'text', id: 'job-app', name: 'app', value: start.app, list: 'job-app-list', autocomplete: 'off', spellcheck: 'false' });
  c.handler = h('input', { type: 'text', id: 'job-handler', name: 'handler', value: start.handler, list: 'job-handler-list', autocomplete: 'off', spellcheck: 'false' });
  const appList = h('datalist', { id: 'job-app-list' });
  const handlerList = h('datalist', { id: 'job-handler-list' });
  c.kind = selectEl({ id: 'job-kind', name: 'kind' }, SCHEDULE_KINDS.map(([k, label]) => [k, label]), sched.kind || 'cron');
  const makeExpr = (kind, value) => (kind === 'rrule'
    ? h('textarea', { id: 'job-expr', name: 'expression', rows: '4', spellcheck: 'false', value, placeholder: 'DTSTART;TZID=Europe/Paris:20260101T090000\nRRULE:FREQ=WEEKLY;BYDAY=MO,WE,FR' })
    : h('input', { type: 'text', id: 'job-expr', name: 'expression', value, spellcheck: 'false', autocomplete: 'off', placeholder: { cron: '0 30 2 * * ?', at: '2026-12-01T09:00:00', every: '5m' }[kind] || '' }));
  c.expr = makeExpr(c.kind.value, sched.expr || '');
  c.timezone = h('input', { type: 'text', id: 'job-timezone', name: 'timezone', value: start.timezone || 'UTC', list: 'job-zone-list', autocomplete: 'off', spellcheck: 'false' });
  const zones = [...new Set([browserZone(), ...COMMON_ZONES])];
  const zoneList = h('datalist', { id: 'job-zone-list' }, zones.map((z) => h('option', { value: z })));
  c.args = h('textarea', { id: 'job-args', name: 'args', rows: '4', spellcheck: 'false', value: start.args === null ? '' : prettyJson(start.args), placeholder: 'null, or e.g. {"region": "eu"}' });
  c.balance = selectEl({ id: 'job-balance' }, BALANCES.map((b) => [b, b]), start.balance);
  c.maxAttempts = h('input', { type: 'number', id: 'job-max-attempts', min: '1', max: '100', step: '1', value: String(start.retry.max_attempts) });
  c.backoff = selectEl({ id: 'job-backoff' }, BACKOFFS.map((b) => [b, b]), start.retry.backoff);
  c.initialDelay = h('input', { type: 'number', id: 'job-initial-delay', min: '0', step: '1', value: String(start.retry.initial_delay_ms) });
  c.maxDelay = h('input', { type: 'number', id: 'job-max-delay', min: '0', step: '1', value: String(start.retry.max_delay_ms) });
  c.timeout = h('input', { type: 'number', id: 'job-timeout', min: '1', step: '1', value: start.timeout_ms === null ? '' : String(start.timeout_ms), placeholder: 'none' });
  c.misfire = selectEl({ id: 'job-misfire' }, MISFIRES.map((m) => [m, m]), start.misfire);
  c.catchUp = h('input', { type: 'number', id: 'job-catch-up', min: '0', step: '1', value: String(start.catch_up_window_ms) });
  c.overlap = selectEl({ id: 'job-overlap' }, OVERLAPS.map((o) => [o, o]), start.overlap);
  c.priority = h('input', { type: 'number', id: 'job-priority', min: '0', max: '10', step: '1', value: String(start.priority) });
  const shardMode = start.sharding.split ? 'split' : start.sharding.broadcast ? 'broadcast' : start.sharding.count ? 'count' : 'none';
  c.sharding = selectEl({ id: 'job-sharding' }, [['none', 'none'], ['split', 'split (array args)'], ['broadcast', 'broadcast'], ['count', 'count K']], shardMode);
  c.shardCount = h('input', { type: 'number', id: 'job-shard-count', min: '1', max: '10000', step: '1', value: String(start.sharding.count || 2) });
  c.webhook = h('input', { type: 'url', id: 'job-webhook', value: start.alerts ? start.alerts.webhook : '', placeholder: 'https://hooks.example.com/…', autocomplete: 'off', spellcheck: 'false' });
  c.alertFormat = selectEl({ id: 'job-alert-format' }, ALERT_FORMATS.map((f) => [f, f]), start.alerts ? start.alerts.format : 'json');
  c.lateAfter = h('input', { type: 'number', id: 'job-late-after', min: '0', step: '1', value: String(start.alerts ? start.alerts.late_after_ms : 60000) });
  c.start = h('input', { type: 'checkbox', id: 'job-start' });

  const f = {
    name: field('Name', c.name),
    app: field('App', c.app, { hint: 'The executors\u2019 app name' }),
    handler: field('Handler', c.handler),
    kind: field('Schedule kind', c.kind),
    expr: field('Expression', c.expr, { hint: SCHEDULE_KINDS.find(([k]) => k === c.kind.value)[2], wide: true }),
    timezone: field('Time zone', c.timezone, { hint: 'IANA zone, e.g. Europe/Paris' }),
    args: field('Arguments (JSON)', c.args, { hint: 'Any JSON value; empty means null', wide: true }),
    balance: field('Balance', c.balance),
    maxAttempts: field('Max attempts', c.maxAttempts),
    backoff: field('Backoff', c.backoff),
    initialDelay: field('Initial delay (ms)', c.initialDelay),
    maxDelay: field('Max delay (ms)', c.maxDelay),
    timeout: field('Timeout (ms)', c.timeout, { hint: 'Empty: no timeout' }),
    misfire: field('Misfire', c.misfire),
    catchUp: field('Catch-up window (ms)', c.catchUp),
    overlap: field('Overlap', c.overlap),
    priority: field('Priority', c.priority, { hint: '0 (lowest) to 10' }),
    sharding: field('Sharding', c.sharding),
    shardCount: field('Shard count', c.shardCount),
    webhook: field('Webhook URL', c.webhook, { hint: 'Empty: no alerts', wide: true }),
    alertFormat: field('Format', c.alertFormat),
    lateAfter: field('Late after (ms)', c.lateAfter),
  };
  // Where the server's `field` of a problem points.
  const fieldOf = {
    name: 'name', app: 'app', handler: 'handler', schedule: 'expr', 'schedule.cron': 'expr', 'schedule.rrule': 'expr',
    'schedule.at': 'expr', 'schedule.every': 'expr', timezone: 'timezone', args: 'args', balance: 'balance',
    retry: 'maxAttempts', 'retry.max_attempts': 'maxAttempts', 'retry.backoff': 'backoff',
    'retry.initial_delay_ms': 'initialDelay', 'retry.max_delay_ms': 'maxDelay', timeout_ms: 'timeout',
    misfire: 'misfire', catch_up_window_ms: 'catchUp', overlap: 'overlap', priority: 'priority',
    sharding: 'sharding', 'sharding.count': 'shardCount', alerts: 'webhook', 'alerts.webhook': 'webhook',
    'alerts.format': 'alertFormat', 'alerts.late_after_ms': 'lateAfter',
  };

  const previewBody = h('div', { class: 'preview-body' });
  const preview = h('section', { class: 'preview', testid: 'preview', 'aria-live': 'polite', 'aria-labelledby': 'preview-title' },
    h('h3', { id: 'preview-title', text: 'Next instants' }), previewBody);
  const formError = h('div', { class: 'alert error', role: 'alert', testid: 'form-error' });
  const submit = h('button', { type: 'submit', class: 'primary', text: editing ? 'Save changes' : 'Create job' });
  const cancel = h('a', { class: 'button', href: editing ? `#/jobs/${enc(id)}` : '#/jobs', text: 'Cancel' });

  const form = h('form', { class: 'job-form', novalidate: true, 'aria-labelledby': 'form-title', testid: 'job-form' },
    formError,
    h('div', { class: 'form-columns' },
      h('div', null,
        h('fieldset', null, h('legend', { text: 'Job' }),
          h('div', { class: 'form-grid' }, f.name, f.app, f.handler), appList, handlerList),
        h('fieldset', null, h('legend', { text: 'Schedule' }),
          h('div', { class: 'form-grid' }, f.kind, f.timezone, f.expr), zoneList, preview),
        h('fieldset', null, h('legend', { text: 'Arguments' }), h('div', { class: 'form-grid' }, f.args))),
      h('div', null,
        h('fieldset', null, h('legend', { text: 'Execution' }),
          h('div', { class: 'form-grid' }, f.balance, f.priority, f.sharding, f.shardCount, f.timeout, f.overlap, f.misfire, f.catchUp)),
        h('fieldset', null, h('legend', { text: 'Retry' }),
          h('div', { class: 'form-grid' }, f.maxAttempts, f.backoff, f.initialDelay, f.maxDelay)),
        h('fieldset', null, h('legend', { text: 'Alerts' }),
          h('div', { class: 'form-grid' }, f.webhook, f.alertFormat, f.lateAfter)))),
    editing ? null : h('p', null, h('label', { class: 'check', for: 'job-start' }, c.start, 'Start at once')),
    h('div', { class: 'actions' }, submit, cancel));

  append(ctx.root, [
    h('div', { class: 'page-head' }, h('div', null,
      h('h1', { id: 'form-title', tabindex: '-1', text: editing ? `Edit ${start.name}` : 'New job' }),
      editing ? h('p', { class: 'subtitle', text: `Version ${version}. Saving refuses the change if someone else changed the job since.` }) : null)),
    form,
  ]);
  focusHeading(ctx);

  // --- behaviour
  let apps = [];
  api('GET', '/apps').then((a) => {
    if (!ctx.alive) return;
    apps = a.apps || [];
    replace(appList, apps.map((x) => h('option', { value: x.name })));
    updateHandlers();
  }).catch(() => {});
  function updateHandlers() {
    const app = apps.find((a) => a.name === c.app.value.trim());
    const handlers = app ? app.handlers || [] : [...new Set(apps.flatMap((a) => a.handlers || []))];
    replace(handlerList, handlers.map((x) => h('option', { value: x })));
  }
  c.app.addEventListener('input', updateHandlers);

  const syncSharding = () => {
    f.shardCount.hidden = c.sharding.value !== 'count';
  };
  c.sharding.addEventListener('change', syncSharding);
  syncSharding();

  const setFieldError = (key, message) => {
    const wrap = f[key];
    if (!wrap) return;
    wrap.errorEl.textContent = message || '';
    const control = wrap.querySelector('input, select, textarea');
    if (control) {
      if (message) control.setAttribute('aria-invalid', 'true');
      else control.removeAttribute('aria-invalid');
    }
  };
  const clearErrors = () => {
    for (const key of Object.keys(f)) if (key !== 'args') setFieldError(key, '');
    clear(formError);
  };

  // Arguments: JSON, checked as typed.
  const parseArgs = () => {
    const text = c.args.value.trim();
    if (!text) return { ok: true, value: null };
    try {
      return { ok: true, value: JSON.parse(text) };
    } catch (e) {
      return { ok: false, message: `not valid JSON: ${e.message}` };
    }
  };
  const checkArgs = () => {
    const r = parseArgs();
    setFieldError('args', r.ok ? '' : r.message);
    return r;
  };
  // Checked while typing only: a check on blur would move the buttons under a click.
  c.args.addEventListener('input', ctx.debounce(checkArgs, 250));

  // Schedule kind switch: an RRULE gets a textarea; each kind keeps its own expression.
  const exprByKind = { [c.kind.value]: c.expr.value };
  let shownKind = c.kind.value;
  c.kind.addEventListener('change', () => {
    exprByKind[shownKind] = c.expr.value;
    shownKind = c.kind.value;
    const next = makeExpr(c.kind.value, exprByKind[c.kind.value] ?? '');
    next.setAttribute('aria-describedby', c.expr.getAttribute('aria-describedby'));
    c.expr.replaceWith(next);
    c.expr = next;
    c.expr.addEventListener('input', schedulePreview);
    if (f.expr.hintEl) f.expr.hintEl.textContent = SCHEDULE_KINDS.find(([k]) => k === c.kind.value)[2];
    schedulePreview.now();
  });

  // Live preview.
  let previewSeq = 0;
  async function runPreview() {
    const mine = ++previewSeq;
    const expr = c.expr.value.trim();
    const zone = c.timezone.value.trim() || 'UTC';
    if (!expr) {
      replace(previewBody, h('p', { class: 'muted', text: 'Type an expression to see when it fires.' }));
      preview.dataset.state = 'empty';
      return;
    }
    preview.dataset.state = 'loading';
    preview.setAttribute('aria-busy', 'true');
    try {
      const res = await api('POST', '/schedules/preview', { schedule: { [c.kind.value]: c.kind.value === 'rrule' ? c.expr.value.trim() : expr }, timezone: zone, count: 5 });
      if (!ctx.alive || mine !== previewSeq) return;
      const instants = res.instants || [];
      setFieldError('expr', '');
      preview.dataset.state = 'ok';
      if (!instants.length) {
        replace(previewBody, h('p', { class: 'muted', text: 'No instant after now: this schedule would never fire.' }));
        return;
      }
      replace(previewBody, h('ol', { testid: 'preview-list' }, instants.map((i) => h('li', { testid: 'preview-instant' },
        h('span', { class: 'pv-local', title: `in ${zone}`, text: readableLocal(i.local) }),
        h('span', { class: 'pv-utc', text: `UTC ${readableLocal(i.utc).replace(/ Z$/, '')}` })))),
      h('p', { class: 'muted small', text: `Local times in ${zone}.` }));
    } catch (e) {
      if (!ctx.alive || mine !== previewSeq || (e instanceof ApiError && e.status === 401)) return;
      preview.dataset.state = 'error';
      replace(previewBody, fillError(h('p', { class: 'alert error', role: 'alert', testid: 'preview-error' }), e));
    } finally {
      if (mine === previewSeq) preview.removeAttribute('aria-busy');
    }
  }
  const schedulePreview = ctx.debounce(runPreview, 300);
  c.expr.addEventListener('input', schedulePreview);
  c.timezone.addEventListener('input', schedulePreview);
  c.timezone.addEventListener('change', schedulePreview);
  runPreview();

  function readNumber(key, control, { min, max, optional } = {}) {
    const text = control.value.trim();
    if (!text) {
      if (optional) return { ok: true, value: null };
      setFieldError(key, 'enter a number');
      return { ok: false };
    }
    const n = Number(text);
    if (!Number.isInteger(n) || (min !== undefined && n < min) || (max !== undefined && n > max)) {
      setFieldError(key, `enter a whole number${min !== undefined ? ` from ${min}` : ''}${max !== undefined ? ` to ${max}` : ''}`);
      return { ok: false };
    }
    return { ok: true, value: n };
  }

  /** The document the form describes, or null (with the fields at fault marked). */
  function readForm() {
    clearErrors();
    let ok = true;
    const need = (key, control, what) => {
      if (!control.value.trim()) {
        setFieldError(key, `enter ${what}`);
        ok = false;
      }
    };
    need('name', c.name, 'a name');
    need('app', c.app, 'the app');
    need('handler', c.handler, 'the handler');
    need('expr', c.expr, 'an expression');
    need('timezone', c.timezone, 'a time zone');
    const args = checkArgs();
    if (!args.ok) ok = false;
    const num = (key, control, opts) => {
      const r = readNumber(key, control, opts);
      if (!r.ok) ok = false;
      return r.value;
    };
    const maxAttempts = num('maxAttempts', c.maxAttempts, { min: 1, max: 100 });
    const initialDelay = num('initialDelay', c.initialDelay, { min: 0 });
    const maxDelay = num('maxDelay', c.maxDelay, { min: 0 });
    const timeout = num('timeout', c.timeout, { min: 1, max: 7 * 24 * 3600000, optional: true });
    const catchUp = num('catchUp', c.catchUp, { min: 0, max: 31 * 24 * 3600000 });
    const priority = num('priority', c.priority, { min: 0, max: 10 });
    let sharding = {};
    if (c.sharding.value === 'split') sharding = { split: true };
    else if (c.sharding.value === 'broadcast') sharding = { broadcast: true };
    else if (c.sharding.value === 'count') sharding = { count: num('shardCount', c.shardCount, { min: 1, max: 10000 }) };
    if (c.sharding.value === 'split' && args.ok && !Array.isArray(args.value)) {
      setFieldError('args', 'must be a JSON array when sharding is split');
      ok = false;
    }
    if (ok && initialDelay > maxDelay) {
      setFieldError('initialDelay', 'must not exceed the max delay');
      ok = false;
    }
    let alerts = null;
    const webhook = c.webhook.value.trim();
    if (webhook) {
      if (!/^https?:\/\/\S+$/i.test(webhook)) {
        setFieldError('webhook', 'enter an http:// or https:// URL');
        ok = false;
      }
      alerts = { webhook, format: c.alertFormat.value, late_after_ms: num('lateAfter', c.lateAfter, { min: 0 }) };
    }
    if (!ok) return null;
    const kind = c.kind.value;
    return {
      name: c.name.value.trim(),
      app: c.app.value.trim(),
      handler: c.handler.value.trim(),
      schedule: { [kind]: c.expr.value.trim() },
      timezone: c.timezone.value.trim(),
      args: args.value,
      balance: c.balance.value,
      retry: { max_attempts: maxAttempts, backoff: c.backoff.value, initial_delay_ms: initialDelay, max_delay_ms: maxDelay },
      timeout_ms: timeout,
      misfire: c.misfire.value,
      catch_up_window_ms: catchUp,
      overlap: c.overlap.value,
      priority,
      sharding,
      alerts,
    };
  }

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const doc = readForm();
    if (!doc) {
      formError.textContent = 'Some fields need attention.';
      const bad = form.querySelector('[aria-invalid="true"]');
      if (bad) bad.focus();
      return;
    }
    let body;
    if (editing) {
      body = { version };
      for (const [k, v] of Object.entries(doc)) {
        if (JSON.stringify(v) !== JSON.stringify(original[k])) body[k] = v;
      }
      if (Object.keys(body).length === 1) {
        location.hash = `#/jobs/${enc(id)}`;
        flash('Nothing changed.', 'info');
        return;
      }
    } else {
      body = { ...doc, start: c.start.checked };
      if (body.alerts === null) delete body.alerts;
      if (body.timeout_ms === null) delete body.timeout_ms;
    }
    submit.disabled = true;
    try {
      const job = editing ? await api('PATCH', `/jobs/${enc(id)}`, body) : await api('POST', '/jobs', body);
      rememberJob(job);
      flash(editing ? `Saved ${job.name}` : `Created ${job.name}`);
      location.hash = `#/jobs/${enc(job.id)}`;
    } catch (e) {
      if (!ctx.alive || (e instanceof ApiError && e.status === 401)) return;
      if (e instanceof ApiError && (e.status === 409 || e.status === 412) && editing) {
        replace(formError, h('strong', { text: 'Someone else changed this job since you opened it. ' }),
          e.detail || '', ' ',
          h('button', { type: 'button', class: 'small', text: 'Reload the job', onclick: () => route() }));
      } else if (e instanceof ApiError && e.status === 409) {
        fillError(formError, e, 'Not created:');
      } else {
        fillError(formError, e, editing ? 'Not saved:' : 'Not created:');
        const key = e instanceof ApiError && e.field ? fieldOf[e.field] || fieldOf[e.field.split('.')[0]] : null;
        if (key) {
          const detail = e.detail.startsWith(`${e.field}: `) ? e.detail.slice(e.field.length + 2) : e.detail;
          setFieldError(key, detail);
          const control = f[key].querySelector('input, select, textarea');
          if (control) control.focus();
        }
      }
      formError.scrollIntoView({ block: 'nearest' });
    } finally {
      submit.disabled = false;
    }
  });
}

/** `2026-11-23T18:00:00.000+01:00` → `2026-11-23 18:00:00 +01:00`. */
function readableLocal(text) {
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$/.exec(text || '');
  if (!m) return text || '';
  const frac = m[3] && /[1-9]/.test(m[3]) ? `.${m[3]}` : '';
  return `${m[1]} ${m[2]}${frac}${m[4] ? ` ${m[4] === 'Z' ? 'Z' : m[4]}` : ''}`;
}

// ---------------------------------------------------------------------------------------------
// Job page

async function viewJob(ctx, id) {
  setTitle(ctx, `Job ${id}`);
  let job = await api('GET', `/jobs/${enc(id)}`);
  if (!ctx.alive) return;
  rememberJob(job);
  setTitle(ctx, job.name);

  const head = h('div');
  const actionError = h('div', { class: 'alert error', role: 'alert', testid: 'job-action-error' });
  const defBody = h('div', { testid: 'job-definition' });
  const runsError = h('div', { class: 'alert error', role: 'alert' });
  const cols = [{ label: 'Run' }, { label: 'State' }, { label: 'Scheduled' }, { label: 'Trigger' }, { label: 'Started' }, { label: 'Finished' }, { label: 'Duration' }, { label: 'Node' }, { label: 'Message' }];
  const t = table(cols, 'job-runs');
  t.table.setAttribute('aria-label', 'Runs of this job');
  const pager = new Pager(() => loadRuns());
  append(ctx.root, [
    head,
    actionError,
    h('div', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'h-def' }, h('h2', { id: 'h-def', text: 'Definition' }), defBody)),
    h('section', { class: 'card', 'aria-labelledby': 'h-runs' },
      h('h2', { id: 'h-runs' }, h('span', { text: 'Runs' }), h('span', { class: 'muted small', text: 'refreshes every 3 s' })),
      runsError, t.wrap, pager.el),
  ]);

  const call = (button, method, path, done) => act(button, async () => {
    const res = await api(method, path);
    if (ctx.alive) await done(res);
  }, actionError);

  function renderHead() {
    const running = job.state === 'running';
    const startStop = running
      ? h('button', { type: 'button', text: 'Stop', onclick: (e) => call(e.currentTarget, 'POST', `/jobs/${enc(id)}/stop`, (j) => { job = j; render(); flash('Stopped'); }) })
      : h('button', { type: 'button', class: 'primary', text: 'Start', onclick: (e) => call(e.currentTarget, 'POST', `/jobs/${enc(id)}/start`, (j) => { job = j; render(); flash('Started'); }) });
    replace(head, pageHead(job.name, {
      subtitle: [h('code', { text: job.app }), ' / ', h('code', { text: job.handler }), ` · job ${job.id}`],
      badges: [h('span', { testid: 'job-state' }, badge(job.state))],
      actions: [
        startStop,
        h('button', { type: 'button', text: 'Run now', onclick: (e) => call(e.currentTarget, 'POST', `/jobs/${enc(id)}/trigger`, async (run) => {
          flash(h('span', null, 'Triggered: ', h('a', { href: `#/runs/${enc(run.id)}`, text: `run ${run.id}` })));
          pager.reset();
          await loadRuns();
        }) }),
        h('a', { class: 'button', href: `#/jobs/${enc(id)}/edit`, text: 'Edit' }),
        h('button', { type: 'button', class: 'danger', text: 'Delete', onclick: (e) => {
          if (!confirm(`Delete job "${job.name}"? Its runs stay in the log.`)) return;
          call(e.currentTarget, 'DELETE', `/jobs/${enc(id)}`, () => { forgetJob(id); flash(`Deleted ${job.name}`); location.hash = '#/jobs'; });
        } }),
      ],
    }));
  }

  function renderDefinition() {
    const d = docFromJob(job);
    const sh = d.sharding.split ? 'split (array args across executors)' : d.sharding.broadcast ? 'broadcast (every healthy executor)' : d.sharding.count ? `${d.sharding.count} shards` : 'none';
    const items = [
      ['State', badge(job.state)],
      ['Schedule', scheduleEl(job.schedule)],
      ['Time zone', job.timezone],
      ['Next fire', timeEl(job.next_fire_at, { rel: true })],
      ['Last fired', timeEl(job.last_fired_at, { rel: true })],
      ['Started', timeEl(job.started_at)],
      ['Balance', d.balance],
      ['Sharding', sh],
      ['Retry', `${d.retry.max_attempts} attempt${d.retry.max_attempts === 1 ? '' : 's'}, ${d.retry.backoff} backoff from ${fmtDuration(d.retry.initial_delay_ms)} up to ${fmtDuration(d.retry.max_delay_ms)}`],
      ['Timeout', d.timeout_ms === null ? 'none' : fmtDuration(d.timeout_ms)],
      ['Misfire', `${d.misfire}${d.misfire === 'catch_up' ? ` (window ${fmtDuration(d.catch_up_window_ms)})` : ''}`],
      ['Overlap', d.overlap],
      ['Priority', String(d.priority)],
      ['Alerts', d.alerts ? [h('code', { text: d.alerts.webhook }), ` (${d.alerts.format}, late after ${fmtDuration(d.alerts.late_after_ms)})`] : 'none'],
      ['Arguments', job.args === null || job.args === undefined ? h('span', { class: 'muted', text: 'null' }) : h('pre', { text: prettyJson(job.args) })],
      ['Created', timeEl(job.created_at)],
      ['Updated', timeEl(job.updated_at)],
      ['Version', String(job.version)],
      ['Partition', String(job.partition)],
    ];
    replace(defBody, h('dl', { class: 'props' }, items.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', null, v)])));
  }

  function render() {
    renderHead();
    renderDefinition();
  }
  render();
  focusHeading(ctx);

  let seq = 0;
  async function loadRuns() {
    const mine = ++seq;
    try {
      const page = await api('GET', `/jobs/${enc(id)}/runs${query({ limit: JOB_RUNS_PAGE, cursor: pager.cursor })}`);
      if (!ctx.alive || mine !== seq) return;
      clear(runsError);
      const runs = page.runs || [];
      replace(t.tbody, runs.map((r) => row(cols, [
        h('a', { href: `#/runs/${enc(r.id)}`, text: `Run ${r.id}` }),
        badge(r.state),
        timeEl(r.scheduled_at),
        r.trigger,
        timeEl(r.started_at),
        timeEl(r.finished_at),
        durationBetween(r.started_at, r.finished_at),
        h('code', { text: r.node_id }),
        r.message || '',
      ], { dataset: { runId: String(r.id), state: r.state } })));
      if (!runs.length) t.tbody.append(emptyRow(cols, pager.cursors.length > 1 ? 'No more runs.' : 'No run yet.'));
      pager.update(page.next_cursor, runs.length);
    } catch (e) {
      if (ctx.alive && mine === seq) fillError(runsError, e);
    }
  }

  async function refresh() {
    try {
      const j = await api('GET', `/jobs/${enc(id)}`);
      if (!ctx.alive) return;
      if (j.version !== job.version || j.state !== job.state || j.next_fire_at !== job.next_fire_at || j.last_fired_at !== job.last_fired_at) {
        job = j;
        rememberJob(job);
        // Keep focus where it is when only the definition changed.
        renderDefinition();
        keepFocus(head, renderHead);
      }
    } catch (e) {
      if (e instanceof ApiError && e.status === 404 && ctx.alive) {
        fillError(actionError, new Error('This job has been deleted.'));
      }
    }
    await loadRuns();
  }

  await loadRuns();
  ctx.poll(refresh, 3000);
}

// ---------------------------------------------------------------------------------------------
// Runs list

async function viewRuns(ctx) {
  setTitle(ctx, 'Runs');
  const params = routeParams();
  const stateSel = selectEl({ id: 'runs-state' }, [['', 'Any state'], ...RUN_STATES.map((s) => [s, s.replace('_', ' ')])], params.get('state') || '');
  const jobInput = h('input', { type: 'text', inputmode: 'numeric', id: 'runs-job', value: params.get('job') || '', placeholder: 'Any job', autocomplete: 'off', size: '18', pattern: '[0-9]*' });
  const dead = h('input', { type: 'checkbox', id: 'runs-dead', checked: params.get('dead') === '1' });
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'runs-error' });
  const updated = h('span', { class: 'muted small' });
  const cols = [{ label: 'Run' }, { label: 'Job' }, { label: 'State' }, { label: 'Scheduled' }, { label: 'Trigger' }, { label: 'Finished' }, { label: 'Duration' }, { label: 'Node' }, { label: 'Message' }];
  const t = table(cols, 'runs-table');
  t.table.setAttribute('aria-label', 'Runs');
  const pager = new Pager(() => load());
  append(ctx.root, [
    pageHead('Runs', { actions: [updated] }),
    h('section', { class: 'card' },
      h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); reload.now(); } },
        h('div', { class: 'field' }, h('label', { for: 'runs-state', text: 'State' }), stateSel),
        h('div', { class: 'field' }, h('label', { for: 'runs-job', text: 'Job id' }), jobInput),
        h('label', { class: 'check', for: 'runs-dead' }, dead, 'Dead letters only')),
      errorEl, t.wrap, pager.el),
  ]);
  focusHeading(ctx);

  const sync = () => {
    stateSel.disabled = dead.checked;
  };
  sync();

  let seq = 0;
  async function load() {
    const mine = ++seq;
    const job = jobInput.value.trim();
    setRouteParams({ state: dead.checked ? '' : stateSel.value, job, dead: dead.checked ? '1' : '' });
    if (job && !/^\d+$/.test(job)) {
      fillError(errorEl, new Error('The job id is a number (see the job page\u2019s address).'));
      return;
    }
    try {
      const path = dead.checked ? '/dead-letters' : '/runs';
      const page = await api('GET', `${path}${query({ state: dead.checked ? '' : stateSel.value, job_id: job, limit: PAGE_SIZE, cursor: pager.cursor })}`);
      if (!ctx.alive || mine !== seq) return;
      clear(errorEl);
      const runs = page.runs || [];
      replace(t.tbody, runs.map((r) => row(cols, [
        h('a', { href: `#/runs/${enc(r.id)}`, text: `Run ${r.id}` }),
        jobLink(r.job_id),
        badge(r.state),
        timeEl(r.scheduled_at),
        r.trigger,
        timeEl(r.finished_at),
        durationBetween(r.started_at, r.finished_at),
        h('code', { text: r.node_id }),
        r.message || '',
      ], { dataset: { runId: String(r.id), state: r.state } })));
      if (!runs.length) t.tbody.append(emptyRow(cols, pager.cursors.length > 1 ? 'No more runs.' : 'No run matches.'));
      pager.update(page.next_cursor, runs.length);
      updated.textContent = `Updated ${localStamp(new Date()).slice(11)} · refreshes every 5 s`;
    } catch (e) {
      if (ctx.alive && mine === seq) fillError(errorEl, e);
    }
  }
  const reload = ctx.debounce(() => {
    pager.reset();
    load();
  }, 300);
  stateSel.addEventListener('change', reload.now);
  jobInput.addEventListener('input', reload);
  dead.addEventListener('change', () => {
    sync();
    reload.now();
  });
  await load();
  ctx.poll(load, 5000);
}

// ---------------------------------------------------------------------------------------------
// Run page

async function viewRun(ctx, id) {
  setTitle(ctx, `Run ${id}`);
  let run = await api('GET', `/runs/${enc(id)}`);
  if (!ctx.alive) return;
  const head = h('div');
  const actionError = h('div', { class: 'alert error', role: 'alert', testid: 'run-action-error' });
  const fields = h('div', { testid: 'run-fields' });
  const attempts = h('div', { testid: 'attempts' });
  append(ctx.root, [
    head,
    actionError,
    h('section', { class: 'card', 'aria-labelledby': 'h-run' }, h('h2', { id: 'h-run', text: 'Run' }), fields),
    h('section', { class: 'card', 'aria-labelledby': 'h-attempts' }, h('h2', { id: 'h-attempts', text: 'Shards and attempts' }), attempts),
  ]);

  function render() {
    const unfinished = UNFINISHED_RUN.has(run.state);
    const actions = [];
    if (unfinished) {
      actions.push(h('button', { type: 'button', class: 'danger', text: 'Cancel run', onclick: (e) => {
        if (!confirm(`Cancel run ${run.id}? Its executors are told to stop.`)) return;
        act(e.currentTarget, async () => {
          run = await api('POST', `/runs/${enc(id)}/cancel`);
          if (ctx.alive) {
            render();
            flash('Cancelled');
          }
        }, actionError);
      } }));
    } else {
      const rerun = h('button', { type: 'button', class: DEAD_RUN.has(run.state) ? 'primary' : '', text: DEAD_RUN.has(run.state) ? 'Re-run dead letter' : 'Re-run', onclick: (e) => act(e.currentTarget, async () => {
        const again = await api('POST', `/runs/${enc(id)}/rerun`);
        flash(`Started run ${again.id}`);
        location.hash = `#/runs/${enc(again.id)}`;
      }, actionError) });
      actions.push(rerun);
    }
    const toJob = h('a', { class: 'button', href: `#/jobs/${enc(run.job_id)}`, text: 'Job' });
    actions.push(toJob);
    // A deleted job can be neither opened nor run again.
    jobName(run.job_id).then((name) => {
      if (name !== null || !ctx.alive) return;
      toJob.remove();
      for (const b of head.querySelectorAll('button')) {
        if (b.textContent.startsWith('Re-run')) {
          b.disabled = true;
          b.title = 'The job of this run has been deleted';
        }
      }
    });
    replace(head, pageHead(`Run ${run.id}`, {
      subtitle: ['of ', jobLink(run.job_id), unfinished ? h('span', { class: 'muted', text: ' · refreshes every 2 s' }) : null],
      badges: [h('span', { testid: 'run-state' }, badge(run.state))],
      actions,
    }));
    const items = [
      ['State', badge(run.state)],
      ['Job', [jobLink(run.job_id), h('span', { class: 'muted', text: ` (${run.job_id})` })]],
      ['Trigger', run.trigger],
      ['Scheduled', timeEl(run.scheduled_at)],
      ['Created', timeEl(run.created_at)],
      ['Started', timeEl(run.started_at)],
      ['Finished', timeEl(run.finished_at)],
      ['Duration', durationBetween(run.started_at, run.finished_at)],
      ['Priority', String(run.priority)],
      ['Node', h('code', { text: run.node_id })],
      ['Partition / epoch', `${run.partition} / ${run.epoch}`],
      ['Message', run.message ? h('pre', { testid: 'run-message', text: run.message }) : h('span', { class: 'muted', text: 'none' })],
    ];
    replace(fields, h('dl', { class: 'props' }, items.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', null, v)])));
    renderAttempts();
  }

  function renderAttempts() {
    const list = [...(run.attempts || [])].sort((a, b) => a.shard - b.shard || a.attempt - b.attempt || a.id - b.id);
    if (!list.length) {
      replace(attempts, h('p', { class: 'muted', text: UNFINISHED_RUN.has(run.state) ? 'No attempt yet: the run waits for an executor.' : 'This run made no attempt.' }));
      return;
    }
    const cols = [{ label: 'Shard' }, { label: 'Attempt' }, { label: 'State' }, { label: 'Executor' }, { label: 'Not before' }, { label: 'Dispatched' }, { label: 'Deadline' }, { label: 'Finished' }, { label: 'Duration' }];
    const t = table(cols, 'attempts-table');
    t.table.setAttribute('aria-label', 'Attempts');
    for (const a of list) {
      t.tbody.append(row(cols, [
        a.shards > 1 ? `${a.shard + 1} of ${a.shards}` : 'single',
        `#${a.attempt} (id ${a.id})`,
        badge(a.state),
        a.executor_id ? h('code', { text: a.executor_id }) : h('span', { class: 'muted', text: '—' }),
        timeEl(a.not_before),
        timeEl(a.dispatched_at),
        timeEl(a.deadline),
        timeEl(a.finished_at),
        durationBetween(a.dispatched_at, a.finished_at),
      ], { dataset: { attemptId: String(a.id), state: a.state } }));
      const blocks = [];
      if (a.error !== null && a.error !== undefined && a.error !== '') {
        blocks.push(h('div', { class: 'detail-block' }, h('h4', { text: 'Error' }), h('pre', { class: 'error-text', testid: 'attempt-error', text: a.error })));
      }
      if (a.output !== null && a.output !== undefined) {
        blocks.push(h('div', { class: 'detail-block' }, h('h4', { text: 'Output' }), h('pre', { testid: 'attempt-output', text: prettyJson(a.output) })));
      }
      if (a.args !== null && a.args !== undefined) {
        blocks.push(h('div', { class: 'detail-block' }, h('h4', { text: 'Arguments' }), h('pre', { testid: 'attempt-args', text: prettyJson(a.args) })));
      }
      if (blocks.length) {
        t.tbody.append(h('tr', { class: 'detail-row' }, h('td', { colspan: String(cols.length), 'data-label': '' }, blocks)));
      }
    }
    replace(attempts, t.wrap);
  }

  render();
  focusHeading(ctx);
  ctx.poll(async () => {
    if (!UNFINISHED_RUN.has(run.state)) return;
    const fresh = await api('GET', `/runs/${enc(id)}`);
    if (!ctx.alive) return;
    if (JSON.stringify(fresh) !== JSON.stringify(run)) {
      run = fresh;
      keepFocus(head, render);
    }
  }, 2000);
}

// ---------------------------------------------------------------------------------------------
// Executors

async function viewExecutors(ctx) {
  setTitle(ctx, 'Executors');
  const updated = h('span', { class: 'muted small' });
  const appsBody = h('div', { testid: 'apps' });
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'executors-error' });
  const cols = [{ label: 'Executor' }, { label: 'App' }, { label: 'Health' }, { label: 'State' }, { label: 'Address' }, { label: 'Weight', num: true }, { label: 'In flight / capacity', num: true }, { label: 'Handlers' }, { label: 'Last heartbeat' }, { label: 'Actions' }];
  const t = table(cols, 'executors-table');
  t.table.setAttribute('aria-label', 'Executors');
  append(ctx.root, [
    pageHead('Executors', { actions: [updated] }),
    h('section', { class: 'card', 'aria-labelledby': 'h-apps' }, h('h2', { id: 'h-apps', text: 'Apps' }), appsBody),
    h('section', { class: 'card', 'aria-labelledby': 'h-inst' }, h('h2', { id: 'h-inst', text: 'Instances' }), errorEl, t.wrap),
  ]);
  focusHeading(ctx);

  async function load() {
    const [appsRes, exRes] = await Promise.allSettled([api('GET', '/apps'), api('GET', '/executors')]);
    if (!ctx.alive) return;
    if (appsRes.status === 'fulfilled') {
      const apps = appsRes.value.apps || [];
      const acols = [{ label: 'App' }, { label: 'Executors', num: true }, { label: 'Healthy', num: true }, { label: 'Capacity', num: true }, { label: 'Handlers' }];
      const at = table(acols, 'apps-table');
      for (const a of apps) {
        at.tbody.append(row(acols, [
          h('code', { text: a.name }),
          String(a.executors),
          h('span', { class: `badge ${a.healthy_executors === a.executors && a.executors ? 'ok' : a.healthy_executors ? 'warn' : 'fail'}`, text: String(a.healthy_executors) }),
          String(a.capacity),
          (a.handlers || []).join(', ') || '—',
        ]));
      }
      if (!apps.length) at.tbody.append(emptyRow(acols, 'No executor has registered.'));
      replace(appsBody, at.wrap);
    } else {
      replace(appsBody, errorBox(appsRes.reason));
    }
    if (exRes.status === 'fulfilled') {
      clear(errorEl);
      const list = exRes.value.executors || [];
      replace(t.tbody, list.map((e) => {
        const rowError = h('span', { class: 'field-error', role: 'alert' });
        // `drained` is an operator's drain (resumable); `draining` is the executor leaving by itself.
        const button = e.state === 'left' ? null : e.state === 'drained'
          ? h('button', { type: 'button', class: 'small', text: 'Resume', 'aria-label': `Resume ${e.id}`, onclick: (ev) => act(ev.currentTarget, async () => { await api('POST', `/executors/${enc(e.id)}/resume`); flash(`Resumed ${e.id}`); await load(); }, rowError) })
          : h('button', { type: 'button', class: 'small', text: 'Drain', 'aria-label': `Drain ${e.id}`, onclick: (ev) => act(ev.currentTarget, async () => { await api('POST', `/executors/${enc(e.id)}/drain`); flash(`Draining ${e.id}`); await load(); }, rowError) });
        return row(cols, [
          h('code', { text: e.id }),
          h('code', { text: e.app }),
          e.healthy ? badge('healthy') : badge('unhealthy'),
          badge(e.state),
          h('code', { text: e.address }),
          String(e.weight),
          `${e.in_flight} / ${e.capacity}`,
          (e.handlers || []).join(', ') || '—',
          timeEl(e.last_heartbeat_at, { rel: true }),
          h('div', null, h('div', { class: 'actions' }, button), rowError),
        ], { dataset: { executorId: e.id } });
      }));
      if (!list.length) t.tbody.append(emptyRow(cols, 'No executor has registered.'));
    } else {
      fillError(errorEl, exRes.reason);
    }
    updated.textContent = `Updated ${localStamp(new Date()).slice(11)} · refreshes every 5 s`;
  }
  await load();
  ctx.poll(load, 5000);
}

// ---------------------------------------------------------------------------------------------
// Start

function boot() {
  appRoot = document.getElementById('app');
  window.addEventListener('hashchange', route);
  route();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
else boot();
