// Browser test of the Carillon web console, driven by playwright-core and Debian's Chromium.
//
// Run by the Rust test harness as `node server/tests/console/console_test.mjs` with:
//   CONSOLE_URL     the node's base URL, e.g. http://127.0.0.1:41234 (required)
//   CONSOLE_TOKEN   an admin token (required)
//   CONSOLE_APP     the app of a registered executor offering handlers `echo` and `fail` (default py)
//   CHROMIUM        the browser (default /usr/bin/chromium)
//   SCREENSHOT_DIR  optional: a PNG of each step is saved there
// Exits 0 when every step passed, 1 (printing what failed) otherwise. Never downloads a browser.

import { chromium } from 'playwright-core';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const BASE = (process.env.CONSOLE_URL || '').replace(/\/+$/, '');
const TOKEN = process.env.CONSOLE_TOKEN || '';
const APP = process.env.CONSOLE_APP || 'py';
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SCREENSHOT_DIR || '';
const SUFFIX = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
const ECHO_JOB = `console-echo-${SUFFIX}`;
const FAIL_JOB = `console-fail-${SUFFIX}`;
const LOG_JOB = `console-log-${SUFFIX}`;
const PARENT_JOB = `console-parent-${SUFFIX}`;
const CHILD_JOB = `console-child-${SUFFIX}`;
const WORKFLOW = `console-workflow-${SUFFIX}`;

const results = [];
const createdJobs = new Map(); // name -> id, for the clean-up
const pageProblems = [];
let shotNo = 0;

function log(...args) {
  console.log(`[console-test ${new Date().toISOString().slice(11, 23)}]`, ...args);
}

/** Polls `fn` until it answers something truthy; throws naming `what` on timeout, with what
 *  `context()` (optional) says about the page then. */
async function waitFor(fn, timeoutMs, what, context) {
  const deadline = Date.now() + timeoutMs;
  let last;
  let lastError;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
      lastError = undefined;
    } catch (e) {
      lastError = e;
    }
    if (Date.now() >= deadline) {
      const why = lastError ? ` (last error: ${String(lastError.message || lastError).split('\n')[0]})`
        : last !== undefined ? ` (last value: ${JSON.stringify(last)})` : '';
      let seen = '';
      if (context) seen = `; ${await Promise.resolve().then(context).catch((e) => `(context unavailable: ${e.message})`)}`;
      throw new Error(`timed out after ${(timeoutMs / 1000).toFixed(1)} s waiting for ${what}${why}${seen}`);
    }
    await new Promise((r) => setTimeout(r, 150));
  }
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

async function shot(page, name) {
  if (!SHOTS || !page) return;
  shotNo += 1;
  const file = join(SHOTS, `${String(shotNo).padStart(2, '0')}-${name}.png`);
  try {
    await page.screenshot({ path: file, fullPage: true });
    log(`screenshot ${file}`);
  } catch (e) {
    log(`could not save screenshot ${file}: ${e.message}`);
  }
}

/** Runs one step; a failure prints what failed (with the page's visible alerts) and stops. */
async function step(name, page, fn) {
  const started = Date.now();
  log(`step: ${name}`);
  try {
    await fn();
    results.push({ name, ok: true });
    log(`  ok (${Date.now() - started} ms)`);
  } catch (e) {
    results.push({ name, ok: false, error: e });
    log(`  FAILED: ${e.message}`);
    if (page && !page.isClosed()) {
      log(`  page: ${page.url()}`);
      const alerts = await page.locator('[role=alert]:not(:empty)').allInnerTexts().catch(() => []);
      if (alerts.length) log(`  alerts on the page: ${JSON.stringify(alerts)}`);
      await shot(page, `FAILED-${name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`);
    }
    throw e;
  }
}

/** The API straight from node, for setting up and cleaning up only. */
async function apiCall(method, path, body) {
  const headers = { Authorization: `Bearer ${TOKEN}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${BASE}/api/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return res.status;
}

/** The API straight from node, answering JSON, for setting up only. */
async function apiJson(method, path, body) {
  const headers = { Authorization: `Bearer ${TOKEN}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(`${BASE}/api/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  check(res.ok, `${method} ${path} answered ${res.status}`);
  return res.json();
}

function watch(page, label) {
  page.on('pageerror', (e) => pageProblems.push(`${label}: uncaught ${e.message}`));
  page.on('console', (msg) => {
    const text = msg.text();
    if (/Content Security Policy|Refused to (apply|execute|load|connect)/i.test(text)) pageProblems.push(`${label}: CSP: ${text}`);
  });
}

const hashOf = (page) => new URL(page.url()).hash;

async function waitHeading(page, name, timeout = 10_000) {
  await page.getByRole('heading', { level: 1, name, exact: typeof name === 'string' }).waitFor({ state: 'visible', timeout });
}

async function login(page) {
  await page.goto(`${BASE}/`);
  await page.getByLabel('Token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await waitHeading(page, 'Dashboard');
}

async function openNav(page, name) {
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true }).click();
  await waitHeading(page, name);
}

/** Fills the new-job form (the page shows it) and creates the job; answers its id. */
async function createJob(page, { name, handler, kind, expression, zone, maxAttempts, startAtOnce }) {
  await page.getByLabel('Name', { exact: true }).fill(name);
  await page.getByLabel('App', { exact: true }).fill(APP);
  await page.getByLabel('Handler', { exact: true }).fill(handler);
  await page.getByLabel('Schedule kind').selectOption(kind);
  await page.getByLabel('Expression').fill(expression);
  if (zone) await page.getByLabel('Time zone').fill(zone);
  if (maxAttempts !== undefined) await page.getByLabel('Max attempts').fill(String(maxAttempts));
  const start = page.getByLabel('Start at once');
  if (startAtOnce) await start.check();
  else await start.uncheck();
  await page.getByRole('button', { name: 'Create job' }).click();
  const id = await waitFor(async () => {
    const m = /^#\/jobs\/(\d+)$/.exec(hashOf(page));
    if (m) return m[1];
    const error = await page.evaluate(() => {
      const el = document.querySelector('[data-testid="form-error"]');
      return el ? el.textContent : '';
    });
    if (error.trim()) throw new Error(`the form says: ${error.trim()}`);
    return null;
  }, 10_000, `the page of the new job ${name}`);
  createdJobs.set(name, id);
  await waitHeading(page, name);
  return id;
}

async function jobState(page) {
  return (await page.getByTestId('job-state').innerText({ timeout: 2_000 })).trim();
}

/** The states of the runs a table lists, for failure messages. */
function runStates(table) {
  return async () => {
    const states = await table.locator('tbody tr[data-state]').evaluateAll((trs) => trs.map((tr) => tr.dataset.state));
    return states.length ? `the table lists runs in states ${JSON.stringify(states)}` : 'the table lists no run';
  };
}

async function noHorizontalOverflow(page, where) {
  const sizes = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    body: document.body.scrollWidth,
    inner: window.innerWidth,
  }));
  check(sizes.scroll <= sizes.inner + 1 && sizes.body <= sizes.inner + 1,
    `${where}: the page is wider than the ${sizes.inner} px viewport (document ${sizes.scroll} px, body ${sizes.body} px)`);
}

async function main() {
  check(BASE, 'CONSOLE_URL is not set');
  check(TOKEN, 'CONSOLE_TOKEN is not set');
  if (SHOTS) mkdirSync(SHOTS, { recursive: true });
  log(`console at ${BASE}, app ${APP}, jobs suffix ${SUFFIX}`);

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
  });
  let page;
  try {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, locale: 'en-GB', timezoneId: 'UTC' });
    context.setDefaultTimeout(15_000);
    page = await context.newPage();
    watch(page, 'desktop');

    await step('1. login page, a wrong token is refused, the right one opens the dashboard', page, async () => {
      await page.goto(`${BASE}/`);
      const tokenInput = page.getByLabel('Token');
      await tokenInput.waitFor({ state: 'visible' });
      check(await tokenInput.getAttribute('type') === 'password', 'the token input is not a password input');
      await shot(page, 'login');
      await tokenInput.fill(`wrong-${TOKEN}`);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await waitFor(async () => (await page.getByTestId('login-error').innerText({ timeout: 2_000 })).includes('That token was refused'),
        10_000, 'the message "That token was refused"');
      await tokenInput.fill(TOKEN);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await waitHeading(page, 'Dashboard');
      check(hashOf(page) === '#/dashboard', `after signing in the address is ${page.url()}, not #/dashboard`);
      const nodes = page.getByTestId('cluster-nodes');
      await waitFor(async () => (await nodes.locator('tbody tr').count()) >= 1, 10_000, 'a node in the cluster table');
      await waitFor(async () => (await nodes.locator('.badge.leader', { hasText: 'leader' }).count()) === 1, 15_000,
        'exactly one node marked leader');
      check((await page.getByTestId('leader').innerText({ timeout: 2_000 })).includes('term'), 'the dashboard does not show the leader with its term');
      await shot(page, 'dashboard');
    });

    let echoId;
    await step('2. create a job with a live preview, start it, see a succeeded run', page, async () => {
      await openNav(page, 'Jobs');
      await page.getByRole('link', { name: 'New job' }).click();
      await waitHeading(page, 'New job');
      await page.getByLabel('Name', { exact: true }).fill(ECHO_JOB);
      await page.getByLabel('Schedule kind').selectOption('cron');
      await page.getByLabel('Expression').fill('* * * * * ?');
      await page.getByLabel('Time zone').fill('Europe/Paris');
      const instants = page.getByTestId('preview').getByTestId('preview-instant');
      const parisOffset = new Intl.DateTimeFormat('en-US', { timeZone: 'Europe/Paris', timeZoneName: 'longOffset' })
        .formatToParts(new Date()).find((p) => p.type === 'timeZoneName').value.replace('GMT', '');
      await waitFor(async () => {
        const texts = await instants.allInnerTexts();
        return texts.length === 5 && texts.every((t) => /\+0[12]:00/.test(t) && t.includes('UTC')) && texts;
      }, 10_000, `5 preview instants with the Paris offset (${parisOffset}) and UTC`);
      const texts = await instants.allInnerTexts();
      check(texts.some((t) => t.includes(parisOffset)), `the preview's local times do not show Paris's offset ${parisOffset}: ${JSON.stringify(texts)}`);
      await shot(page, 'preview');

      await page.getByLabel('Expression').fill('61 * * * *');
      const previewError = page.getByTestId('preview').getByTestId('preview-error');
      await waitFor(async () => (await previewError.count()) === 1 && (await previewError.innerText({ timeout: 2_000 })).trim().length > 0,
        10_000, 'an error in the preview for the invalid expression 61 * * * *');
      check(await instants.count() === 0, 'the preview still lists instants for an invalid expression');
      await shot(page, 'preview-error');

      await page.getByLabel('Expression').fill('* * * * * ?');
      await waitFor(async () => (await instants.count()) === 5, 10_000, 'the preview listing 5 instants again');

      // The policies reach the preview: a calendar that excludes every day skips every instant.
      const calendar = `every-day-${SUFFIX}`;
      check(await apiCall('PUT', `/calendars/${calendar}`, { rrules: ['FREQ=DAILY'] }) === 201, `calendar ${calendar} not created`);
      await page.getByLabel('Exclusion calendars').fill(calendar);
      const skipped = page.getByTestId('preview').getByTestId('preview-skipped');
      await waitFor(async () => (await skipped.count()) === 5, 10_000, `5 preview instants skipped by calendar ${calendar}`);
      await shot(page, 'preview-calendar');
      await page.getByLabel('Max runs').fill('0');
      await page.getByRole('button', { name: 'Create job' }).click();
      await waitFor(async () => (await page.getByLabel('Max runs').getAttribute('aria-invalid')) === 'true', 5_000, 'max runs 0 refused in the form');
      await page.getByLabel('Max runs').fill('');
      await page.getByLabel('Exclusion calendars').fill('');
      await waitFor(async () => (await skipped.count()) === 0 && (await instants.count()) === 5, 10_000, 'the preview without the calendar');
      check(await apiCall('DELETE', `/calendars/${calendar}`) === 204, `calendar ${calendar} not deleted`);

      echoId = await createJob(page, { name: ECHO_JOB, handler: 'echo', kind: 'cron', expression: '* * * * * ?', zone: 'Europe/Paris', startAtOnce: false });
      await waitFor(async () => (await jobState(page)) === 'stopped', 5_000, `job ${ECHO_JOB} created stopped`);
      await page.getByRole('button', { name: 'Start', exact: true }).click();
      await waitFor(async () => (await jobState(page)) === 'running', 10_000, `job ${ECHO_JOB} running after Start`);
      const succeeded = page.getByTestId('job-runs').locator('tbody tr[data-state="succeeded"]');
      await waitFor(async () => (await succeeded.count()) >= 1, 20_000, `a succeeded run in the runs of ${ECHO_JOB}`,
        runStates(page.getByTestId('job-runs')));
      check((await succeeded.first().innerText({ timeout: 2_000 })).includes('succeeded'), 'the succeeded run shows no "succeeded" badge');
      check((await page.getByTestId('job-warnings').innerText()).trim() === '', 'a served handler is warned of');
      await shot(page, 'job-runs');
    });

    await step('2b. a job for a handler nobody offers shows a warning naming what is offered', page, async () => {
      const job = await apiJson('POST', '/jobs', { name: `console-typo-${SUFFIX}`, app: APP, handler: `${APP}.echo`, schedule: { manual: true } });
      await page.evaluate((id) => { location.hash = `#/jobs/${id}`; }, String(job.id));
      await waitHeading(page, job.name);
      const warning = (await page.getByTestId('job-warnings').innerText({ timeout: 5_000 })).trim();
      check(warning.includes(`offers handler "${APP}.echo"`) && warning.includes('echo'),
        `the job page warns of its handler, naming what app ${APP} offers; it says: ${warning}`);
      await shot(page, 'job-warning');
      check(await apiCall('DELETE', `/jobs/${job.id}`) === 204, `job ${job.id} not deleted`);
    });

    let failId;
    await step('3. a failing job: its failed run shows the attempt\'s error', page, async () => {
      await openNav(page, 'Jobs');
      await page.getByRole('link', { name: 'New job' }).click();
      await waitHeading(page, 'New job');
      failId = await createJob(page, { name: FAIL_JOB, handler: 'fail', kind: 'every', expression: '1s', maxAttempts: 1, startAtOnce: true });
      await waitFor(async () => (await jobState(page)) === 'running', 10_000, `job ${FAIL_JOB} created running`);

      await openNav(page, 'Runs');
      await page.getByLabel('State').selectOption('failed');
      await page.getByLabel('Job id').fill(failId);
      const table = page.getByTestId('runs-table');
      const failed = table.locator('tbody tr[data-state="failed"]');
      await waitFor(async () => (await failed.count()) >= 1, 25_000, `a failed run of ${FAIL_JOB} in the runs list`, runStates(table));
      await waitFor(async () => (await failed.first().innerText({ timeout: 2_000 })).includes(FAIL_JOB), 10_000, 'the runs list naming the job');
      check(await table.locator('tbody tr[data-state]:not([data-state="failed"])').count() === 0, 'the state filter let through runs that did not fail');
      await shot(page, 'runs-failed');

      // The dead letters hold it too.
      await page.getByLabel('Dead letters only').check();
      await waitFor(async () => (await failed.count()) >= 1, 10_000, 'the failed run among the dead letters');

      const link = failed.first().getByRole('link', { name: /^Run \d+$/ });
      const runName = (await link.innerText({ timeout: 2_000 })).trim();
      await link.click();
      await waitHeading(page, runName);
      const error = page.getByTestId('attempts').getByTestId('attempt-error').first();
      await waitFor(async () => (await error.innerText({ timeout: 2_000 })).includes('failed on'), 10_000, 'the attempt error "failed on …" on the run page');
      check(await error.isVisible(), 'the attempt error is not visible');
      check(await error.evaluate((el) => el.tagName) === 'PRE', 'the attempt error is not in a <pre>');
      await page.getByRole('button', { name: 'Re-run dead letter' }).waitFor({ state: 'visible', timeout: 5_000 });
      await shot(page, 'run-failed');
    });

    await step('3b. a running run shows its handler log as it comes, as text', page, async () => {
      const job = await apiJson('POST', '/jobs', { name: LOG_JOB, app: APP, handler: 'slow', schedule: { manual: true }, args: { seconds: 4 } });
      createdJobs.set(LOG_JOB, String(job.id));
      const run = await apiJson('POST', `/jobs/${job.id}/trigger`);
      await page.evaluate((id) => { location.hash = `#/runs/${id}`; }, String(run.id));
      await waitHeading(page, `Run ${run.id}`);
      const panel = page.getByTestId('run-log');
      const lines = panel.getByTestId('log-lines').locator('.log-line');
      await waitFor(async () => (await lines.count()) >= 2, 10_000, 'two log lines on the run page');
      const state = await page.getByTestId('run-state').innerText();
      check(!state.includes('succeeded'), `the lines came only after the run ended (${state})`);
      const first = await lines.first().innerText();
      check(first.includes('slow step 1 <b>not bold</b>'), `the first line does not show its markup as text: ${first}`);
      check(await panel.locator('b').count() === 0, 'a logged <b> was parsed as markup');
      const during = await lines.count();
      await waitFor(async () => (await lines.count()) > during, 5_000, 'more lines while the run goes on (following)');
      await shot(page, 'run-log-live');
      await waitFor(async () => (await page.getByTestId('run-state').innerText()).includes('succeeded'), 15_000, 'the run to succeed');
      await waitFor(async () => !(await panel.getByTestId('log-status').innerText()).includes('following'), 10_000, 'the log to stop following once the run ended');
      const numbers = await lines.evaluateAll((els) => els.map((el) => Number(el.dataset.line)));
      check(numbers.length >= 6 && numbers.every((n, i) => n === i + 1), `lines shown once each, in order: ${JSON.stringify(numbers)}`);
      await shot(page, 'run-log-done');
      // Out of the way of the search below, which expects the two jobs of this run.
      check(await apiCall('DELETE', `/jobs/${job.id}`) === 204, `job ${LOG_JOB} could not be deleted`);
      createdJobs.delete(LOG_JOB);
    });

    await step('phone viewport (390x844): the nav and the jobs list are usable', page, async () => {
      const phone = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true, locale: 'en-GB' });
      phone.setDefaultTimeout(15_000);
      const p = await phone.newPage();
      watch(p, 'phone');
      try {
        await login(p);
        await noHorizontalOverflow(p, 'dashboard');
        const nav = p.getByRole('navigation', { name: 'Main' });
        for (const name of ['Dashboard', 'Jobs', 'Runs', 'Executors']) {
          const link = nav.getByRole('link', { name, exact: true });
          check(await link.isVisible(), `the nav link ${name} is not visible on a phone`);
          const box = await link.boundingBox();
          check(box && box.x >= 0 && box.x + box.width <= 391, `the nav link ${name} is outside the screen: ${JSON.stringify(box)}`);
        }
        await shot(p, 'phone-dashboard');
        await nav.getByRole('link', { name: 'Jobs', exact: true }).tap();
        await waitHeading(p, 'Jobs');
        await p.getByLabel('Search jobs').fill(SUFFIX);
        const rows = p.getByTestId('jobs-table').locator('tbody tr[data-job-id]');
        await waitFor(async () => (await rows.count()) === 2, 10_000, 'the two jobs listed on the phone');
        await noHorizontalOverflow(p, 'jobs list');
        for (const name of [ECHO_JOB, FAIL_JOB]) {
          const row = p.getByTestId('jobs-table').locator(`tbody tr[data-job-name="${name}"]`);
          const stop = row.getByRole('button', { name: `Stop ${name}` });
          check(await stop.isVisible(), `the Stop button of ${name} is not visible on a phone`);
          const box = await stop.boundingBox();
          check(box && box.x + box.width <= 391, `the Stop button of ${name} is off screen: ${JSON.stringify(box)}`);
          check(await row.getByRole('link', { name }).isVisible(), `the link to ${name} is not visible on a phone`);
        }
        await shot(p, 'phone-jobs');
        await p.getByRole('link', { name: ECHO_JOB }).tap();
        await waitHeading(p, ECHO_JOB);
        await noHorizontalOverflow(p, 'job page');
        await shot(p, 'phone-job');
      } finally {
        await phone.close();
      }
    });

    await step('3c. a child job: the parent lists it, the child\'s run links its parent and shows its input', page, async () => {
      const child = await apiJson('POST', '/jobs', { name: CHILD_JOB, app: APP, handler: 'echo', schedule: { manual: true } });
      createdJobs.set(CHILD_JOB, String(child.id));
      const parent = await apiJson('POST', '/jobs', { name: PARENT_JOB, app: APP, handler: 'echo', schedule: { manual: true }, args: { region: 'eu' }, children: { on_success: [child.id] } });
      createdJobs.set(PARENT_JOB, String(parent.id));
      await page.evaluate((id) => { location.hash = `#/jobs/${id}`; }, String(parent.id));
      await waitHeading(page, PARENT_JOB);
      const listed = page.getByTestId('job-children');
      await waitFor(async () => (await listed.innerText({ timeout: 2_000 })).includes(CHILD_JOB), 10_000, 'the parent\'s page naming its child');
      const run = await apiJson('POST', `/jobs/${parent.id}/trigger`);
      await page.evaluate((id) => { location.hash = `#/runs/${id}`; }, String(run.id));
      await waitHeading(page, `Run ${run.id}`);
      const children = page.getByTestId('run-children');
      await waitFor(async () => (await children.count()) === 1, 15_000, 'the parent run listing its child run');
      await children.getByRole('link', { name: /^run \d+$/ }).first().click();
      const input = page.getByTestId('run-input');
      await waitFor(async () => (await input.count()) === 1, 10_000, 'the child run\'s input');
      const text = await input.innerText();
      check(text.includes(`"run_id": ${run.id}`) && text.includes('"region": "eu"'), `the input names the parent run and its output: ${text}`);
      await page.getByRole('link', { name: `run ${run.id}` }).waitFor({ state: 'visible', timeout: 5_000 });
      await shot(page, 'child-run');
      for (const name of [PARENT_JOB, CHILD_JOB]) {
        check(await apiCall('DELETE', `/jobs/${createdJobs.get(name)}`) === 204, `job ${name} could not be deleted`);
        createdJobs.delete(name);
      }
    });

    await step('3d. a workflow: its graph, and a run\'s steps coloured by state linking to their runs', page, async () => {
      const wf = await apiJson('POST', '/workflows', { name: WORKFLOW, schedule: { manual: true }, steps: [
        { name: 'extract', app: APP, handler: 'echo' },
        { name: 'load', app: APP, handler: 'echo', needs: ['extract'] },
        { name: 'check', app: APP, handler: 'fail', needs: ['extract'] },
      ] });
      await page.evaluate((id) => { location.hash = `#/workflows/${id}`; }, String(wf.id));
      await waitHeading(page, WORKFLOW);
      const graph = page.getByTestId('workflow-graph');
      await waitFor(async () => (await graph.locator('g.wf-step').count()) === 3, 10_000, 'three steps drawn');
      check(await graph.locator('path.wf-edge').count() === 2, 'two edges drawn');
      check(await graph.evaluate((el) => el.namespaceURI) === 'http://www.w3.org/2000/svg', 'the graph is not SVG');
      await shot(page, 'workflow');
      const run = await apiJson('POST', `/workflows/${wf.id}/trigger`, {});
      await page.evaluate((id) => { location.hash = `#/workflow-runs/${id}`; }, String(run.id));
      await waitHeading(page, `Workflow run ${run.id}`);
      const stepState = (name) => page.getByTestId('workflow-graph').locator(`g.wf-step[data-step="${name}"]`).getAttribute('data-state');
      await waitFor(async () => (await stepState('load')) === 'succeeded' && (await stepState('check')) === 'failed', 20_000, 'load succeeded and check failed on the graph');
      await shot(page, 'workflow-run');
      await page.getByTestId('workflow-graph').locator('g.wf-step[data-step="load"] a').click();
      await waitFor(async () => /^#\/runs\/\d+$/.test(await page.evaluate(() => location.hash)), 5_000, 'the step opening its run');
      await page.getByTestId('run-input').waitFor({ state: 'visible', timeout: 10_000 });
      check(await apiCall('DELETE', `/workflows/${wf.id}`) === 204, `workflow ${WORKFLOW} could not be deleted`);
    });

    await step('3e. secrets: one set through the page is listed, its value never shown; deleted', page, async () => {
      const secretName = `db-password-${SUFFIX}`;
      const value = `not-for-eyes-${SUFFIX}`;
      await openNav(page, 'Secrets');
      await page.getByLabel('Name', { exact: true }).fill(secretName);
      await page.getByLabel('Value', { exact: true }).fill(value);
      await page.getByRole('button', { name: 'Set secret' }).click();
      const listed = page.getByTestId('secrets-table').locator(`tbody tr[data-secret-name="${secretName}"]`);
      await waitFor(async () => (await listed.count()) === 1, 10_000, `${secretName} listed`);
      check((await page.getByLabel('Value', { exact: true }).inputValue()) === '', 'the value field is emptied once sent');
      check(!(await page.content()).includes(value), 'the page shows the value');
      check((await listed.innerText()).includes('yes'), `the node cannot open ${secretName}`);
      const answer = await apiJson('GET', '/secrets');
      check(!JSON.stringify(answer).includes(value), 'the API answers the value');
      await shot(page, 'secrets');
      page.once('dialog', (d) => d.accept());
      await listed.getByRole('button', { name: `Delete ${secretName}` }).click();
      await waitFor(async () => (await listed.count()) === 0, 10_000, `${secretName} gone after Delete`);
    });

    await step('3f. an HTTP job: the form\'s test call shows the answer; created, it runs with no executor', page, async () => {
      const name = `console-http-${SUFFIX}`;
      await openNav(page, 'Jobs');
      await page.getByRole('link', { name: 'New job' }).click();
      await waitHeading(page, 'New job');
      await page.getByLabel('Name', { exact: true }).fill(name);
      await page.getByLabel('Runs', { exact: true }).selectOption('http');
      check(!(await page.getByLabel('App', { exact: true }).isVisible()), 'the App field is shown for an HTTP job');
      await page.getByLabel('Method', { exact: true }).selectOption('GET');
      await page.getByLabel('URL', { exact: true }).fill(`${BASE}/healthz?run={{run_id}}`);
      await page.getByLabel('Success statuses').fill('200');
      await page.getByRole('button', { name: 'Test call now' }).click();
      const verdict = page.getByTestId('test-call-verdict');
      await verdict.waitFor({ state: 'visible', timeout: 10_000 });
      check((await verdict.innerText()).startsWith('Succeeded'), `the test call: ${await verdict.innerText()}`);
      check((await page.getByTestId('test-call-body').innerText()).includes('"status"'), 'the test call shows the answer\'s body');
      await page.getByLabel('Schedule kind').selectOption('manual');
      // Flow control: a key name the server refuses is reported on its field.
      await page.getByLabel('Flow key', { exact: true }).fill('not a key');
      await page.getByLabel('Max in flight', { exact: true }).fill('2');
      await page.getByRole('button', { name: 'Create job' }).click();
      const keyError = page.locator('#job-flow-key-error');
      await waitFor(async () => (await keyError.innerText()).includes('not a key name'), 10_000, 'the flow key\'s error on its field');
      await page.getByLabel('Flow key', { exact: true }).fill('partner-api');
      await page.getByRole('button', { name: 'Create job' }).click();
      const id = await waitFor(async () => {
        const m = /^#\/jobs\/(\d+)$/.exec(hashOf(page));
        return m ? m[1] : null;
      }, 10_000, `the page of the new job ${name}`);
      createdJobs.set(name, id);
      await waitHeading(page, name);
      check((await page.locator('dl.props').innerText()).includes('partner-api: 2 in flight'), 'the job page shows its flow control');
      check((await apiJson('GET', `/jobs/${id}`)).flow.max_in_flight === 2, 'the job holds its flow control');
      await shot(page, 'http-job');
      const run = await apiJson('POST', `/jobs/${id}/trigger`);
      await waitFor(async () => (await apiJson('GET', `/runs/${run.id}`)).state === 'succeeded', 15_000, `the run of ${name} succeeding`);
      check(await apiCall('DELETE', `/jobs/${id}`) === 204, `job ${name} could not be deleted`);
      createdJobs.delete(name);
    });

    await step('4. search finds exactly the two jobs; stop and delete both', page, async () => {
      await openNav(page, 'Jobs');
      await page.getByLabel('Search jobs').fill(SUFFIX);
      const table = page.getByTestId('jobs-table');
      const rows = table.locator('tbody tr[data-job-id]');
      await waitFor(async () => {
        const names = await rows.evaluateAll((trs) => trs.map((tr) => tr.dataset.jobName));
        return names.length === 2 && names.includes(ECHO_JOB) && names.includes(FAIL_JOB);
      }, 10_000, `exactly ${ECHO_JOB} and ${FAIL_JOB} listed for the search "${SUFFIX}"`);
      await shot(page, 'search');
      for (const name of [ECHO_JOB, FAIL_JOB]) {
        const row = table.locator(`tbody tr[data-job-name="${name}"]`);
        await row.getByRole('button', { name: `Stop ${name}` }).click();
        await waitFor(async () => (await row.locator('.badge').first().innerText({ timeout: 2_000 })).trim() === 'stopped', 10_000, `${name} stopped`);
        page.once('dialog', (d) => d.accept());
        await row.getByRole('button', { name: `Delete ${name}` }).click();
        await waitFor(async () => (await row.count()) === 0, 10_000, `${name} gone from the list after Delete`);
        const status = await apiCall('GET', `/jobs/${createdJobs.get(name)}`);
        check(status === 404, `job ${name} still exists after Delete (GET answered ${status})`);
        createdJobs.delete(name);
      }
      await waitFor(async () => (await rows.count()) === 0, 5_000, 'no job left for the search');
      await shot(page, 'deleted');
    });

    check(pageProblems.length === 0, `the pages reported problems:\n  ${pageProblems.join('\n  ')}`);
    results.push({ name: 'no script error and no CSP violation', ok: true });
  } finally {
    // Never leave jobs firing every second behind, whatever failed: those known by id, and
    // any other of this run's (found by name, in case a step failed before reading the id).
    for (const name of [ECHO_JOB, FAIL_JOB, LOG_JOB, PARENT_JOB, CHILD_JOB]) {
      if (createdJobs.has(name)) continue;
      try {
        const res = await fetch(`${BASE}/api/v1/jobs?name=${encodeURIComponent(name)}&limit=10`, { headers: { Authorization: `Bearer ${TOKEN}` } });
        if (res.ok) for (const j of (await res.json()).jobs || []) if (j.name === name) createdJobs.set(name, String(j.id));
      } catch {
        /* best effort */
      }
    }
    for (const [name, id] of createdJobs) {
      try {
        await apiCall('POST', `/jobs/${id}/stop`);
        await apiCall('DELETE', `/jobs/${id}`);
        log(`cleaned up job ${name} (${id})`);
      } catch (e) {
        log(`could not clean up job ${name} (${id}): ${e.message}`);
      }
    }
    await browser.close().catch(() => {});
  }
}

try {
  await main();
  const passed = results.filter((r) => r.ok).length;
  log(`${passed} passed, 0 failed`);
  console.log(`console: ${passed} passed, 0 failed`);
  process.exit(0);
} catch (e) {
  const passed = results.filter((r) => r.ok).length;
  console.error(`console test FAILED: ${e && e.stack ? e.stack : e}`);
  if (pageProblems.length) console.error(`page problems:\n  ${pageProblems.join('\n  ')}`);
  console.log(`console: ${passed} passed, 1 failed`);
  process.exit(1);
}
