// The dashboard page: cluster and leader, executors by app, runs of the last hour, recent
// failures and late fires.

import { ApiError, api, enc } from './api.js';
import { h, append, svg, replace, errorBox } from './dom.js';
import { parseTime, localStamp, fmtDuration, timeEl, badge, jobLink } from './format.js';
import { table, row, emptyRow } from './tables.js';
import { pageHead, setTitle, focusHeading } from './view.js';

export async function viewDashboard(ctx) {
  setTitle(ctx, 'Dashboard');
  const updated = h('span', { class: 'muted small', 'aria-live': 'off' });
  const clusterBody = h('div', { testid: 'cluster' }, h('p', { class: 'muted', text: 'Loading…' }));
  const appsBody = h('div', { testid: 'apps-summary' }, h('p', { class: 'muted', text: 'Loading…' }));
  const statsBody = h('div', { testid: 'stats' }, h('p', { class: 'muted', text: 'Loading…' }));
  const failuresBody = h('div', { testid: 'recent-failures' });
  const lateBody = h('div', { testid: 'late-fires' });
  append(ctx.root, [
    pageHead('Dashboard', { actions: [updated] }),
    h('div', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'h-cluster' }, h('h2', { id: 'h-cluster', text: 'Cluster' }), clusterBody),
      h('section', { class: 'card', 'aria-labelledby': 'h-apps' },
        h('h2', { id: 'h-apps' }, h('span', { text: 'Executors by app' }), h('a', { href: '#/executors', class: 'small', text: 'All executors' })),
        appsBody)),
    h('section', { class: 'card', 'aria-labelledby': 'h-stats' }, h('h2', { id: 'h-stats', text: 'Runs in the last 60 minutes' }), statsBody),
    h('div', { class: 'grid' },
      h('section', { class: 'card', 'aria-labelledby': 'h-fail' },
        h('h2', { id: 'h-fail' }, h('span', { text: 'Recent failures' }), h('a', { href: '#/runs?dead=1', class: 'small', text: 'Dead letters' })),
        failuresBody),
      h('section', { class: 'card', 'aria-labelledby': 'h-late' }, h('h2', { id: 'h-late', text: 'Late fires' }), lateBody)),
  ]);
  focusHeading(ctx);

  const loadCluster = async () => {
    try {
      const c = await api('GET', '/cluster');
      if (ctx.alive) renderCluster(clusterBody, c);
    } catch (e) {
      if (ctx.alive) replace(clusterBody, errorBox(e));
    }
  };
  const loadApps = async () => {
    try {
      const a = await api('GET', '/apps');
      if (ctx.alive) renderAppsSummary(appsBody, a.apps || []);
    } catch (e) {
      if (ctx.alive) replace(appsBody, forClusterViewers(e) || errorBox(e));
    }
  };
  const loadStats = async () => {
    try {
      const s = await api('GET', '/stats?minutes=60');
      if (!ctx.alive) return;
      renderStats(statsBody, s);
      renderFailures(failuresBody, s.recent_failures || []);
      renderLate(lateBody, s.late_fires || [], s.late_after_ms);
    } catch (e) {
      if (!ctx.alive) return;
      if (e instanceof ApiError && e.status === 404) {
        const note = 'This server does not offer run statistics (GET /api/v1/stats answered 404).';
        replace(statsBody, h('p', { class: 'muted', text: note }));
        replace(failuresBody, h('p', { class: 'muted' }, 'See the ', h('a', { href: '#/runs?dead=1', text: 'dead letters' }), '.'));
        replace(lateBody, h('p', { class: 'muted', text: 'Not available.' }));
      } else if (forClusterViewers(e)) {
        replace(statsBody, forClusterViewers(e));
        replace(failuresBody, h('p', { class: 'muted' }, 'See the ', h('a', { href: '#/runs?dead=1', text: 'dead letters' }), '.'));
        replace(lateBody, h('p', { class: 'muted', text: 'Not available.' }));
      } else {
        replace(statsBody, errorBox(e));
      }
    }
  };
  const refresh = async () => {
    await Promise.all([loadCluster(), loadApps(), loadStats()]);
    if (ctx.alive) updated.textContent = `Updated ${localStamp(new Date()).slice(11)} · refreshes every 5 s`;
  };
  await refresh();
  ctx.poll(refresh, 5000);
}

/** The note shown for the cluster's figures to a caller whose roles are a namespace's. */
function forClusterViewers(e) {
  if (!(e instanceof ApiError) || e.status !== 403) return null;
  return h('p', { class: 'muted', text: 'The cluster\u2019s figures are for its viewers; your roles are a namespace\u2019s.' });
}

function renderCluster(body, c) {
  const leader = c.leader;
  const cols = [{ label: 'Node' }, { label: 'Address' }, { label: 'Alive' }, { label: 'Partitions', num: true }, { label: 'Last heartbeat' }];
  const t = table(cols, 'cluster-nodes');
  const nodes = c.nodes || [];
  for (const n of nodes) {
    const partitions = (n.partitions || []).length;
    t.tbody.append(row(cols, [
      h('span', { class: 'nowrap', title: n.version ? `version ${n.version}` : null }, h('code', { text: n.node_id }), ' ', n.leader ? h('span', { class: 'badge leader', text: 'leader' }) : null),
      h('code', { text: n.address || '—' }),
      n.alive ? badge('alive', 'ok') : h('span', { class: 'badge fail', text: 'down' }),
      `${partitions}${(n.handing_off || []).length ? ` (${n.handing_off.length} handing off)` : ''}`,
      timeEl(n.last_heartbeat_at),
    ], { dataset: { node: n.node_id } }));
  }
  if (!nodes.length) t.tbody.append(emptyRow(cols, 'No node has registered.'));
  const me = c.this_node || {};
  replace(body,
    h('p', { testid: 'leader' },
      leader
        ? ['Leader ', h('code', { text: leader.node_id }), ` · term ${leader.term}`, leader.lease_until ? h('span', { class: 'muted' }, ' · lease until ', timeEl(leader.lease_until)) : null]
        : h('span', { class: 'badge fail', text: 'no leader' }),
      h('span', { class: 'muted', text: ` · ${c.partition_count ?? 0} partitions` })),
    t.wrap,
    h('p', { class: 'muted small' }, 'Answered by ', h('code', { text: me.node_id || '?' }),
      `${me.member ? '' : ' (not a member)'} · acting on ${me.acting_partitions ?? 0} partitions · ${me.jobs_held ?? 0} jobs held`));
}

function renderAppsSummary(body, apps) {
  const cols = [{ label: 'App' }, { label: 'Healthy' }, { label: 'Capacity', num: true }, { label: 'Handlers' }];
  const t = table(cols, 'apps-table');
  for (const a of apps) {
    const allHealthy = a.healthy_executors === a.executors && a.executors > 0;
    t.tbody.append(row(cols, [
      h('code', { text: a.name }),
      h('span', { class: `badge ${allHealthy ? 'ok' : a.healthy_executors ? 'warn' : 'fail'}`, text: `${a.healthy_executors} / ${a.executors}` }),
      String(a.capacity ?? 0),
      (a.handlers || []).join(', ') || '—',
    ]));
  }
  if (!apps.length) t.tbody.append(emptyRow(cols, 'No executor has registered.'));
  replace(body, t.wrap);
}

function renderStats(body, s) {
  const per = s.per_minute || [];
  const finished = (s.succeeded || 0) + (s.failed || 0) + (s.other || 0);
  const rate = s.success_rate === null || s.success_rate === undefined ? '—' : `${(s.success_rate * 100).toFixed(s.success_rate >= 0.995 || s.success_rate === 0 ? 0 : 1)}%`;
  const late = typeof s.late === 'number' ? s.late : (s.late_fires || []).length;
  const tile = (label, value, tone, testid) => h('div', { class: `tile ${tone || ''}`, testid },
    h('div', { class: 'value', text: value }), h('div', { class: 'label', text: label }));
  const rateTone = s.success_rate === null || s.success_rate === undefined ? '' : s.success_rate >= 0.99 ? 'ok' : s.success_rate >= 0.9 ? 'warn' : 'fail';
  replace(body,
    h('div', { class: 'tiles' },
      tile('success rate', rate, rateTone, 'success-rate'),
      tile('succeeded', String(s.succeeded ?? 0), '', 'succeeded-count'),
      tile('failed', String(s.failed ?? 0), s.failed ? 'fail' : '', 'failed-count'),
      tile('other (cancelled, skipped…)', String(s.other ?? 0), '', 'other-count'),
      tile(`late (> ${fmtDuration(s.late_after_ms ?? 60000)})`, String(late), late ? 'warn' : '', 'late-count')),
    chart(per, finished, s.window_minutes || per.length));
}

function chart(per, finished, minutes) {
  const n = Math.max(per.length, 1);
  const W = n * 10;
  const H = 100;
  const max = Math.max(1, ...per.map((m) => (m.succeeded || 0) + (m.failed || 0) + (m.other || 0)));
  const slots = per.map((m, i) => {
    const x = i * 10 + 1;
    const parts = [['bar-ok', m.succeeded || 0], ['bar-fail', m.failed || 0], ['bar-other', m.other || 0]];
    let y = H;
    const rects = [];
    for (const [cls, v] of parts) {
      if (!v) continue;
      const hgt = Math.max(1, (v / max) * (H - 4));
      y -= hgt;
      rects.push(svg('rect', { class: cls, x, y: y.toFixed(2), width: 8, height: hgt.toFixed(2) }));
    }
    const d = parseTime(m.minute);
    const label = `${d ? localStamp(d).slice(11, 16) : m.minute}: ${m.succeeded || 0} succeeded, ${m.failed || 0} failed, ${m.other || 0} other`;
    return svg('g', { class: 'slot' }, svg('title', null, label), svg('rect', { x: i * 10, y: 0, width: 10, height: H, fill: 'transparent' }), rects);
  });
  const first = parseTime(per[0] && per[0].minute);
  const last = parseTime(per[per.length - 1] && per[per.length - 1].minute);
  return h('figure', { class: 'chart-figure', testid: 'runs-chart' },
    svg('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': `Runs finished per minute over the last ${minutes} minutes: ${finished} in all, at most ${max === 1 && !finished ? 0 : max} in a minute` }, slots),
    h('figcaption', null,
      h('div', { class: 'chart-axis' }, h('span', { text: first ? localStamp(first).slice(11, 16) : '' }), h('span', { text: `runs finished per minute (max ${finished ? max : 0})` }), h('span', { text: last ? localStamp(last).slice(11, 16) : '' })),
      h('div', { class: 'legend' }, h('span', { class: 'l-ok', text: 'succeeded' }), h('span', { class: 'l-fail', text: 'failed' }), h('span', { class: 'l-other', text: 'other' }))));
}

function renderFailures(body, runs) {
  if (!runs.length) {
    replace(body, h('p', { class: 'muted', text: 'No failure in the window.' }));
    return;
  }
  replace(body, h('ul', { class: 'plain' }, runs.map((r) => h('li', null,
    h('a', { href: `#/runs/${enc(r.id)}`, text: `Run ${r.id}` }),
    badge(r.state),
    h('span', { class: 'grow' }, jobLink(r.job_id), r.message ? h('span', { class: 'muted', text: ` — ${r.message}` }) : null),
    timeEl(r.finished_at || r.created_at)))));
}

function renderLate(body, late, lateAfter) {
  if (!late.length) {
    replace(body, h('p', { class: 'muted', text: `No fire started more than ${fmtDuration(lateAfter ?? 60000)} late.` }));
    return;
  }
  replace(body, h('ul', { class: 'plain' }, late.map((l) => {
    const r = l.run || {};
    return h('li', null,
      h('a', { href: `#/runs/${enc(r.id)}`, text: `Run ${r.id}` }),
      h('span', { class: 'badge warn', text: `${fmtDuration(l.lateness_ms)} late` }),
      h('span', { class: 'grow' }, jobLink(r.job_id)),
      timeEl(r.scheduled_at));
  })));
}
