// Carillon web console: a single-page app over the admin REST API (/api/v1).
// Vanilla ES2020 modules, no dependency, no build step. The DOM is built with createElement and
// textContent only: job names, errors and outputs are user data and are never parsed as HTML.
// The page runs under a strict CSP (no inline script or style attribute).
// This entry module boots the page, routes hash addresses to the pages, draws the shell
// (header, navigation, the namespace switcher) and signs the user in (a token, or a person
// through the cluster's OpenID provider: sign_in.js) and out.

import { ApiError, token, storeToken, endSession, whenTokenRefused, api, namespace, chooseNamespace } from './api.js';
import { signInSettings, startSignIn, finishSignIn } from './sign_in.js';
import { viewAudit } from './audit.js';
import { viewAccess } from './access.js';
import { viewSecrets } from './secrets.js';
import { h, append, clear, replace, bellIcon, errorBox, fillError, newFlashArea } from './dom.js';
import { ViewContext, pageHead } from './view.js';
import { viewDashboard } from './dashboard.js';
import { viewJobs } from './jobs.js';
import { viewJobForm } from './job_form.js';
import { viewJob } from './job_page.js';
import { viewRuns } from './runs.js';
import { viewRun } from './run_page.js';
import { viewExecutors } from './executors.js';
import { viewWorkflows, viewWorkflow, viewWorkflowRun } from './workflows.js';

const RETURN_KEY = 'carillon.console.return';

let currentView = null;
let appRoot = null;

function signOut(message) {
  endSession();
  callerNamespaces = null;
  const here = location.hash;
  if (message && here && here !== '#/login') {
    try {
      sessionStorage.setItem(RETURN_KEY, here);
    } catch {
      /* ignore */
    }
  }
  renderLogin(message);
}

/** The address to open once signed in: the one asked for before, else the dashboard. */
function takeReturnTarget() {
  let target = '#/dashboard';
  try {
    target = sessionStorage.getItem(RETURN_KEY) || target;
    sessionStorage.removeItem(RETURN_KEY);
  } catch {
    /* ignore */
  }
  if (!/^#\/[a-z]/.test(target) || target.startsWith('#/login')) target = '#/dashboard';
  return target;
}

function openAfterSignIn(target) {
  if (location.hash === target) route();
  else location.hash = target;
}

/** Offers the provider's sign-in on the login card when the cluster has one. */
async function offerProvider(form, errorEl) {
  let settings = null;
  try {
    settings = await signInSettings();
  } catch {
    return; // The token form still works; the server's trouble shows when it is used.
  }
  if (!settings || !form.isConnected) return;
  const button = h('button', { type: 'button', class: 'primary', testid: 'sign-in-provider', text: 'Sign in with your identity provider' });
  button.addEventListener('click', async () => {
    button.disabled = true;
    clear(errorEl);
    try {
      let target = '#/dashboard';
      try {
        target = sessionStorage.getItem(RETURN_KEY) || target;
      } catch {
        /* ignore */
      }
      await startSignIn(settings, target);
    } catch (e) {
      fillError(errorEl, e, 'Could not sign in:');
      button.disabled = false;
    }
  });
  const host = (() => {
    try {
      return new URL(settings.issuer).host;
    } catch {
      return settings.issuer;
    }
  })();
  const intro = form.querySelector('p.intro');
  if (intro) intro.textContent = `People sign in at ${host}; tools and break-glass admins with an API token.`;
  form.insertBefore(h('div', { class: 'provider' }, button), form.querySelector('.field'));
}

function renderLogin(message) {
  if (currentView) currentView.destroy();
  currentView = null;
  const input = h('input', { type: 'password', id: 'login-token', name: 'token', autocomplete: 'current-password', required: true, spellcheck: 'false' });
  const errorEl = h('p', { class: 'alert error', role: 'alert', testid: 'login-error' });
  const button = h('button', { type: 'submit', class: 'primary', text: 'Sign in' });
  const form = h('form', { class: 'card', 'aria-labelledby': 'login-title', novalidate: true },
    h('h1', { id: 'login-title' }, bellIcon(), 'Carillon'),
    h('p', { class: 'muted intro', text: 'Sign in with an API token (admin, read-only or a namespace\u2019s).' }),
    message ? h('p', { class: 'alert info', role: 'status', text: message }) : null,
    errorEl,
    h('div', { class: 'field' }, h('label', { for: 'login-token', text: 'Token' }), input),
    button);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(errorEl);
    const t = input.value.trim();
    if (!t) {
      errorEl.textContent = 'Enter a token.';
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      await api('GET', '/cluster', undefined, { tokenOverride: t, noSignOut: true });
      callerNamespaces = null;
      storeToken(t);
      openAfterSignIn(takeReturnTarget());
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) errorEl.textContent = 'That token was refused';
      else fillError(errorEl, e, 'Could not sign in:');
      input.select();
    } finally {
      button.disabled = false;
    }
  });
  document.title = 'Sign in · Carillon';
  replace(appRoot, h('main', { id: 'main', class: 'login' }, form));
  input.focus();
  offerProvider(form, errorEl);
}

const NAV = [
  ['dashboard', 'Dashboard'],
  ['jobs', 'Jobs'],
  ['workflows', 'Workflows'],
  ['runs', 'Runs'],
  ['executors', 'Executors'],
  ['secrets', 'Secrets'],
  ['audit', 'Audit'],
  ['access', 'Access'],
];

// The namespaces the caller has a role in, read once per sign-in (a promise of their names),
// and the token they were read with: an answer for an earlier sign-in is not this one's.
let callerNamespaces = null;
let namespacesOf = null;

/** Reads the caller's namespaces once, and chooses one when none (or one no longer the
 *  caller's) is: the only one, else `default`, else the first. Pages render after it, so
 *  they call the API in the namespace the switcher shows. */
function settleNamespace() {
  if (!callerNamespaces || namespacesOf !== token()) {
    namespacesOf = token();
    callerNamespaces = api('GET', '/namespaces')
      .then((list) => (list.namespaces || []).map((n) => n.name))
      .catch(() => {
        // Without the list the server's default is used; pages show their own errors.
        callerNamespaces = null;
        return [];
      });
  }
  const asked = namespacesOf;
  return callerNamespaces.then((names) => {
    if (asked !== token()) return [];
    if (names.length && !names.includes(namespace())) {
      chooseNamespace(names.length === 1 ? names[0] : names.includes('default') ? 'default' : names[0]);
    }
    return names;
  });
}

/** The namespace switcher, hidden until the caller's namespaces are known. */
function namespaceSwitcher() {
  const select = h('select', { id: 'namespace', 'aria-label': 'Namespace', testid: 'namespace-switcher' });
  const holder = h('div', { class: 'namespace', hidden: true }, h('label', { for: 'namespace', class: 'small', text: 'Namespace' }), select);
  select.addEventListener('change', () => {
    chooseNamespace(select.value);
    route();
  });
  settleNamespace().then((names) => {
    if (!names.length) return;
    const chosen = namespace();
    replace(select, ...names.map((n) => h('option', { value: n, text: n, selected: n === chosen })));
    holder.hidden = false;
  });
  return holder;
}

function renderShell() {
  const main = h('main', { id: 'main', class: 'page', tabindex: '-1' });
  const skip = h('a', { class: 'skip-link', href: '#/', text: 'Skip to content' });
  skip.addEventListener('click', (ev) => {
    ev.preventDefault();
    main.focus();
  });
  const nav = h('nav', { class: 'nav', 'aria-label': 'Main' },
    h('ul', null, NAV.map(([key, label]) => h('li', null, h('a', { href: `#/${key}`, dataset: { nav: key }, text: label })))));
  const header = h('header', { class: 'topbar' },
    h('a', { class: 'brand', href: '#/dashboard', 'aria-label': 'Carillon home' }, bellIcon(), h('span', { text: 'Carillon' })),
    nav,
    h('div', { class: 'topbar-end' },
      namespaceSwitcher(),
      h('button', { type: 'button', class: 'small', text: 'Sign out', onclick: () => { signOut(); history.replaceState(null, '', '#/login'); } })));
  replace(appRoot, skip, header, main, newFlashArea());
  return { main, nav };
}

let shell = null;

const ROUTES = [
  [/^\/dashboard$/, 'dashboard', (ctx) => viewDashboard(ctx)],
  [/^\/jobs$/, 'jobs', (ctx) => viewJobs(ctx)],
  [/^\/jobs\/new$/, 'jobs', (ctx) => viewJobForm(ctx, null)],
  [/^\/jobs\/(\d+)$/, 'jobs', (ctx, m) => viewJob(ctx, m[1])],
  [/^\/jobs\/(\d+)\/edit$/, 'jobs', (ctx, m) => viewJobForm(ctx, m[1])],
  [/^\/workflows$/, 'workflows', (ctx) => viewWorkflows(ctx)],
  [/^\/workflows\/(\d+)$/, 'workflows', (ctx, m) => viewWorkflow(ctx, m[1])],
  [/^\/workflow-runs\/(\d+)$/, 'workflows', (ctx, m) => viewWorkflowRun(ctx, m[1])],
  [/^\/runs$/, 'runs', (ctx) => viewRuns(ctx)],
  [/^\/runs\/(\d+)$/, 'runs', (ctx, m) => viewRun(ctx, m[1])],
  [/^\/executors$/, 'executors', (ctx) => viewExecutors(ctx)],
  [/^\/audit$/, 'audit', (ctx) => viewAudit(ctx)],
  [/^\/secrets$/, 'secrets', (ctx) => viewSecrets(ctx)],
  [/^\/access$/, 'access', (ctx) => viewAccess(ctx)],
];

let routeSeq = 0;

async function route() {
  const mine = ++routeSeq;
  const hash = location.hash.slice(1);
  const path = (hash.split('?')[0] || '').replace(/\/+$/, '');
  if (!token()) {
    if (path && path !== '/login') {
      try {
        sessionStorage.setItem(RETURN_KEY, `#${hash}`);
      } catch {
        /* ignore */
      }
    }
    renderLogin();
    return;
  }
  if (!path || path === '/' || path === '/login') {
    history.replaceState(null, '', '#/dashboard');
    route();
    return;
  }
  await settleNamespace();
  // A later navigation (or a sign-out) while the namespaces were read renders instead.
  if (mine !== routeSeq || !token()) return;
  if (!shell || !shell.main.isConnected) shell = renderShell();
  if (currentView) currentView.destroy();
  const main = clear(shell.main);
  const ctx = new ViewContext(main, route);
  currentView = ctx;
  let section = null;
  let matched = false;
  for (const [re, nav, view] of ROUTES) {
    const m = path.match(re);
    if (m) {
      section = nav;
      matched = true;
      Promise.resolve()
        .then(() => view(ctx, m))
        .catch((e) => {
          if (!ctx.alive || (e instanceof ApiError && e.status === 401)) return;
          append(main, [errorBox(e, 'view-error')]);
        });
      break;
    }
  }
  for (const a of shell.nav.querySelectorAll('a')) {
    if (a.dataset.nav === section) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  if (!matched) {
    document.title = 'Not found · Carillon';
    append(main, [pageHead('Page not found'), h('p', null, 'Nothing lives at this address. ', h('a', { href: '#/dashboard', text: 'Go to the dashboard' }), '.')]);
  }
}

// ---------------------------------------------------------------------------------------------
// Start

async function boot() {
  appRoot = document.getElementById('app');
  whenTokenRefused(signOut);
  window.addEventListener('hashchange', route);
  // Back from the provider's sign-in: the code in the address becomes the tab's token.
  let finished = null;
  try {
    finished = await finishSignIn();
  } catch (e) {
    renderLogin();
    const errorEl = appRoot.querySelector('[data-testid="login-error"]');
    if (errorEl) fillError(errorEl, e, 'Could not sign in:');
    return;
  }
  if (finished) {
    endSession();
    callerNamespaces = null;
    storeToken(finished.token);
    try {
      sessionStorage.removeItem(RETURN_KEY);
    } catch {
      /* ignore */
    }
    const target = /^#\/[a-z]/.test(finished.returnTo || '') ? finished.returnTo : '#/dashboard';
    history.replaceState(null, '', `${location.pathname}${target}`);
  }
  route();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
else boot();
