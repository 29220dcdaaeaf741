// The HTTP call of the job form: for a job that calls a URL instead of an executor's handler.
// Builds its controls, reads them into the job document's `http`, and makes a test call now
// (the node calls the URL as a run would, with the namespace's secrets) to show the answer.

import { api } from './api.js';
import { h, replace, field, fillError, selectEl } from './dom.js';
import { prettyJson } from './format.js';

const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD'];

/** The HTTP fields of `start` (a job document, whose `http` may be null). */
export function httpFields(start) {
  const http = start.http || { method: 'POST', url: '', headers: {}, body: null, success: null };
  const success = http.success || {};
  const c = {
    method: selectEl({ id: 'job-http-method' }, METHODS.map((m) => [m, m]), http.method || 'GET'),
    url: h('input', { type: 'url', id: 'job-http-url', value: http.url || '', placeholder: 'https://hooks.example.com/run?at={{instant}}', autocomplete: 'off', spellcheck: 'false' }),
    headers: h('textarea', { id: 'job-http-headers', rows: '3', spellcheck: 'false', value: http.headers && Object.keys(http.headers).length ? prettyJson(http.headers) : '', placeholder: '{"Authorization": {"secret": "hook-token"}, "X-Run": "{{run_id}}"}' }),
    body: h('textarea', { id: 'job-http-body', rows: '3', spellcheck: 'false', value: http.body || '', placeholder: '{"day": "{{args.day}}", "run": {{run_id}}}' }),
    status: h('input', { type: 'text', id: 'job-http-status', value: (success.status || []).join(', '), placeholder: 'any 2xx', autocomplete: 'off', spellcheck: 'false' }),
    pointer: h('input', { type: 'text', id: 'job-http-pointer', value: success.json_pointer || '', placeholder: '/ok', autocomplete: 'off', spellcheck: 'false' }),
    equals: h('input', { type: 'text', id: 'job-http-equals', value: success.equals === undefined ? '' : JSON.stringify(success.equals), placeholder: 'true', autocomplete: 'off', spellcheck: 'false' }),
  };
  const f = {
    httpMethod: field('Method', c.method),
    httpUrl: field('URL', c.url, { hint: 'Template values: {{instant}}, {{run_id}}, {{args.field}}…; public addresses only until the operators allow more (egress.allowed_networks)', wide: true }),
    httpHeaders: field('Headers (JSON)', c.headers, { hint: 'Values are text, or {"secret": "name"}: a secret of this namespace', wide: true }),
    httpBody: field('Body', c.body, { hint: 'Sent as JSON when it is JSON; none for GET and HEAD', wide: true }),
    httpStatus: field('Success statuses', c.status, { hint: 'Comma separated; empty: any 2xx' }),
    httpPointer: field('Answer field', c.pointer, { hint: 'A JSON pointer into the answer' }),
    httpEquals: field('Must equal (JSON)', c.equals),
  };
  const result = h('div', { class: 'test-call', testid: 'test-call-result', 'aria-live': 'polite' });
  const testButton = h('button', { type: 'button', testid: 'test-call', text: 'Test call now' });
  const fieldset = h('fieldset', { testid: 'http-call' }, h('legend', { text: 'HTTP call' }),
    h('div', { class: 'form-grid' }, f.httpMethod, f.httpUrl, f.httpHeaders, f.httpBody, f.httpStatus, f.httpPointer, f.httpEquals),
    h('p', null, testButton), result);
  const fieldOf = {
    http: 'httpUrl', 'http.url': 'httpUrl', 'http.method': 'httpMethod', 'http.headers': 'httpHeaders',
    'http.body': 'httpBody', 'http.success': 'httpStatus', 'http.success.status': 'httpStatus',
    'http.success.json_pointer': 'httpPointer', 'http.success.equals': 'httpEquals',
  };

  /** The `http` document, or null with the fields at fault marked by `fail(key, message)`. */
  function read(fail) {
    let ok = true;
    const url = c.url.value.trim();
    if (!url) {
      fail('httpUrl', 'enter the URL to call');
      ok = false;
    }
    let headers = {};
    if (c.headers.value.trim()) {
      try {
        headers = JSON.parse(c.headers.value);
        if (!headers || typeof headers !== 'object' || Array.isArray(headers)) throw new Error('not an object');
      } catch (e) {
        fail('httpHeaders', `enter a JSON object of headers (${e.message})`);
        ok = false;
      }
    }
    const status = c.status.value.split(',').map((s) => s.trim()).filter(Boolean).map(Number);
    if (status.some((s) => !Number.isInteger(s))) {
      fail('httpStatus', 'enter statuses as numbers, comma separated');
      ok = false;
    }
    let doc = { method: c.method.value, url, headers };
    if (c.body.value !== '') doc.body = c.body.value;
    const succ = {};
    if (status.length) succ.status = status;
    if (c.pointer.value.trim()) {
      succ.json_pointer = c.pointer.value.trim();
      try {
        succ.equals = JSON.parse(c.equals.value);
      } catch {
        fail('httpEquals', 'enter a JSON value, e.g. true or "done"');
        ok = false;
      }
    }
    if (Object.keys(succ).length) doc.success = succ;
    if (!ok) doc = null;
    return doc;
  }

  /** Makes the call once now and shows the answer. */
  async function testCall(ctx, doc, args, name) {
    testButton.disabled = true;
    replace(result, h('p', { class: 'muted', text: 'Calling\u2026' }));
    try {
      const answer = await api('POST', '/jobs/test-call', { http: doc, args, name: name || undefined });
      if (!ctx.alive) return;
      const output = answer.output || {};
      replace(result,
        h('p', { class: answer.succeeded ? 'ok' : 'alert error', testid: 'test-call-verdict',
          text: answer.succeeded ? `Succeeded in ${answer.took_ms} ms` : `Would fail: ${answer.error || 'no answer'}` }),
        output.status === undefined ? null : h('p', { text: `Status ${output.status}` }),
        output.body === undefined || output.body === null ? null
          : h('pre', { class: 'json', testid: 'test-call-body', text: typeof output.body === 'string' ? output.body : prettyJson(output.body) }));
    } catch (e) {
      if (ctx.alive) replace(result, fillError(h('p', { class: 'alert error', role: 'alert' }), e, 'Not called:'));
    } finally {
      testButton.disabled = false;
    }
  }

  return { c, f, fieldset, fieldOf, read, testButton, testCall };
}
