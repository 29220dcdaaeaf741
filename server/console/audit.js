// The audit page: who changed what, from where, and what came of it, newest first, in the
// chosen namespace (or every one, for the cluster's admins), filtered by actor, operation and
// outcome. Namespace admins see their own namespace's events; others are told so.

import { ApiError, api, namespace } from './api.js';
import { h, append, clear, replace, fillError, selectEl } from './dom.js';
import { localStamp, timeEl } from './format.js';
import { PAGE_SIZE, table, row, emptyRow, Pager } from './tables.js';
import { pageHead, routeParams, setRouteParams, setTitle, focusHeading } from './view.js';

const OUTCOMES = [['', 'Any outcome'], ['ok', 'ok'], ['failed', 'failed'], ['refused', 'refused']];
const OUTCOME_TONE = { ok: 'ok', failed: 'fail', refused: 'warn' };

export async function viewAudit(ctx) {
  setTitle(ctx, 'Audit');
  const params = routeParams();
  const actor = h('input', { type: 'text', id: 'audit-actor', value: params.get('actor') || '', placeholder: 'Anyone', autocomplete: 'off', size: '22' });
  const operation = h('input', { type: 'text', id: 'audit-operation', value: params.get('operation') || '', placeholder: 'Any, e.g. deleteJob', autocomplete: 'off', size: '20' });
  const outcome = selectEl({ id: 'audit-outcome' }, OUTCOMES, params.get('outcome') || '');
  const every = h('input', { type: 'checkbox', id: 'audit-every', checked: params.get('every') === '1' });
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'audit-error' });
  const updated = h('span', { class: 'muted small' });
  const cols = [{ label: 'When' }, { label: 'Who' }, { label: 'From' }, { label: 'Operation' }, { label: 'Path' }, { label: 'Namespace' }, { label: 'Outcome' }, { label: 'Changes' }];
  const t = table(cols, 'audit-table');
  t.table.setAttribute('aria-label', 'Audit events');
  const pager = new Pager(() => load());
  append(ctx.root, [
    pageHead('Audit', { subtitle: 'Every change made through the API, and every refused one', actions: [updated] }),
    h('section', { class: 'card' },
      h('form', { class: 'toolbar', onsubmit: (e) => { e.preventDefault(); reload.now(); } },
        h('div', { class: 'field' }, h('label', { for: 'audit-actor', text: 'Who' }), actor),
        h('div', { class: 'field' }, h('label', { for: 'audit-operation', text: 'Operation' }), operation),
        h('div', { class: 'field' }, h('label', { for: 'audit-outcome', text: 'Outcome' }), outcome),
        h('label', { class: 'check', for: 'audit-every' }, every, 'Every namespace (cluster admins)')),
      errorEl, t.wrap, pager.el),
  ]);
  focusHeading(ctx);

  let seq = 0;
  async function load() {
    const mine = ++seq;
    setRouteParams({ actor: actor.value.trim(), operation: operation.value.trim(), outcome: outcome.value, every: every.checked ? '1' : '' });
    const q = new URLSearchParams();
    for (const [k, v] of [['actor', actor.value.trim()], ['operation', operation.value.trim()], ['outcome', outcome.value]]) {
      if (v) q.set(k, v);
    }
    q.set('limit', String(PAGE_SIZE));
    if (pager.cursor) q.set('cursor', pager.cursor);
    try {
      const page = await api('GET', `/audit?${q}`, undefined, { allNamespaces: every.checked });
      if (!ctx.alive || mine !== seq) return;
      clear(errorEl);
      const events = page.events || [];
      replace(t.tbody, events.map((e) => row(cols, [
        timeEl(e.at),
        e.actor,
        h('code', { text: e.source }),
        h('code', { text: e.operation }),
        h('code', { class: 'wrap', text: e.resource }),
        e.namespace || '—',
        h('span', null, h('span', { class: `badge ${OUTCOME_TONE[e.outcome] || ''}`, text: e.outcome }), ` ${e.status}`),
        changesEl(e),
      ], { dataset: { eventId: String(e.id), operation: e.operation, outcome: e.outcome, namespace: e.namespace || '' } })));
      if (!events.length) t.tbody.append(emptyRow(cols, pager.cursors.length > 1 ? 'No more events.' : 'No event matches.'));
      pager.update(page.next_cursor, events.length);
      updated.textContent = `Updated ${localStamp(new Date()).slice(11)}`;
    } catch (e) {
      if (!ctx.alive || mine !== seq) return;
      if (e instanceof ApiError && e.status === 403) {
        const where = every.checked ? 'every namespace' : `namespace ${namespace() || 'default'}`;
        fillError(errorEl, new Error(`The audit trail of ${where} is for its admins.`));
      } else {
        fillError(errorEl, e);
      }
      replace(t.tbody);
      pager.update(null, 0);
    }
  }
  const reload = ctx.debounce(() => {
    pager.reset();
    load();
  }, 300);
  actor.addEventListener('input', reload);
  operation.addEventListener('input', reload);
  outcome.addEventListener('change', reload.now);
  every.addEventListener('change', reload.now);
  await load();
}

/** What an edit changed (each field before and after), or why the call failed. */
function changesEl(event) {
  const changes = event.changes || [];
  if (changes.length) {
    return h('ul', { class: 'changes' }, changes.map((c) => h('li', null,
      h('code', { text: c.field }), ': ', show(c.before), ' \u2192 ', show(c.after))));
  }
  return event.detail || '';
}

function show(value) {
  if (value === null || value === undefined) return h('span', { class: 'muted', text: 'none' });
  return h('code', { text: typeof value === 'string' ? value : JSON.stringify(value) });
}
