// The flow control of the job form: the key the job's runs are counted under (shared by every
// job and task of the namespace naming it, one per value of an argument when one is named),
// how many may be in flight, how many start per window, and what a run finding the key full
// does. Builds the controls and reads them into the job document's `flow`.

import { h, field, selectEl } from './dom.js';

/** The flow fields of `start` (a job document), as controls the form lays out. */
export function flowFields(start) {
  const flow = start.flow || {};
  const rate = flow.rate || {};
  const c = {
    flowKey: h('input', { type: 'text', id: 'job-flow-key', value: flow.key || '', maxlength: '63', autocomplete: 'off', spellcheck: 'false', placeholder: 'none' }),
    flowKeyArg: h('input', { type: 'text', id: 'job-flow-key-arg', value: flow.key_arg || '', autocomplete: 'off', spellcheck: 'false', placeholder: '/customer' }),
    maxInFlight: h('input', { type: 'number', id: 'job-max-in-flight', min: '1', max: '100000', step: '1', value: flow.max_in_flight ? String(flow.max_in_flight) : '', placeholder: 'no limit' }),
    rateLimit: h('input', { type: 'number', id: 'job-rate-limit', min: '1', max: '100000', step: '1', value: rate.limit ? String(rate.limit) : '', placeholder: 'no limit' }),
    ratePer: h('input', { type: 'number', id: 'job-rate-per', min: '1000', max: '86400000', step: '1', value: rate.per_ms ? String(rate.per_ms) : '', placeholder: '60000' }),
    onFull: selectEl({ id: 'job-on-full' }, [['queue', 'wait in line'], ['drop', 'skip the run']], flow.on_full || 'queue'),
  };
  const f = {
    flowKey: field('Flow key', c.flowKey, { hint: 'Runs of every job and task naming this key share its limits' }),
    flowKeyArg: field('Key per argument', c.flowKeyArg, { hint: 'A JSON pointer into the arguments: a key per value' }),
    maxInFlight: field('Max in flight', c.maxInFlight, { hint: 'Runs of the key pending or running at once' }),
    rateLimit: field('Rate: runs', c.rateLimit, { hint: 'Runs of the key started per window' }),
    ratePer: field('Rate: window (ms)', c.ratePer),
    onFull: field('When full', c.onFull),
  };
  const fieldset = h('fieldset', { testid: 'flow-fieldset' }, h('legend', { text: 'Flow control' }),
    h('div', { class: 'form-grid' }, f.flowKey, f.flowKeyArg, f.maxInFlight, f.onFull, f.rateLimit, f.ratePer));
  const fieldOf = {
    flow: 'flowKey', 'flow.key': 'flowKey', 'flow.key_arg': 'flowKeyArg', 'flow.max_in_flight': 'maxInFlight',
    'flow.rate.limit': 'rateLimit', 'flow.rate.per_ms': 'ratePer', 'flow.on_full': 'onFull',
  };

  /** `{ flow }` as the job document holds it (`null`: none); `num` reads a number or fails it. */
  function read(num) {
    const key = c.flowKey.value.trim();
    if (!key) return { flow: null };
    const doc = { key, on_full: c.onFull.value };
    const keyArg = c.flowKeyArg.value.trim();
    if (keyArg) doc.key_arg = keyArg;
    const max = num('maxInFlight', c.maxInFlight, { min: 1, max: 100000, optional: true });
    if (max !== null && max !== undefined) doc.max_in_flight = max;
    const limit = num('rateLimit', c.rateLimit, { min: 1, max: 100000, optional: true });
    const per = num('ratePer', c.ratePer, { min: 1000, max: 86400000, optional: limit === null || limit === undefined });
    if (limit !== null && limit !== undefined) doc.rate = { limit, per_ms: per };
    return { flow: doc };
  }

  return { c, f, fieldset, fieldOf, read };
}

/** A job's or a workflow's flow control as its page shows it. */
export function flowText(flow) {
  if (!flow) return 'none';
  const key = flow.key_arg ? `${flow.key} per ${flow.key_arg}` : flow.key;
  const limits = [];
  if (flow.max_in_flight) limits.push(`${flow.max_in_flight} in flight`);
  if (flow.rate) limits.push(`${flow.rate.limit} per ${flow.rate.per_ms} ms`);
  if (flow.fifo) limits.push('in order, a failure holding the key');
  return `${key}: ${limits.join(', ')}${flow.on_full === 'drop' ? ' (extra runs skipped)' : ''}`;
}
