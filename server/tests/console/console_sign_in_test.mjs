// Browser test of a person's sign-in to the Carillon console through a real OpenID provider
// (npm's oidc-provider, started by the Rust test), driven by playwright-core and Chromium.
//
// Run by the Rust test harness as `node server/tests/console/console_sign_in_test.mjs` with:
//   CONSOLE_URL     the node's base URL (required); its [auth.oidc] names the provider
//   LOGIN           the person to sign in as on the provider's pages (required)
//   NAMESPACE       the only namespace the person has a role in (admin there) (required)
//   OWN_JOB         a stopped job of that namespace (required)
//   OTHER_JOB       a job of another namespace, which the person must not see (required)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//   SCREENSHOT_DIR  optional: a PNG of each step is saved there
// The person signs in through the provider's own login and consent pages, finds only their
// namespace in the switcher and only its jobs, starts their job, finds that change in the
// audit page under their name and no other namespace's event, makes and revokes a service
// token and grants a group a role on the Access page, and signs out. Exits 0 when every step passed, 1 (printing what failed) otherwise.

import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const BASE = (process.env.CONSOLE_URL || '').replace(/\/+$/, '');
const LOGIN = process.env.LOGIN || '';
const NAMESPACE = process.env.NAMESPACE || '';
const OWN_JOB = process.env.OWN_JOB || '';
const OTHER_JOB = process.env.OTHER_JOB || '';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SCREENSHOT_DIR || '';

const problems = [];
let passed = 0;

function log(...args) {
  console.log(`[sign-in-test ${new Date().toISOString().slice(11, 23)}]`, ...args);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function shot(page, name) {
  if (!SHOTS) return;
  await page.screenshot({ path: join(SHOTS, `sign-in-${name}.png`), fullPage: true }).catch(() => {});
}

async function step(name, page, fn) {
  log(`step: ${name}`);
  try {
    await fn();
    passed += 1;
    await shot(page, name.replace(/[^a-z0-9]+/gi, '-').toLowerCase());
  } catch (e) {
    log(`  FAILED: ${e.message}`);
    log(`  page: ${page.url()}`);
    const alerts = await page.locator('[role=alert]:not(:empty)').allInnerTexts().catch(() => []);
    if (alerts.length) log(`  alerts on the page: ${JSON.stringify(alerts)}`);
    await shot(page, `FAILED-${name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`);
    throw e;
  }
}

async function heading(page, name) {
  await page.getByRole('heading', { level: 1, name, exact: true }).waitFor({ state: 'visible', timeout: 15_000 });
}

async function main() {
  for (const [name, value] of [['CONSOLE_URL', BASE], ['LOGIN', LOGIN], ['NAMESPACE', NAMESPACE], ['OWN_JOB', OWN_JOB], ['OTHER_JOB', OTHER_JOB]]) {
    check(value, `${name} is not set`);
  }
  if (SHOTS) mkdirSync(SHOTS, { recursive: true });
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
    context.setDefaultTimeout(15_000);
    const page = await context.newPage();
    page.on('pageerror', (e) => problems.push(`uncaught ${e.message}`));
    page.on('console', (msg) => {
      const text = msg.text();
      // Only the console's own pages are held to its policy (the provider's are not ours).
      if (page.url().startsWith(BASE) && /Content Security Policy|Refused to (apply|execute|load|connect)/i.test(text)) {
        problems.push(`CSP: ${text}`);
      }
    });

    await step('1. the login page offers the identity provider, whose pages sign the person in', page, async () => {
      await page.goto(`${BASE}/#/jobs`);
      const provider = page.getByRole('button', { name: 'Sign in with your identity provider' });
      const authorize = page.waitForRequest((r) => r.isNavigationRequest() && !r.url().startsWith(BASE));
      await provider.click();
      const asked = new URL((await authorize).url());
      check(asked.searchParams.get('code_challenge_method') === 'S256', `no PKCE in ${asked}`);
      check(asked.searchParams.get('redirect_uri') === `${BASE}/`, `redirected to ${asked.searchParams.get('redirect_uri')}`);
      const login = page.locator('input[name="login"]');
      await login.waitFor({ state: 'visible' });
      await login.fill(LOGIN);
      await page.locator('input[name="password"]').fill('any password');
      await page.getByRole('button', { name: 'Sign-in' }).click();
      await page.getByRole('button', { name: 'Continue' }).click();
      await page.waitForURL((url) => url.href.startsWith(BASE), { waitUntil: 'commit' });
      // Back where the person was going, the code gone from the address.
      await heading(page, 'Jobs');
      const back = new URL(page.url());
      check(!back.search.includes('code='), `the code stayed in the address: ${back}`);
      check(back.hash === '#/jobs', `not back at the jobs page: ${back}`);
    });

    await step('2. the switcher holds only the person\u2019s namespace, and the jobs are its', page, async () => {
      const switcher = page.getByTestId('namespace-switcher');
      await switcher.waitFor({ state: 'visible' });
      const names = await switcher.locator('option').allInnerTexts();
      check(JSON.stringify(names) === JSON.stringify([NAMESPACE]), `the switcher offers ${JSON.stringify(names)}`);
      const table = page.getByTestId('jobs-table');
      await table.getByRole('link', { name: OWN_JOB, exact: true }).waitFor({ state: 'visible' });
      const text = await table.innerText();
      check(!text.includes(OTHER_JOB), `another namespace's job is listed: ${text}`);
    });

    await step('3. the person starts their job; the audit page names them as who did', page, async () => {
      await page.getByRole('button', { name: `Start ${OWN_JOB}` }).click();
      await page.getByRole('button', { name: `Stop ${OWN_JOB}` }).waitFor({ state: 'visible' });
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Audit', exact: true }).click();
      await heading(page, 'Audit');
      const started = page.getByTestId('audit-table').locator('tbody tr[data-operation="startJob"]');
      await started.first().waitFor({ state: 'visible' });
      const row = await started.first().innerText();
      check(row.includes(`user ${LOGIN}`) && row.includes(NAMESPACE) && row.includes('ok'), `the event reads: ${row}`);
    });

    await step('4. asking for every namespace\u2019s trail still shows only the person\u2019s', page, async () => {
      const rows = page.getByTestId('audit-table').locator('tbody tr[data-operation]');
      const before = await rows.count();
      await page.getByLabel('Every namespace (cluster admins)').check();
      await page.waitForURL((url) => url.hash.includes('every=1'));
      await page.waitForTimeout(500);
      const namespaces = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.namespace));
      check(namespaces.length >= before && namespaces.every((n) => n === NAMESPACE),
        `events of other namespaces are listed: ${JSON.stringify(namespaces)}`);
    });

    await step('5. as the namespace\u2019s admin, the person makes a token (shown once) and a grant', page, async () => {
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Access', exact: true }).click();
      await heading(page, 'Access');
      await page.getByLabel('Name', { exact: true }).fill('ci-deploys');
      await page.getByLabel('Role', { exact: true }).first().selectOption('operator');
      await page.getByRole('button', { name: 'Create token' }).click();
      const secret = (await page.getByTestId('token-value').innerText()).trim();
      check(secret.length >= 20, `no token shown: ${JSON.stringify(secret)}`);
      await page.getByTestId('tokens-table').locator('tr[data-token-name="ci-deploys"]').waitFor({ state: 'visible' });
      // The token works, as an operator of the namespace.
      const res = await fetch(`${BASE}/api/v1/jobs?namespace=${NAMESPACE}`, { headers: { Authorization: `Bearer ${secret}` } });
      check(res.status === 200, `the new token was answered ${res.status}`);
      await page.getByLabel('Group', { exact: true }).fill('team-a-oncall');
      await page.getByRole('button', { name: 'Grant' }).click();
      await page.getByTestId('grants-table').locator('tr[data-group="team-a-oncall"]').waitFor({ state: 'visible' });
      await page.getByRole('button', { name: 'Revoke ci-deploys' }).click();
      await page.getByTestId('tokens-table').locator('tr[data-token-name="ci-deploys"]').waitFor({ state: 'detached' });
    });

    await step('6. signing out forgets the sign-in', page, async () => {
      await page.getByRole('button', { name: 'Sign out' }).click();
      await page.getByRole('button', { name: 'Sign in with your identity provider' }).waitFor({ state: 'visible' });
      const kept = await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('carillon.console.')));
      check(kept.length === 0, `the tab keeps ${JSON.stringify(kept)}`);
    });
    check(problems.length === 0, `page problems: ${problems.join('; ')}`);
  } finally {
    await browser.close().catch(() => {});
  }
}

try {
  await main();
  console.log(`console sign-in: ${passed} passed, 0 failed`);
  process.exit(0);
} catch (e) {
  console.error(`console sign-in test FAILED: ${e && e.stack ? e.stack : e}`);
  if (problems.length) console.error(`page problems:\n  ${problems.join('\n  ')}`);
  console.log(`console sign-in: ${passed} passed, 1 failed`);
  process.exit(1);
}
