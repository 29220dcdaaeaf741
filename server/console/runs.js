// The runs list page: runs or dead letters, filtered by state and job.

import { api, query, enc } from './api.js';
import { h, append, clear, replace, fillError, selectEl } from './dom.js';
import { localStamp, timeEl, durationBetween, badge, jobLink } from './format.js';
import { PAGE_SIZE, table, row, emptyRow, Pager } from './tables.js';
import { pageHead, routeParams, setRouteParams, setTitle, focusHeading } from './view.js';

const RUN_STATES = ['pending', 'queued', 'running', 'succeeded', 'failed', 'cancelled', 'skipped', 'no_executor', 'done'];

export async function viewRuns(ctx) {
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
