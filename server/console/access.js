// The access page of the chosen namespace (its admins): its service tokens, made (the secret
// shown this once) and revoked, and the roles it gives to the identity provider's groups.

import { ApiError, api, enc, namespace } from './api.js';
import { h, append, clear, replace, fillError, flash, act, selectEl } from './dom.js';
import { timeEl } from './format.js';
import { table, row, emptyRow } from './tables.js';
import { pageHead, setTitle, focusHeading } from './view.js';

const ROLES = ['viewer', 'operator', 'editor', 'admin'];

export async function viewAccess(ctx) {
  setTitle(ctx, 'Access');
  const where = namespace() || 'default';
  const tokens = tokensSection(ctx);
  const grants = grantsSection(ctx);
  append(ctx.root, [
    pageHead('Access', { subtitle: `Who may work in namespace ${where}: service tokens and the identity provider's groups` }),
    tokens.el,
    grants.el,
  ]);
  focusHeading(ctx);
  await Promise.all([tokens.load(), grants.load()]);
}

/** What a refusal means here: the page is for the namespace's admins. */
function explain(e) {
  if (e instanceof ApiError && e.status === 403) {
    return new Error(`Only the admins of namespace ${namespace() || 'default'} see and change its access.`);
  }
  return e;
}

function tokensSection(ctx) {
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'tokens-error' });
  const secretEl = h('div', { testid: 'token-secret' });
  const cols = [{ label: 'Name' }, { label: 'Role' }, { label: 'Starts with' }, { label: 'Expires' }, { label: 'Last used' }, { label: 'Created by' }, { label: '' }];
  const t = table(cols, 'tokens-table');
  t.table.setAttribute('aria-label', 'Service tokens');
  const name = h('input', { type: 'text', id: 'token-name', required: true, autocomplete: 'off', pattern: '[a-z0-9]([a-z0-9-]*[a-z0-9])?', size: '20' });
  const role = selectEl({ id: 'token-role' }, [...ROLES, 'executor'].map((r) => [r, r]), 'viewer');
  const days = h('input', { type: 'number', id: 'token-days', min: '1', max: '3650', value: '90', size: '6' });
  const create = h('button', { type: 'submit', class: 'primary', text: 'Create token' });
  const form = h('form', { class: 'toolbar', testid: 'token-form' },
    h('div', { class: 'field' }, h('label', { for: 'token-name', text: 'Name' }), name),
    h('div', { class: 'field' }, h('label', { for: 'token-role', text: 'Role' }), role),
    h('div', { class: 'field' }, h('label', { for: 'token-days', text: 'Expires in days' }), days),
    create);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    act(create, async () => {
      const made = await api('POST', '/tokens', { name: name.value.trim(), role: role.value, expires_in_days: Number(days.value) || undefined });
      // The secret is shown once: it is not kept anywhere the page can read again.
      replace(secretEl, h('div', { class: 'alert info', role: 'status' },
        h('p', null, `Token ${made.name} (${made.role}) — copy it now, it is not shown again:`),
        h('code', { class: 'wrap', testid: 'token-value', text: made.token })));
      name.value = '';
      flash(`Created token ${made.name}`);
      await load();
    }, errorEl);
  });
  async function load() {
    try {
      const list = await api('GET', '/tokens');
      if (!ctx.alive) return;
      clear(errorEl);
      const items = list.tokens || [];
      replace(t.tbody, items.map((tk) => row(cols, [
        tk.name, tk.role, h('code', { text: tk.prefix }), timeEl(tk.expires_at), timeEl(tk.last_used_at), tk.created_by,
        h('button', { type: 'button', class: 'small danger', text: 'Revoke', 'aria-label': `Revoke ${tk.name}`, onclick: (ev) => act(ev.currentTarget, async () => {
          await api('DELETE', `/tokens/${enc(tk.id)}`);
          clear(secretEl);
          flash(`Revoked ${tk.name}: every node refuses it within 5 seconds`);
          await load();
        }, errorEl) }),
      ], { dataset: { tokenName: tk.name } })));
      if (!items.length) t.tbody.append(emptyRow(cols, 'No service token.'));
    } catch (e) {
      if (ctx.alive) fillError(errorEl, explain(e));
    }
  }
  const el = h('section', { class: 'card', 'aria-labelledby': 'h-tokens' },
    h('h2', { id: 'h-tokens', text: 'Service tokens' }), errorEl, secretEl, form, t.wrap);
  return { el, load };
}

function grantsSection(ctx) {
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'grants-error' });
  const cols = [{ label: 'Group' }, { label: 'Role' }, { label: 'Granted' }, { label: 'By' }, { label: '' }];
  const t = table(cols, 'grants-table');
  t.table.setAttribute('aria-label', 'Group grants');
  const group = h('input', { type: 'text', id: 'grant-group', required: true, autocomplete: 'off', size: '24' });
  const role = selectEl({ id: 'grant-role' }, ROLES.map((r) => [r, r]), 'viewer');
  const add = h('button', { type: 'submit', class: 'primary', text: 'Grant' });
  const form = h('form', { class: 'toolbar', testid: 'grant-form' },
    h('div', { class: 'field' }, h('label', { for: 'grant-group', text: 'Group' }), group),
    h('div', { class: 'field' }, h('label', { for: 'grant-role', text: 'Role' }), role),
    add);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    act(add, async () => {
      const made = await api('POST', '/grants', { group: group.value.trim(), role: role.value });
      group.value = '';
      flash(`Granted ${made.role} to ${made.group}`);
      await load();
    }, errorEl);
  });
  async function load() {
    try {
      const list = await api('GET', '/grants');
      if (!ctx.alive) return;
      clear(errorEl);
      const items = list.grants || [];
      replace(t.tbody, items.map((g) => row(cols, [
        h('code', { text: g.group }), g.role, timeEl(g.created_at), g.created_by,
        h('button', { type: 'button', class: 'small danger', text: 'Remove', 'aria-label': `Remove ${g.group}`, onclick: (ev) => act(ev.currentTarget, async () => {
          await api('DELETE', `/grants/${enc(g.id)}`);
          flash(`Took ${g.role} back from ${g.group}`);
          await load();
        }, errorEl) }),
      ], { dataset: { group: g.group } })));
      if (!items.length) t.tbody.append(emptyRow(cols, 'No group has a role here.'));
    } catch (e) {
      if (ctx.alive) fillError(errorEl, explain(e));
    }
  }
  const el = h('section', { class: 'card', 'aria-labelledby': 'h-grants' },
    h('h2', { id: 'h-grants', text: 'Groups of the identity provider' }), errorEl, form, t.wrap);
  return { el, load };
}
