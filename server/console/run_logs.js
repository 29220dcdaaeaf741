// A run's handler log: the lines of one attempt, followed live while it runs. Every line is
// set as text, never parsed as markup.

import { api, enc } from './api.js';
import { h, replace } from './dom.js';
import { parseTime } from './format.js';

const FOLLOW_MS = 1000;

/** `18:00:05.123` in the browser's zone, or blank. */
function clock(iso) {
  const d = parseTime(iso);
  if (!d) return '            ';
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/** The "Log" card of run `runId`: an attempt chooser, the lines, and following. */
export function logPanel(ctx, runId) {
  const chooser = h('select', { id: 'log-attempt', 'aria-label': 'Attempt' });
  const follow = h('input', { type: 'checkbox', id: 'log-follow', checked: true });
  const status = h('span', { class: 'muted small', testid: 'log-status', role: 'status' });
  const lines = h('pre', { class: 'log-lines', testid: 'log-lines', tabindex: '0', 'aria-label': 'Log lines' });
  const card = h('section', { class: 'card', 'aria-labelledby': 'h-log', testid: 'run-log' },
    h('h2', { id: 'h-log', text: 'Log' }),
    h('div', { class: 'log-bar' },
      h('label', { htmlFor: 'log-attempt', text: 'Attempt ' }), chooser,
      h('label', { class: 'inline' }, follow, ' Follow'),
      status),
    lines);

  let attempt = null; // shown attempt id; null: the latest
  let after = 0;
  let done = false;
  let chosenByHand = false;
  let known = [];

  function reset(to) {
    attempt = to;
    after = 0;
    done = false;
    replace(lines);
  }

  chooser.addEventListener('change', () => {
    chosenByHand = true;
    reset(Number(chooser.value));
    load();
  });

  function setChoices(ids, shown) {
    if (JSON.stringify(ids) === JSON.stringify(known) && String(shown) === chooser.value) return;
    known = ids;
    replace(chooser, ids.map((id) => h('option', { value: String(id), text: `id ${id}`, selected: id === shown })));
  }

  async function load() {
    const mine = attempt;
    let more = true;
    while (more && ctx.alive) {
      const query = `after=${after}&limit=500${attempt === null ? '' : `&attempt=${enc(attempt)}`}`;
      const page = await api('GET', `/runs/${enc(runId)}/logs?${query}`);
      if (!ctx.alive || mine !== attempt) return;
      if (attempt === null && page.attempt_id !== null) attempt = page.attempt_id;
      setChoices(page.attempts || [], page.attempt_id);
      for (const line of page.lines) {
        const text = `${clock(line.at)} ${line.level.padEnd(5)} ${line.message}\n`;
        lines.append(h('span', { class: `log-line level-${line.level.toLowerCase()}`, dataset: { line: String(line.line) }, text }));
      }
      after = page.next_after;
      done = page.done;
      more = page.lines.length === 500;
      if (follow.checked && page.lines.length) lines.scrollTop = lines.scrollHeight;
      status.textContent = page.unavailable
        ? page.unavailable
        : page.attempt_id === null ? 'No attempt yet.'
          : `${lines.childElementCount} lines${page.truncated ? ' (truncated at the cap)' : ''} · ${page.source === 'executor' ? 'read from the XXL-JOB executor' : 'kept by the nodes'}${done ? '' : ' · following'}`;
      // A retry's attempt: follow it, unless one was chosen.
      const ids = page.attempts || [];
      if (done && !chosenByHand && ids.length && ids[ids.length - 1] !== attempt) {
        reset(ids[ids.length - 1]);
        more = true;
      }
    }
  }

  load().catch((e) => { status.textContent = `The log cannot be read: ${e.message}`; });
  ctx.poll(async () => {
    if (done && (chosenByHand || !follow.checked)) return;
    await load();
  }, FOLLOW_MS);
  return card;
}
