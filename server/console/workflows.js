// The workflows pages: the list, a workflow (its graph, its runs, trigger, pause and resume)
// and a workflow run (its graph with each step's state, linking to the step runs; cancel).

import { api, enc } from './api.js';
import { h, append, replace, flash, act, fillError } from './dom.js';
import { timeEl, scheduleEl, badge, prettyJson } from './format.js';
import { table, row, emptyRow } from './tables.js';
import { pageHead, keepFocus, setTitle, focusHeading } from './view.js';
import { workflowGraph, needsOf } from './graph.js';
import { flowText } from './job_flow.js';

const UNFINISHED = new Set(['pending', 'queued', 'running']);

export async function viewWorkflows(ctx) {
  setTitle(ctx, 'Workflows');
  const cols = [{ label: 'Name', cls: 'col-name' }, { label: 'Steps' }, { label: 'Schedule', cls: 'col-schedule' }, { label: 'State' }, { label: 'Last fired' }];
  const t = table(cols, 'workflows-table');
  t.table.setAttribute('aria-label', 'Workflows');
  const errorEl = h('div', { class: 'alert error', role: 'alert' });
  append(ctx.root, [pageHead('Workflows'), h('section', { class: 'card' }, errorEl, t.wrap)]);
  focusHeading(ctx);
  try {
    const list = await api('GET', '/workflows');
    if (!ctx.alive) return;
    const all = list.workflows || [];
    replace(t.tbody, all.map((w) => row(cols, [
      h('a', { href: `#/workflows/${enc(w.id)}`, text: w.name }),
      String(w.steps.length),
      scheduleEl(w.schedule),
      badge(w.state),
      timeEl(w.last_fired_at, { rel: true }),
    ], { dataset: { workflowId: String(w.id), workflowName: w.name } })));
    if (!all.length) t.tbody.append(emptyRow(cols, 'No workflow yet: create one with POST /api/v1/workflows or carillon apply.'));
  } catch (e) {
    fillError(errorEl, e);
  }
}

export async function viewWorkflow(ctx, id) {
  setTitle(ctx, `Workflow ${id}`);
  let workflow = await api('GET', `/workflows/${enc(id)}`);
  if (!ctx.alive) return;
  setTitle(ctx, workflow.name);
  const head = h('div');
  const actionError = h('div', { class: 'alert error', role: 'alert' });
  const graph = h('div', { class: 'wf-graph-wrap' });
  const fields = h('div');
  const cols = [{ label: 'Run' }, { label: 'State' }, { label: 'Scheduled' }, { label: 'Trigger' }, { label: 'Finished' }];
  const runs = table(cols, 'workflow-runs-table');
  runs.table.setAttribute('aria-label', 'Workflow runs');
  append(ctx.root, [
    head, actionError,
    h('section', { class: 'card', 'aria-labelledby': 'h-graph' }, h('h2', { id: 'h-graph', text: 'Steps' }), graph),
    h('section', { class: 'card', 'aria-labelledby': 'h-wf' }, h('h2', { id: 'h-wf', text: 'Workflow' }), fields),
    h('section', { class: 'card', 'aria-labelledby': 'h-wf-runs' }, h('h2', { id: 'h-wf-runs', text: 'Runs' }), runs.wrap),
  ]);

  function render() {
    const running = workflow.state === 'running';
    const toggle = h('button', { type: 'button', text: running ? 'Pause' : 'Resume', onclick: (e) => act(e.currentTarget, async () => {
      workflow = await api('POST', `/workflows/${enc(id)}/${running ? 'stop' : 'start'}`);
      if (ctx.alive) keepFocus(head, render);
    }, actionError) });
    const trigger = h('button', { type: 'button', class: 'primary', text: 'Run now', onclick: (e) => act(e.currentTarget, async () => {
      const run = await api('POST', `/workflows/${enc(id)}/trigger`, {});
      flash(`Started workflow run ${run.id}`);
      location.hash = `#/workflow-runs/${enc(run.id)}`;
    }, actionError) });
    const manual = workflow.schedule && workflow.schedule.manual;
    replace(head, pageHead(workflow.name, { subtitle: `${workflow.steps.length} steps`, badges: [badge(workflow.state)], actions: manual ? [trigger] : [trigger, toggle] }));
    replace(graph, workflowGraph(workflow.steps, { label: `Steps of ${workflow.name}` }));
    const items = [
      ['Schedule', scheduleEl(workflow.schedule)],
      ['Time zone', workflow.timezone],
      ['Misfire', workflow.misfire],
      ['Overlap', workflow.overlap],
      ['Flow control', flowText(workflow.flow)],
      ['Parameters', h('pre', { text: prettyJson(workflow.params) })],
      ['Steps', h('ul', { class: 'plain' }, workflow.steps.map((s) => h('li', null,
        h('strong', { text: s.name }),
        s.job ? ` runs job ${s.job}` : ` ${s.app} / ${s.handler}`,
        needsOf(s).length ? h('span', { class: 'muted', text: ` after ${needsOf(s).map((n) => (n.on === 'success' ? n.step : `${n.step} (${n.on})`)).join(', ')}` }) : null)))],
      ['Version', String(workflow.version)],
      ['Created', timeEl(workflow.created_at)],
    ];
    replace(fields, h('dl', { class: 'props' }, items.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', null, v)])));
  }

  async function loadRuns() {
    const page = await api('GET', `/workflows/${enc(id)}/runs?limit=50`);
    if (!ctx.alive) return;
    const list = page.runs || [];
    replace(runs.tbody, list.map((r) => row(cols, [
      h('a', { href: `#/workflow-runs/${enc(r.id)}`, text: `Workflow run ${r.id}` }),
      badge(r.state),
      timeEl(r.scheduled_at),
      r.trigger,
      timeEl(r.finished_at),
    ], { dataset: { runId: String(r.id), state: r.state } })));
    if (!list.length) runs.tbody.append(emptyRow(cols, 'No run yet.'));
  }

  render();
  focusHeading(ctx);
  await loadRuns();
  ctx.poll(loadRuns, 3000);
}

export async function viewWorkflowRun(ctx, id) {
  setTitle(ctx, `Workflow run ${id}`);
  let run = await api('GET', `/workflow-runs/${enc(id)}`);
  if (!ctx.alive) return;
  const head = h('div');
  const actionError = h('div', { class: 'alert error', role: 'alert' });
  const graph = h('div', { class: 'wf-graph-wrap' });
  const cols = [{ label: 'Step' }, { label: 'State' }, { label: 'Run' }, { label: 'Updated' }];
  const steps = table(cols, 'workflow-steps-table');
  steps.table.setAttribute('aria-label', 'Steps');
  const params = h('div');
  append(ctx.root, [
    head, actionError,
    h('section', { class: 'card', 'aria-labelledby': 'h-run-graph' }, h('h2', { id: 'h-run-graph', text: 'Steps' }), graph, steps.wrap),
    h('section', { class: 'card', 'aria-labelledby': 'h-params' }, h('h2', { id: 'h-params', text: 'Parameters' }), params),
  ]);

  function render() {
    const unfinished = UNFINISHED.has(run.state);
    const actions = [h('a', { class: 'button', href: `#/workflows/${enc(run.workflow_id)}`, text: 'Workflow' })];
    if (!unfinished) {
      actions.unshift(h('button', { type: 'button', class: run.state === 'succeeded' ? '' : 'primary', text: 'Re-run failed steps', onclick: (e) => act(e.currentTarget, async () => {
        const again = await api('POST', `/workflow-runs/${enc(id)}/rerun`);
        flash(`Started workflow run ${again.id}`);
        location.hash = `#/workflow-runs/${enc(again.id)}`;
      }, actionError) }));
    }
    if (unfinished) {
      actions.unshift(h('button', { type: 'button', class: 'danger', text: 'Cancel workflow run', onclick: (e) => {
        if (!confirm(`Cancel workflow run ${run.id}? Its running steps are told to stop.`)) return;
        act(e.currentTarget, async () => {
          run = await api('POST', `/workflow-runs/${enc(id)}/cancel`);
          if (ctx.alive) {
            keepFocus(head, render);
            flash('Cancelled');
          }
        }, actionError);
      } }));
    }
    replace(head, pageHead(`Workflow run ${run.id}`, {
      subtitle: [run.job_name || `workflow ${run.workflow_id}`, unfinished ? h('span', { class: 'muted', text: ' · refreshes every 2 s' }) : null],
      badges: [h('span', { testid: 'workflow-run-state' }, badge(run.state))],
      actions,
    }));
    replace(graph, workflowGraph(run.steps, {
      href: (s) => (s.run_id ? `#/runs/${enc(s.run_id)}` : null),
      label: `Steps of workflow run ${run.id}`,
    }));
    replace(steps.tbody, run.steps.map((s) => row(cols, [
      s.name,
      badge(s.state),
      s.run_id ? h('a', { href: `#/runs/${enc(s.run_id)}`, text: `Run ${s.run_id}` }) : h('span', { class: 'muted', text: '—' }),
      timeEl(s.updated_at),
    ], { dataset: { step: s.name, state: s.state } })));
    replace(params, h('pre', { text: prettyJson(run.params) }));
  }

  render();
  focusHeading(ctx);
  ctx.poll(async () => {
    if (!UNFINISHED.has(run.state)) return;
    const fresh = await api('GET', `/workflow-runs/${enc(id)}`);
    if (!ctx.alive) return;
    if (JSON.stringify(fresh) !== JSON.stringify(run)) {
      run = fresh;
      keepFocus(head, render);
    }
  }, 2000);
}
