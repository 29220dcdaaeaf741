// The jobs list page: search and filters, start/stop, trigger and delete per row.

import { api, query, enc, rememberJob, forgetJob } from './api.js';
import { h, append, clear, replace, fillError, flash, act, selectEl } from './dom.js';
import { timeEl, scheduleEl, badge } from './format.js';
import { PAGE_SIZE, table, row, emptyRow, Pager } from './tables.js';
import { pageHead, routeParams, setRouteParams, setTitle, focusHeading } from './view.js';

const JOB_STATES = ['stopped', 'running', 'done'];

export async function viewJobs(ctx) {
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
