// Lists: a table that becomes stacked cards on phones, its rows, and the cursor pager.

import { h } from './dom.js';

/** Rows per page of the jobs and runs lists. */
export const PAGE_SIZE = 50;

/** A table inside a horizontally scrolling wrapper that becomes stacked cards on phones. */
export function table(columns, testid) {
  const tbody = h('tbody');
  const t = h('table', { class: 'stack', testid },
    h('thead', null, h('tr', null, columns.map((c) => h('th', { scope: 'col', class: colClass(c), text: c.label })))),
    tbody);
  return { wrap: h('div', { class: 'table-wrap' }, t), table: t, tbody };
}

function colClass(c) {
  return [c.num ? 'num' : '', c.cls || ''].filter(Boolean).join(' ') || null;
}

export function row(columns, cells, props) {
  return h('tr', props, cells.map((cell, i) => {
    const c = columns[i] || {};
    return h('td', { 'data-label': c.label || '', class: colClass(c) }, cell);
  }));
}

export function emptyRow(columns, text) {
  return h('tr', { class: 'empty-row' }, h('td', { colspan: String(columns.length), class: 'empty', 'data-label': '', text }));
}

/** Cursor paging: a stack of the cursors of the pages seen. */
export class Pager {
  constructor(onChange) {
    this.cursors = [null];
    this.next = null;
    this.onChange = onChange;
    this.info = h('span', { class: 'page-no', 'aria-live': 'polite' });
    this.first = h('button', { type: 'button', class: 'small', text: 'First page', onclick: () => this.go(0) });
    this.prev = h('button', { type: 'button', class: 'small', text: 'Previous page', onclick: () => this.go(this.cursors.length - 2) });
    this.nextBtn = h('button', { type: 'button', class: 'small', text: 'Next page', onclick: () => this.forward() });
    this.el = h('nav', { class: 'pager', 'aria-label': 'Pages' }, this.info, this.first, this.prev, this.nextBtn);
    this.render();
  }

  get cursor() {
    return this.cursors[this.cursors.length - 1];
  }

  reset() {
    this.cursors = [null];
    this.next = null;
  }

  go(index) {
    if (index < 0) return;
    this.cursors = this.cursors.slice(0, index + 1);
    this.onChange();
  }

  forward() {
    if (!this.next) return;
    this.cursors.push(this.next);
    this.onChange();
  }

  update(nextCursor, count) {
    this.next = nextCursor || null;
    this.render(count);
  }

  render(count) {
    const n = this.cursors.length;
    this.info.textContent = `Page ${n}${count !== undefined ? ` · ${count} shown` : ''}`;
    this.first.disabled = n <= 1;
    this.prev.disabled = n <= 1;
    this.nextBtn.disabled = !this.next;
  }
}
