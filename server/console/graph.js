// A workflow's graph drawn in SVG: steps in layers (a step one layer right of the last step it
// needs), edges from each needed step to the step that needs it, styled by what it needs
// (success solid, failure dashed, always dotted). With states, each step is coloured by its
// state in a run; with a link, each step opens its run.

import { svg } from './dom.js';

const NODE_W = 150;
const NODE_H = 44;
const GAP_X = 70;
const GAP_Y = 22;

/** The layer of each step: 0 for a step that needs nothing. Cycles (never stored) stop at 0. */
function layers(steps) {
  const byName = new Map(steps.map((s) => [s.name, s]));
  const layer = new Map();
  const visiting = new Set();
  const of = (name) => {
    if (layer.has(name)) return layer.get(name);
    if (visiting.has(name) || !byName.has(name)) return 0;
    visiting.add(name);
    const needs = needsOf(byName.get(name));
    const l = needs.length ? 1 + Math.max(...needs.map((n) => of(n.step))) : 0;
    visiting.delete(name);
    layer.set(name, l);
    return l;
  };
  for (const s of steps) of(s.name);
  return layer;
}

/** A step's needs as `{step, on}` (the API writes a need on success as a bare name). */
export function needsOf(step) {
  return (step.needs || []).map((n) => (typeof n === 'string' ? { step: n, on: 'success' } : { step: n.step, on: n.on || 'success' }));
}

/**
 * The graph of `steps` ([{name, needs, state?, run_id?}]) as an <svg>; `href(step)` gives the
 * link of a step (or null). Every step is a `g.wf-step` with `data-step` and `data-state`.
 */
export function workflowGraph(steps, { href = () => null, label = 'Workflow graph' } = {}) {
  const layer = layers(steps);
  const columns = [];
  for (const s of steps) {
    const l = layer.get(s.name) || 0;
    (columns[l] = columns[l] || []).push(s);
  }
  const pos = new Map();
  columns.forEach((col, x) => col.forEach((s, y) => pos.set(s.name, { x: 10 + x * (NODE_W + GAP_X), y: 10 + y * (NODE_H + GAP_Y) })));
  const width = 20 + columns.length * (NODE_W + GAP_X) - GAP_X;
  const height = 20 + Math.max(...columns.map((c) => c.length)) * (NODE_H + GAP_Y) - GAP_Y;
  const edges = [];
  for (const s of steps) {
    const to = pos.get(s.name);
    for (const need of needsOf(s)) {
      const from = pos.get(need.step);
      if (!from) continue;
      const x1 = from.x + NODE_W;
      const y1 = from.y + NODE_H / 2;
      const x2 = to.x;
      const y2 = to.y + NODE_H / 2;
      const mid = (x1 + x2) / 2;
      edges.push(svg('path', {
        class: `wf-edge on-${need.on}`,
        d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2 - 6},${y2}`,
        'marker-end': 'url(#wf-arrow)',
        'data-from': need.step,
        'data-to': s.name,
      }, svg('title', null, `${s.name} needs ${need.step} (${need.on})`)));
    }
  }
  const nodes = steps.map((s) => {
    const p = pos.get(s.name);
    const state = s.state || 'defined';
    const box = [
      svg('rect', { x: p.x, y: p.y, width: NODE_W, height: NODE_H, rx: 6 }),
      svg('text', { x: p.x + 10, y: p.y + 18, class: 'wf-name' }, s.name.length > 20 ? `${s.name.slice(0, 19)}…` : s.name),
      s.state ? svg('text', { x: p.x + 10, y: p.y + 34, class: 'wf-state' }, s.state.replace(/_/g, ' ')) : null,
      svg('title', null, s.state ? `${s.name}: ${s.state}` : s.name),
    ];
    const link = href(s);
    const g = svg('g', { class: `wf-step st-${state}`, 'data-step': s.name, 'data-state': state }, link ? svg('a', { href: link }, box) : box);
    return g;
  });
  return svg('svg', {
    class: 'wf-graph',
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img',
    'aria-label': label,
    'data-testid': 'workflow-graph',
  },
  svg('defs', null, svg('marker', { id: 'wf-arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' },
    svg('path', { d: 'M0,0 L10,5 L0,10 z', class: 'wf-arrow' }))),
  edges, nodes);
}
