// The run page: its fields, cancel or re-run, its shards and attempts with their outputs, and
// the handler log (run_logs.js).

import { api, enc, jobName } from './api.js';
import { h, append, replace, flash, act } from './dom.js';
import { timeEl, durationBetween, prettyJson, badge, jobLink } from './format.js';
import { table, row } from './tables.js';
import { pageHead, keepFocus, setTitle, focusHeading } from './view.js';
import { logPanel } from './run_logs.js';

const UNFINISHED_RUN = new Set(['pending', 'queued', 'running']);
const DEAD_RUN = new Set(['failed', 'no_executor']);
/** The states in which a run of a fifo flow key holds the key until released. */
const HOLDS_KEY = new Set(['failed', 'timed_out', 'no_executor']);

export async function viewRun(ctx, id) {
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
    logPanel(ctx, id),
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
      // A run that failed under a fifo key holds it; the server says when it does not.
      if (run.flow_key && HOLDS_KEY.has(run.state)) {
        const key = run.flow_key;
        actions.push(h('button', { type: 'button', text: 'Release flow key', onclick: (e) => {
          if (!confirm(`Let run ${run.id} give up flow key ${key}? Its next run starts.`)) return;
          act(e.currentTarget, async () => {
            run = await api('POST', `/runs/${enc(id)}/release`);
            if (ctx.alive) {
              render();
              flash(`Released ${key}`);
            }
          }, actionError);
        } }));
      }
    }
    const toJob = h('a', { class: 'button', href: `#/jobs/${enc(run.job_id)}`, text: 'Job' });
    actions.push(toJob);
    // A deleted job can be neither opened nor run again.
    const isTask = run.task_id !== null && run.task_id !== undefined;
    jobName(run.job_id).then((name) => {
      if ((name !== null && !isTask) || !ctx.alive) return;
      toJob.remove();
      for (const b of head.querySelectorAll('button')) {
        if (b.textContent.startsWith('Re-run')) {
          b.disabled = true;
          b.title = isTask ? 'A task runs once: enqueue it again to run it again' : 'The job of this run has been deleted';
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
      ['Flow key', run.flow_key ? h('code', { text: run.flow_key }) : h('span', { class: 'muted', text: 'none' })],
      ['Message', run.message ? h('pre', { testid: 'run-message', text: run.message }) : h('span', { class: 'muted', text: 'none' })],
    ];
    const parent = run.input && run.input.parent;
    if (parent) {
      items.push(['Parent run', [runLink(parent.run_id), h('span', { class: 'muted', text: ` of ` }), jobLink(parent.job_id), ` (${parent.state})`]]);
    }
    if (run.input !== null && run.input !== undefined) {
      items.push(['Input', h('pre', { testid: 'run-input', text: prettyJson(run.input) })]);
    }
    if (run.children && run.children.length) {
      items.push(['Child runs', h('ul', { class: 'plain', testid: 'run-children' }, run.children.map((c) => h('li', null, runLink(c.run_id), ' of ', jobLink(c.job_id))))]);
    }
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

function runLink(id) {
  return h('a', { href: `#/runs/${enc(id)}`, text: `run ${id}` });
}
