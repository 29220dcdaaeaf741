// What every page gets: its ViewContext (lifetime, polling, debounced calls), its heading
// and document title, focus kept across refreshes, and the query part of its route.

import { h } from './dom.js';

/** Each page gets a context that dies when the user navigates away. */
export class ViewContext {
  /** `reload()` renders the current route again. */
  constructor(root, reload) {
    this.root = root;
    this.reload = reload;
    this.alive = true;
    this.cleanups = [];
  }

  onCleanup(fn) {
    this.cleanups.push(fn);
  }

  destroy() {
    this.alive = false;
    for (const fn of this.cleanups.splice(0)) {
      try {
        fn();
      } catch {
        /* ignore */
      }
    }
  }

  /** Calls `fn` every `ms` after the previous call ended, skipping while the tab is hidden. */
  poll(fn, ms) {
    let timer = null;
    const tick = async () => {
      timer = null;
      if (!this.alive) return;
      if (!document.hidden) {
        try {
          await fn();
        } catch {
          /* the view shows its own errors */
        }
      }
      if (this.alive) timer = setTimeout(tick, ms);
    };
    timer = setTimeout(tick, ms);
    const onVisible = () => {
      if (!document.hidden && this.alive && timer !== null) {
        clearTimeout(timer);
        tick();
      }
    };
    document.addEventListener('visibilitychange', onVisible);
    this.onCleanup(() => {
      if (timer !== null) clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisible);
    });
  }

  /** A debounced call, cancelled with the view. */
  debounce(fn, ms) {
    let timer = null;
    this.onCleanup(() => clearTimeout(timer));
    const run = (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        if (this.alive) fn(...args);
      }, ms);
    };
    run.now = (...args) => {
      clearTimeout(timer);
      if (this.alive) fn(...args);
    };
    return run;
  }
}

export function pageHead(title, { subtitle, badges = [], actions = [] } = {}) {
  const h1 = h('h1', { tabindex: '-1', text: title });
  return h('div', { class: 'page-head' },
    h('div', null,
      h('div', { class: 'title' }, h1, badges),
      subtitle ? h('p', { class: 'subtitle' }, subtitle) : null),
    actions.length ? h('div', { class: 'actions' }, actions) : null);
}

/** Reads the `?a=b` part of the hash route. */
export function routeParams() {
  const hash = location.hash.slice(1);
  const i = hash.indexOf('?');
  return new URLSearchParams(i >= 0 ? hash.slice(i + 1) : '');
}

/** Rewrites the query part of the current route without re-rendering. */
export function setRouteParams(params) {
  const hash = location.hash.slice(1) || '/dashboard';
  const path = hash.split('?')[0];
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v) q.set(k, v);
  const s = q.toString();
  const target = `#${path}${s ? `?${s}` : ''}`;
  if (target !== location.hash) history.replaceState(history.state, '', target);
}

/** Re-renders `container` with `render()`, giving focus back to the control that had it
 *  (matched by its text), so that a refresh does not pull a button from under the user. */
export function keepFocus(container, render) {
  const active = document.activeElement;
  const had = active && container.contains(active) ? { tag: active.tagName, text: active.textContent } : null;
  render();
  if (!had) return;
  for (const el of container.querySelectorAll(had.tag)) {
    if (el.textContent === had.text) {
      el.focus({ preventScroll: true });
      return;
    }
  }
}

export function setTitle(ctx, title) {
  if (ctx.alive) document.title = `${title} · Carillon`;
}

export function focusHeading(ctx) {
  const h1 = ctx.root.querySelector('h1');
  if (h1 && ctx.alive && document.activeElement === document.body) h1.focus({ preventScroll: true });
}
