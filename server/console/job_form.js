// The job create / edit page: the form, its checks, and the live preview of the next instants.

import { ApiError, api, enc, rememberJob } from './api.js';
import { h, append, clear, replace, fillError, flash, selectEl, field } from './dom.js';
import { SCHEDULE_KINDS, prettyJson, scheduleOf } from './format.js';
import { setTitle, focusHeading } from './view.js';
import {
  BALANCES, BACKOFFS, MISFIRES, OVERLAPS, ALERT_FORMATS, COMMON_ZONES, docFromJob, browserZone,
} from './job_doc.js';
import { policyFields, instantNote } from './job_policies.js';
import { httpFields } from './job_http.js';
import { flowFields } from './job_flow.js';

export async function viewJobForm(ctx, id) {
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
    bounds: null, jitter_ms: null, calendars: [], pause_after_failures: null, children: {}, http: null, flow: null,
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
  c.expr = makeExpr(c.kind.value, sched.kind === 'manual' ? '' : (sched.expr || ''));
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
  // What runs the job: an executor's handler, or an HTTP call the nodes make (for life).
  c.runs = selectEl({ id: 'job-runs', disabled: editing }, [['executor', 'an executor\u2019s handler'], ['http', 'an HTTP call']], start.http ? 'http' : 'executor');

  const f = {
    name: field('Name', c.name),
    runs: field('Runs', c.runs, { hint: editing ? 'Fixed when the job was created' : 'An HTTP call needs no executor of yours' }),
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
  const policies = policyFields(start);
  Object.assign(f, policies.f);
  const http = httpFields(start);
  Object.assign(f, http.f);
  const flow = flowFields(start);
  Object.assign(f, flow.f);
  // Where the server's `field` of a problem points.
  const fieldOf = {
    name: 'name', app: 'app', handler: 'handler', schedule: 'expr', 'schedule.cron': 'expr', 'schedule.rrule': 'expr',
    'schedule.at': 'expr', 'schedule.every': 'expr', timezone: 'timezone', args: 'args', balance: 'balance',
    retry: 'maxAttempts', 'retry.max_attempts': 'maxAttempts', 'retry.backoff': 'backoff',
    'retry.initial_delay_ms': 'initialDelay', 'retry.max_delay_ms': 'maxDelay', timeout_ms: 'timeout',
    misfire: 'misfire', catch_up_window_ms: 'catchUp', overlap: 'overlap', priority: 'priority',
    sharding: 'sharding', 'sharding.count': 'shardCount', alerts: 'webhook', 'alerts.webhook': 'webhook',
    'alerts.format': 'alertFormat', 'alerts.late_after_ms': 'lateAfter', 'schedule.fixed_delay': 'expr', 'schedule.manual': 'expr',
    ...policies.fieldOf,
    ...http.fieldOf,
    ...flow.fieldOf,
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
          h('div', { class: 'form-grid' }, f.name, f.runs, f.app, f.handler), appList, handlerList),
        http.fieldset,
        h('fieldset', null, h('legend', { text: 'Schedule' }),
          h('div', { class: 'form-grid' }, f.kind, f.timezone, f.expr), zoneList, preview),
        h('fieldset', null, h('legend', { text: 'Arguments' }), h('div', { class: 'form-grid' }, f.args))),
      h('div', null,
        h('fieldset', null, h('legend', { text: 'Execution' }),
          h('div', { class: 'form-grid' }, f.balance, f.priority, f.sharding, f.shardCount, f.timeout, f.overlap, f.misfire, f.catchUp)),
        h('fieldset', null, h('legend', { text: 'Retry' }),
          h('div', { class: 'form-grid' }, f.maxAttempts, f.backoff, f.initialDelay, f.maxDelay)),
        policies.fieldset,
        flow.fieldset,
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

  const callsUrl = () => c.runs.value === 'http';
  const syncRuns = () => {
    f.app.hidden = callsUrl();
    f.handler.hidden = callsUrl();
    http.fieldset.hidden = !callsUrl();
  };
  c.runs.addEventListener('change', syncRuns);
  syncRuns();
  http.testButton.addEventListener('click', () => {
    clearErrors();
    const args = checkArgs();
    const doc = http.read(setFieldError);
    if (doc && args.ok) http.testCall(ctx, doc, args.value, c.name.value.trim());
  });

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
    if (c.kind.value === 'manual') {
      replace(previewBody, h('p', { class: 'muted', text: 'No schedule: the job runs only when it is triggered.' }));
      preview.dataset.state = 'empty';
      return;
    }
    const zone = c.timezone.value.trim() || 'UTC';
    if (!expr) {
      replace(previewBody, h('p', { class: 'muted', text: 'Type an expression to see when it fires.' }));
      preview.dataset.state = 'empty';
      return;
    }
    preview.dataset.state = 'loading';
    preview.setAttribute('aria-busy', 'true');
    try {
      const res = await api('POST', '/schedules/preview', {
        schedule: { [c.kind.value]: c.kind.value === 'rrule' ? c.expr.value.trim() : expr }, timezone: zone, count: 5,
        ...policies.previewParams(id),
      });
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
        h('span', { class: 'pv-utc', text: `UTC ${readableLocal(i.utc).replace(/ Z$/, '')}` }), instantNote(i)))),
      h('p', { class: 'muted small', text: c.kind.value === 'fixed_delay'
        ? `Local times in ${zone}, as if each run took no time: each is due a delay after the previous run ends.`
        : `Local times in ${zone}.` }));
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
  for (const control of policies.controls) control.addEventListener('input', schedulePreview);
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
    if (!callsUrl()) {
      need('app', c.app, 'the app');
      need('handler', c.handler, 'the handler');
    }
    const httpDoc = callsUrl() ? http.read(setFieldError) : null;
    if (callsUrl() && !httpDoc) ok = false;
    if (c.kind.value !== 'manual') need('expr', c.expr, 'an expression');
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
    const policyDoc = policies.read(num);
    const flowDoc = flow.read(num);
    if (!ok) return null;
    const kind = c.kind.value;
    const work = callsUrl() ? { http: httpDoc } : { app: c.app.value.trim(), handler: c.handler.value.trim() };
    return {
      name: c.name.value.trim(),
      ...work,
      schedule: kind === 'manual' ? { manual: true } : { [kind]: c.expr.value.trim() },
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
      ...policyDoc,
      ...flowDoc,
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
      for (const key of ['alerts', 'timeout_ms', 'bounds', 'jitter_ms', 'pause_after_failures', 'flow']) {
        if (body[key] === null) delete body[key];
      }
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
          h('button', { type: 'button', class: 'small', text: 'Reload the job', onclick: () => ctx.reload() }));
      } else if (e instanceof ApiError && e.status === 409) {
        fillError(formError, e, 'Not created:');
      } else {
        fillError(formError, e, editing ? 'Not saved:' : 'Not created:');
        const key = e instanceof ApiError && e.field
          ? fieldOf[e.field] || fieldOf[e.field.split('.').slice(0, 2).join('.')] || fieldOf[e.field.split('.')[0]] : null;
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
