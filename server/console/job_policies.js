// The schedule policies of the job form: bounds, jitter, exclusion calendars, pausing after
// failures and child jobs. Builds their controls and fields, reads them into the job
// document, and gives the preview what it needs to show skipped and delayed instants.

import { api } from './api.js';
import { h, replace, field } from './dom.js';

/** The policy fields of `start` (a job document), as controls the form lays out. */
export function policyFields(start) {
  const bounds = start.bounds || {};
  const c = {
    notBefore: h('input', { type: 'text', id: 'job-not-before', value: bounds.not_before || '', placeholder: '2026-12-01T00:00:00', autocomplete: 'off', spellcheck: 'false' }),
    notAfter: h('input', { type: 'text', id: 'job-not-after', value: bounds.not_after || '', placeholder: 'none', autocomplete: 'off', spellcheck: 'false' }),
    maxRuns: h('input', { type: 'number', id: 'job-max-runs', min: '1', step: '1', value: bounds.max_runs ? String(bounds.max_runs) : '', placeholder: 'no limit' }),
    jitter: h('input', { type: 'number', id: 'job-jitter', min: '1', step: '1', value: start.jitter_ms ? String(start.jitter_ms) : '', placeholder: 'none' }),
    calendars: h('input', { type: 'text', id: 'job-calendars', value: (start.calendars || []).join(', '), list: 'job-calendar-list', autocomplete: 'off', spellcheck: 'false', placeholder: 'holidays, weekends' }),
    pauseAfter: h('input', { type: 'number', id: 'job-pause-after', min: '1', max: '1000', step: '1', value: start.pause_after_failures ? String(start.pause_after_failures) : '', placeholder: 'never' }),
  };
  const children = start.children || {};
  for (const [key, list] of CHILD_FIELDS) {
    c[key] = h('input', { type: 'text', id: `job-${key}`, value: (children[list] || []).join(', '), autocomplete: 'off', spellcheck: 'false', inputmode: 'numeric', placeholder: 'none' });
  }
  const calendarList = h('datalist', { id: 'job-calendar-list' });
  api('GET', '/calendars').then((res) => {
    replace(calendarList, (res.calendars || []).map((cal) => h('option', { value: cal.name })));
  }).catch(() => {});
  const f = {
    notBefore: field('Not before', c.notBefore, { hint: 'No instant before this one (wall time in the zone, or RFC 3339)' }),
    notAfter: field('Not after', c.notAfter, { hint: 'The job is done once its schedule passes this' }),
    maxRuns: field('Max runs', c.maxRuns, { hint: 'Done after this many scheduled runs' }),
    jitter: field('Jitter (ms)', c.jitter, { hint: 'Each run delayed by up to this, fixed per instant' }),
    calendars: field('Exclusion calendars', c.calendars, { hint: 'Names, comma separated: their instants are skipped', wide: true }),
    pauseAfter: field('Pause after failures', c.pauseAfter, { hint: 'Stop the job after this many failed runs in a row' }),
    childOnSuccess: field('Children on success', c.childOnSuccess, { hint: 'Job ids, comma separated: run after each run that succeeds' }),
    childOnFailure: field('Children on failure', c.childOnFailure, { hint: 'Run after each run that fails or finds no executor' }),
    childAlways: field('Children always', c.childAlways, { hint: 'Run after each run that succeeds or fails' }),
  };
  const fieldset = h('fieldset', null, h('legend', { text: 'Policies' }),
    h('div', { class: 'form-grid' }, f.notBefore, f.notAfter, f.maxRuns, f.jitter, f.pauseAfter, f.calendars,
      f.childOnSuccess, f.childOnFailure, f.childAlways), calendarList);
  const fieldOf = {
    bounds: 'notBefore', 'bounds.not_before': 'notBefore', 'bounds.not_after': 'notAfter', 'bounds.max_runs': 'maxRuns',
    jitter_ms: 'jitter', calendars: 'calendars', pause_after_failures: 'pauseAfter',
  };
  for (let i = 0; i < 16; i += 1) fieldOf[`calendars[${i}]`] = 'calendars';
  fieldOf.children = 'childOnSuccess';
  for (const [key, list] of CHILD_FIELDS) {
    for (let i = 0; i < 100; i += 1) fieldOf[`children.${list}[${i}]`] = key;
  }

  /** The policies as the job document holds them; `num` reads a number field or fails it. */
  function read(num) {
    const bounds = {};
    if (c.notBefore.value.trim()) bounds.not_before = c.notBefore.value.trim();
    if (c.notAfter.value.trim()) bounds.not_after = c.notAfter.value.trim();
    const maxRuns = num('maxRuns', c.maxRuns, { min: 1, max: 1000000000, optional: true });
    if (maxRuns !== null && maxRuns !== undefined) bounds.max_runs = maxRuns;
    return {
      bounds: Object.keys(bounds).length ? bounds : null,
      jitter_ms: num('jitter', c.jitter, { min: 1, max: 7 * 24 * 3600000, optional: true }) ?? null,
      calendars: c.calendars.value.split(',').map((s) => s.trim()).filter(Boolean),
      pause_after_failures: num('pauseAfter', c.pauseAfter, { min: 1, max: 1000, optional: true }) ?? null,
      children: childrenDoc(Object.fromEntries(CHILD_FIELDS.map(([key, list]) => [list, idsOf(c[key].value)]))),
    };
  }

  /** What the preview request adds for these policies (what can be read as typed). */
  function previewParams(jobId) {
    const params = {};
    const bounds = {};
    if (c.notBefore.value.trim()) bounds.not_before = c.notBefore.value.trim();
    if (c.notAfter.value.trim()) bounds.not_after = c.notAfter.value.trim();
    if (Object.keys(bounds).length) params.bounds = bounds;
    const calendars = c.calendars.value.split(',').map((s) => s.trim()).filter(Boolean);
    if (calendars.length) params.calendars = calendars;
    const jitter = Number(c.jitter.value.trim());
    if (Number.isInteger(jitter) && jitter > 0) {
      params.jitter_ms = jitter;
      if (jobId !== null) params.job_id = Number(jobId);
    }
    return params;
  }

  const controls = Object.values(c);
  return { c, f, fieldset, fieldOf, read, previewParams, controls };
}

/** The note an instant of the preview carries: skipped by a calendar, or delayed by jitter. */
export function instantNote(instant) {
  if (instant.skipped) return h('span', { class: 'pv-note muted', testid: 'preview-skipped', text: `skipped: ${instant.skipped}` });
  if (instant.due) return h('span', { class: 'pv-note muted', text: `runs at ${instant.due.replace('T', ' ').replace(/\.000Z$/, ' Z')}` });
  return null;
}

/** The form's child job fields and the list of `children` each fills. */
const CHILD_FIELDS = [['childOnSuccess', 'on_success'], ['childOnFailure', 'on_failure'], ['childAlways', 'always']];

/** Job ids typed comma separated; what is not a number is kept as typed, for the server to name. */
function idsOf(text) {
  return text.split(',').map((s) => s.trim()).filter(Boolean).map((s) => (/^-?\d+$/.test(s) ? Number(s) : s));
}

/** `children` as the job document holds it: the non-empty lists, in one order. */
export function childrenDoc(children) {
  const doc = {};
  for (const [, list] of CHILD_FIELDS) {
    if (children && children[list] && children[list].length) doc[list] = children[list];
  }
  return doc;
}
