// The job page: the definition, start/stop, run now, edit, delete, and the job's runs.

import { ApiError, api, query, enc, rememberJob, forgetJob } from './api.js';
import { h, append, clear, replace, fillError, flash, act } from './dom.js';
import { fmtDuration, timeEl, durationBetween, prettyJson, scheduleEl, badge, jobLink } from './format.js';
import { table, row, emptyRow, Pager } from './tables.js';
import { pageHead, keepFocus, setTitle, focusHeading } from './view.js';
import { docFromJob } from './job_doc.js';
import { flowText } from './job_flow.js';

const JOB_RUNS_PAGE = 20;

export async function viewJob(ctx, id) {
  setTitle(ctx, `Job ${id}`);
  let job = await api('GET', `/jobs/${enc(id)}`);
  if (!ctx.alive) return;
  rememberJob(job);
  setTitle(ctx, job.name);

  const head = h('div');
  // What the API warns of (a handler no executor of the app offers), refreshed with the job.
  const warnings = h('div', { class: 'alert warn', role: 'status', testid: 'job-warnings' });
  const actionError = h('div', { class: 'alert error', role: 'alert', testid: 'job-action-error' });
  const defBody = h('div', { testid: 'job-definition' });
  const runsError = h('div', { class: 'alert error', role: 'alert' });
  const cols = [{ label: 'Run' }, { label: 'State' }, { label: 'Scheduled' }, { label: 'Trigger' }, { label: 'Started' }, { label: 'Finished' }, { label: 'Duration' }, { label: 'Node' }, { label: 'Message' }];
  const t = table(cols, 'job-runs');
  t.table.setAttribute('aria-label', 'Runs of this job');
  const pager = new Pager(() => loadRuns());
  append(ctx.root, [
    head,
    warnings,
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
      subtitle: job.http
        ? [h('code', { text: `${job.http.method} ${job.http.url}` }), ` · HTTP job ${job.id}`]
        : [h('code', { text: job.app }), ' / ', h('code', { text: job.handler }), ` · job ${job.id}`],
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
      ['Bounds', boundsText(d.bounds, job.fired)],
      ['Jitter', d.jitter_ms ? `up to ${fmtDuration(d.jitter_ms)}` : 'none'],
      ['Calendars', d.calendars.length ? d.calendars.join(', ') : 'none'],
      ['Children', childrenEl(d.children)],
      ['Flow control', flowText(d.flow)],
      ['Pause after', d.pause_after_failures ? `${d.pause_after_failures} failed runs in a row` : 'never'],
      ['Alerts', d.alerts ? [h('code', { text: d.alerts.webhook }), ` (${d.alerts.format}, late after ${fmtDuration(d.alerts.late_after_ms)})`] : 'none'],
      ['Arguments', job.args === null || job.args === undefined ? h('span', { class: 'muted', text: 'null' }) : h('pre', { text: prettyJson(job.args) })],
      ['Created', timeEl(job.created_at)],
      ['Updated', timeEl(job.updated_at)],
      ['Version', String(job.version)],
      ['Partition', String(job.partition)],
    ];
    replace(defBody, h('dl', { class: 'props' }, items.flatMap(([k, v]) => [h('dt', { text: k }), h('dd', null, v)])));
  }

  function renderWarnings() {
    replace(warnings, (job.warnings || []).map((w) => h('p', { text: `Warning: ${w}` })));
  }

  function render() {
    renderHead();
    renderWarnings();
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
      if (JSON.stringify(j.warnings) !== JSON.stringify(job.warnings)) {
        job.warnings = j.warnings;
        renderWarnings();
      }
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

/** The job's bounds in words, with how many of its runs it has fired. */
function boundsText(bounds, fired) {
  if (!bounds) return 'none';
  const parts = [];
  if (bounds.not_before) parts.push(`not before ${bounds.not_before}`);
  if (bounds.not_after) parts.push(`not after ${bounds.not_after}`);
  if (bounds.max_runs) parts.push(`${fired ?? 0} of ${bounds.max_runs} runs fired`);
  return parts.join('; ');
}

/** A job's children by list, each a link to its job. */
function childrenEl(children) {
  const lists = [['on_success', 'on success'], ['on_failure', 'on failure'], ['always', 'always']]
    .filter(([list]) => children[list] && children[list].length);
  if (!lists.length) return h('span', { class: 'muted', text: 'none' });
  return h('ul', { class: 'plain', testid: 'job-children' }, lists.map(([list, label]) => h('li', null,
    h('span', { class: 'muted', text: `${label}: ` }),
    children[list].flatMap((id, i) => (i ? [', ', jobLink(id)] : [jobLink(id)])))));
}
