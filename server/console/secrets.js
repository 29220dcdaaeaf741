// The secrets page of the chosen namespace: names, versions and who changed them, never a
// value. A value is typed into a password field, sent once, and the field is emptied; the
// page keeps nothing it could show again.

import { ApiError, api, enc, namespace } from './api.js';
import { h, clear, replace, append, fillError, flash, act } from './dom.js';
import { timeEl } from './format.js';
import { table, row, emptyRow } from './tables.js';
import { pageHead, setTitle, focusHeading } from './view.js';

export async function viewSecrets(ctx) {
  setTitle(ctx, 'Secrets');
  const where = namespace() || 'default';
  const errorEl = h('div', { class: 'alert error', role: 'alert', testid: 'secrets-error' });
  const cols = [{ label: 'Name' }, { label: 'Version' }, { label: 'Updated' }, { label: 'By' }, { label: 'Key' }, { label: 'Readable' }, { label: '' }];
  const t = table(cols, 'secrets-table');
  t.table.setAttribute('aria-label', 'Secrets');
  const name = h('input', { type: 'text', id: 'secret-name', required: true, autocomplete: 'off', pattern: '[A-Za-z0-9_\\-][A-Za-z0-9_.\\-]{0,62}', size: '24' });
  const value = h('input', { type: 'password', id: 'secret-value', required: true, autocomplete: 'new-password', size: '32' });
  const save = h('button', { type: 'submit', class: 'primary', text: 'Set secret' });
  const form = h('form', { class: 'toolbar', testid: 'secret-form' },
    h('div', { class: 'field' }, h('label', { for: 'secret-name', text: 'Name' }), name),
    h('div', { class: 'field' }, h('label', { for: 'secret-value', text: 'Value' }), value),
    save);
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    act(save, async () => {
      const written = await api('PUT', `/secrets/${enc(name.value.trim())}`, { value: value.value });
      value.value = '';
      name.value = '';
      flash(`Set ${written.name} (version ${written.version})`);
      await load();
    }, errorEl);
  });

  async function load() {
    try {
      const list = await api('GET', '/secrets');
      if (!ctx.alive) return;
      clear(errorEl);
      const items = list.secrets || [];
      replace(t.tbody, items.map((s) => row(cols, [
        h('code', { text: s.name }), String(s.version), timeEl(s.updated_at), s.updated_by, h('code', { text: s.key_id }),
        s.readable ? 'yes' : 'no: sealed with a key this node lacks',
        h('button', { type: 'button', class: 'small danger', text: 'Delete', 'aria-label': `Delete ${s.name}`, onclick: (ev) => confirm(`Delete secret ${s.name}? Jobs naming it fail until it is set again.`) && act(ev.currentTarget, async () => {
          await api('DELETE', `/secrets/${enc(s.name)}`);
          flash(`Deleted ${s.name}`);
          await load();
        }, errorEl) }),
      ], { dataset: { secretName: s.name } })));
      if (!items.length) t.tbody.append(emptyRow(cols, 'No secret.'));
    } catch (e) {
      if (!ctx.alive) return;
      fillError(errorEl, e instanceof ApiError && e.status === 403
        ? new Error(`Your role in namespace ${where} does not show its secrets.`)
        : e);
    }
  }

  append(ctx.root, [
    pageHead('Secrets', { subtitle: `Values jobs of namespace ${where} name, sealed at rest; written here, never shown` }),
    h('section', { class: 'card', 'aria-labelledby': 'h-secrets' },
      h('h2', { id: 'h-secrets', text: 'Secrets' }), errorEl, form, t.wrap),
  ]);
  focusHeading(ctx);
  await load();
}
