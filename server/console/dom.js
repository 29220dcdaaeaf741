// Building the page: the h() element builder and its helpers (createElement and textContent
// only, never HTML parsing), form fields, error boxes, flash messages, and act() for buttons.

import { ApiError } from './api.js';

/** Creates an element. `props`: class, text, testid, dataset, on<event>, DOM properties
 *  (value, checked, disabled, hidden, selected, htmlFor…) or plain attributes. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  applyProps(el, props);
  append(el, children);
  return el;
}

function applyProps(el, props) {
  if (!props) return;
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'testid') el.setAttribute('data-testid', value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') el.addEventListener(key.slice(2), value);
    else if (key === 'style') throw new Error('inline styles are refused by the CSP');
    else if (['value', 'checked', 'disabled', 'hidden', 'selected', 'htmlFor', 'readOnly', 'required', 'multiple'].includes(key)) el[key] = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

const SVG_NS = 'http://www.w3.org/2000/svg';
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) el.setAttribute(k, String(v));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

export function replace(el, ...children) {
  clear(el);
  append(el, children);
  return el;
}

let uid = 0;
const nextId = (prefix) => `${prefix}-${++uid}`;

export function bellIcon() {
  return svg('svg', { viewBox: '0 0 24 24', 'aria-hidden': 'true', focusable: 'false' },
    svg('path', { d: 'M6 16V11a6 6 0 1 1 12 0v5l1.5 2h-15z' }),
    svg('path', { d: 'M10 20a2 2 0 0 0 4 0' }),
    svg('path', { d: 'M12 3v2' }));
}

// ---------------------------------------------------------------------------------------------
// Errors

function problemText(err) {
  if (!err) return '';
  if (err instanceof ApiError) {
    const detail = err.detail || err.title || `HTTP ${err.status}`;
    return err.field && !detail.startsWith(`${err.field}:`) ? `${err.field}: ${detail}` : detail;
  }
  return err.message || String(err);
}

/** An alert box showing an API problem (detail, and the field when there is one). */
export function errorBox(err, testid) {
  const box = h('div', { class: 'alert error', role: 'alert', testid });
  fillError(box, err);
  return box;
}

export function fillError(box, err, prefix) {
  clear(box);
  if (!err) return box;
  if (prefix) append(box, [h('strong', { text: prefix }), ' ']);
  if (err instanceof ApiError && err.field) {
    append(box, [h('span', { class: 'field-name', text: err.field }), ': ']);
    const detail = err.detail || err.title || '';
    append(box, [detail.startsWith(`${err.field}: `) ? detail.slice(err.field.length + 2) : detail]);
  } else {
    append(box, [problemText(err)]);
  }
  return box;
}

// ---------------------------------------------------------------------------------------------
// Flash messages and button actions

let flashArea = null;

/** Makes the shell's area for flash messages; `flash` writes to the latest one made. */
export function newFlashArea() {
  flashArea = h('div', { class: 'flash-area', 'aria-live': 'polite' });
  return flashArea;
}

export function flash(message, tone = 'ok', ms = 4000) {
  if (!flashArea) return;
  const box = h('div', { class: `alert ${tone}`, role: tone === 'error' ? 'alert' : 'status' });
  if (message instanceof Error) fillError(box, message);
  else append(box, [message]);
  flashArea.append(box);
  setTimeout(() => box.remove(), ms);
}

/** Runs an action from a button: disables it meanwhile, reports failures in `errorTarget`. */
export async function act(button, fn, errorTarget) {
  if (button) button.disabled = true;
  if (errorTarget) clear(errorTarget);
  try {
    return await fn();
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) return undefined;
    if (errorTarget) fillError(errorTarget, e);
    else flash(e, 'error', 8000);
    return undefined;
  } finally {
    if (button && button.isConnected) button.disabled = false;
  }
}

// ---------------------------------------------------------------------------------------------
// Form controls

export function selectEl(props, options, value) {
  const sel = h('select', props, options.map(([v, label]) => h('option', { value: v, text: label })));
  sel.value = value ?? options[0][0];
  return sel;
}

export function field(labelText, control, { hint, wide } = {}) {
  const controlId = control.id || nextId('f');
  control.id = controlId;
  const hintEl = hint ? h('span', { class: 'hint', id: `${controlId}-hint`, text: hint }) : null;
  const err = h('p', { class: 'field-error', id: `${controlId}-error`, 'aria-live': 'polite' });
  const described = [hintEl && hintEl.id, err.id].filter(Boolean).join(' ');
  control.setAttribute('aria-describedby', described);
  const wrap = h('div', { class: `field${wide ? ' wide' : ''}` },
    h('label', { for: controlId, text: labelText }), control, hintEl, err);
  wrap.errorEl = err;
  wrap.hintEl = hintEl;
  return wrap;
}
