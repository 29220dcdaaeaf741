// How values are shown: local times and durations, JSON, schedules, state badges, and links
// to jobs by name.

import { enc, jobName, cachedJobName } from './api.js';
import { h, replace } from './dom.js';

/** The kinds of schedule: key in the API's schedule object, label, hint for the form. */
export const SCHEDULE_KINDS = [
  ['cron', 'Cron', 'Unix (5 fields) or Quartz (6–7 fields with seconds), e.g. 0 30 2 * * ? or */5 * * * *'],
  ['rrule', 'RRULE', 'RFC 5545 lines: DTSTART, RRULE, RDATE, EXDATE'],
  ['at', 'One-shot at', 'An instant: 2026-12-01T09:00:00 (wall time in the zone) or RFC 3339'],
  ['every', 'Every', 'A duration from the job\u2019s start: 30s, 5m, 1h30m, 2d'],
  ['fixed_delay', 'Fixed delay', 'A duration after each run ends: 30s, 5m, 1h'],
  ['manual', 'Triggered only', 'No schedule: the job runs when triggered (by hand, the API, another job)'],
];

const pad = (n, w = 2) => String(n).padStart(w, '0');

export function parseTime(iso) {
  if (!iso) return null;
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? null : d;
}

/** `2026-11-23 18:00:05` in the browser's zone. */
export function localStamp(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

export function fmtDuration(ms) {
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
export function timeEl(iso, { rel = false } = {}) {
  const d = parseTime(iso);
  if (!d) return h('span', { class: 'muted', text: '—' });
  return h('time', { datetime: iso, title: `${d.toISOString()} (UTC)`, class: 'nowrap' },
    rel ? `${localStamp(d)} · ${relative(d)}` : localStamp(d));
}

export function durationBetween(a, b) {
  const da = parseTime(a);
  const db = parseTime(b);
  return da && db ? fmtDuration(db - da) : '—';
}

export function prettyJson(value) {
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A job's schedule as `{ kind, expr }` (kind is '' for a shape this console does not know). */
export function scheduleOf(schedule) {
  const s = schedule || {};
  if (s.manual === true) return { kind: 'manual', expr: 'triggered only' };
  for (const [kind] of SCHEDULE_KINDS) {
    if (typeof s[kind] === 'string') return { kind, expr: s[kind] };
  }
  return { kind: '', expr: JSON.stringify(s) };
}

export function scheduleEl(schedule) {
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

export function badge(state, extraClass) {
  const text = String(state ?? '—');
  const tone = STATE_TONE[text] ?? '';
  return h('span', { class: ['badge', tone, extraClass].filter(Boolean).join(' '), text: text.replace(/_/g, ' '), dataset: { state: text } });
}

/** A link to a job, showing its name once known; a deleted job shows its id. */
export function jobLink(id) {
  // A task's run carries the task's id negated: it has no job page.
  if (Number(id) < 0) return h('span', { class: 'task-ref', text: `task ${-Number(id)}` });
  const key = String(id);
  const known = cachedJobName(key);
  const a = h('a', { href: `#/jobs/${enc(key)}`, class: 'job-link', text: known || `job ${key}` });
  if (known === null) return h('span', { class: 'muted', title: 'deleted job', text: `job ${key} (deleted)` });
  if (known === undefined) {
    const holder = h('span', null, a);
    jobName(key).then((name) => {
      if (name) a.textContent = name;
      else replace(holder, h('span', { class: 'muted', title: 'deleted job', text: `job ${key} (deleted)` }));
    });
    return holder;
  }
  return a;
}
