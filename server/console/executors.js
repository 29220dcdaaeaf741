// The executors page: apps with their capacity, and the instances with drain / resume.

import { api, enc } from './api.js';
import { h, append, clear, replace, errorBox, fillError, flash, act } from './dom.js';
import { localStamp, timeEl, badge } from './format.js';
import { table, row, emptyRow } from './tables.js';
import { pageHead, setTitle, focusHeading } from './view.js';

export async function viewExecutors(ctx) {
  setTitle(ctx, 'Executors');
  const updated = h('span', { class: 'muted small' });
  const appsBody = h('div', { testid: 'apps' });
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'executors-error' });
  const cols = [{ label: 'Executor' }, { label: 'App' }, { label: 'Health' }, { label: 'State' }, { label: 'Protocol' }, { label: 'Address' }, { label: 'Weight', num: true }, { label: 'In flight / capacity', num: true }, { label: 'Handlers' }, { label: 'Last heartbeat' }, { label: 'Actions' }];
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
          e.protocol === 'xxl' ? h('span', { title: 'an XXL-JOB executor: it runs any handler of its app it has', text: 'XXL-JOB' }) : 'Carillon',
          h('code', { text: e.address }),
          String(e.weight),
          `${e.in_flight} / ${e.capacity}`,
          e.protocol === 'xxl' ? h('span', { class: 'muted', text: 'any (not listed by XXL-JOB)' }) : (e.handlers || []).join(', ') || '—',
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
