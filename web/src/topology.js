// The live topology: cytoscape.js over the experiment's nodes, links and LANs.
// Nodes are shaped by kind (emulated / simulated) and role (router / host); each link is
// coloured and sized by its utilisation in the last interval (the busier direction), drawn
// red-dashed while it drops frames, and grey-dotted with "down" while it is down.

import cytoscape from 'cytoscape';

const SHAPES = {
  'emulated-router': 'round-rectangle', 'emulated-host': 'ellipse',
  'simulated-router': 'round-hexagon', 'simulated-host': 'round-diamond',
};

export function utilColour(u) {
  // green (idle) -> yellow -> red (saturated)
  const x = Math.max(0, Math.min(1, u));
  const r = Math.round(x < 0.5 ? 60 + 390 * x : 255);
  const g = Math.round(x < 0.5 ? 170 : 170 - 300 * (x - 0.5));
  return `rgb(${r},${Math.max(g, 20)},60)`;
}

export function fmtRate(bps) {
  if (!bps) return '0';
  const u = [['G', 1e9], ['M', 1e6], ['k', 1e3]];
  for (const [s, v] of u) if (bps >= v) return `${(bps / v).toFixed(bps >= 10 * v ? 0 : 1)}${s}`;
  return `${Math.round(bps)}`;
}

export function buildGraph(container, topo, onSelect) {
  const els = [];
  for (const n of topo.nodes) {
    els.push({ data: { id: `n:${n.name}`, label: n.name, kind: n.kind, role: n.role,
                       shape: SHAPES[`${n.kind}-${n.role}`] || 'ellipse', obj: n.name,
                       type: 'node' } });
  }
  for (const lan of topo.lans) {
    els.push({ data: { id: `n:${lan.name}`, label: lan.name, kind: 'lan', shape: 'diamond',
                       obj: lan.name, type: 'lan' } });
    for (const m of lan.members) {
      els.push({ data: { id: `e:${lan.name}:${m}`, source: `n:${m}`, target: `n:${lan.name}`,
                         obj: lan.name, member: m, type: 'lan', label: '', colour: '#7a8',
                         width: 2, style: 'solid' } });
    }
  }
  for (const l of topo.links) {
    els.push({ data: { id: `e:${l.name}`, source: `n:${l.a}`, target: `n:${l.b}`, obj: l.name,
                       type: 'link', label: l.name, colour: '#7a8', width: 3, style: 'solid' } });
  }
  const big = els.length > 300;
  const cy = cytoscape({
    container, elements: els, wheelSensitivity: 0.3, minZoom: 0.05, maxZoom: 4,
    // a big graph: one device pixel per CSS pixel, a cached texture while panning
    pixelRatio: big ? 1 : 'auto', textureOnViewport: big, hideEdgesOnViewport: big,
    layout: topo.nodes.length > 60 ? { name: 'grid', padding: 30 }
      : { name: 'cose', animate: false, padding: 30, idealEdgeLength: () => 140,
          nodeRepulsion: () => 400000, randomize: false },
    style: [
      { selector: 'node', style: {
        label: 'data(label)', shape: 'data(shape)', 'font-size': 11, 'text-valign': 'bottom',
        'min-zoomed-font-size': 7,
        'text-margin-y': 4, width: 30, height: 30, 'background-color': '#3b6ea8',
        'border-width': 2, 'border-color': '#1d3f66' } },
      { selector: 'node[kind = "simulated"]', style: { 'background-color': '#9a6fc0',
                                                    'border-color': '#5b3b7a' } },
      { selector: 'node[role = "router"]', style: { width: 38, height: 30 } },
      { selector: 'node[kind = "lan"]', style: { 'background-color': '#cfa43a', width: 22,
                                               height: 22 } },
      { selector: 'edge', style: {
        width: 'data(width)', 'line-color': 'data(colour)', 'line-style': 'data(style)',
        label: 'data(label)', 'font-size': 10, 'text-background-color': '#fff',
        'text-background-opacity': 0.8, 'text-background-padding': 2,
        'min-zoomed-font-size': 7,
        // straight lines drawn in bulk for a big graph; bezier (parallel links apart) else
        'curve-style': big ? 'haystack' : 'bezier', 'haystack-radius': 0 } },
      { selector: 'edge[?down]', style: { 'line-color': '#999', 'line-style': 'dotted',
                                         color: '#b00' } },
      { selector: ':selected', style: { 'overlay-color': '#2a7de1', 'overlay-opacity': 0.25,
                                        'overlay-padding': 6 } },
    ],
  });
  cy.scratch('wanlabBig', big);
  if (cy.zoom() > 1.4) {       // a small experiment: do not blow three nodes up to the page
    cy.zoom(1.4);
    cy.center();
  }
  cy.on('tap', 'edge', (ev) => onSelect({ type: ev.target.data('type'),
                                          name: ev.target.data('obj') }));
  cy.on('tap', 'node', (ev) => onSelect({ type: ev.target.data('type'),
                                          name: ev.target.data('obj') }));
  return cy;
}

// Counters -> per-interval rates. `prev` holds the last sample's counters by key.
function rate(prev, key, now, c) {
  const p = prev.get(key);
  prev.set(key, { t: now, c });
  if (!p || now <= p.t) return null;
  const dt = now - p.t;
  const drops = (x) => x.drop_queue + x.drop_loss + x.drop_down;
  return { bps: (8 * (c.out_bytes - p.c.out_bytes)) / dt,
           dropsPerS: (drops(c) - drops(p.c)) / dt, inPps: (c.in_pkts - p.c.in_pkts) / dt };
}

// Apply one live message to the graph; returns {links: {name: {ab, ba, up}}} rates for the
// side panel's time series.
export function applyLive(cy, topo, prev, msg) {
  const now = (msg.now_ns || 0) / 1e9;
  const out = {};
  const bw = new Map(topo.links.map((l) => [l.name, l]));
  const big = cy.scratch('wanlabBig');   // labels without rates: no text to re-lay out
  cy.batch(() => {
    for (const [name, s] of Object.entries(msg.links || {})) {
      const l = bw.get(name);
      const ab = rate(prev, `${name}/ab`, now, s.ab);
      const ba = rate(prev, `${name}/ba`, now, s.ba);
      out[name] = { ab, ba, up: s.up };
      const e = cy.getElementById(`e:${name}`);
      if (e.empty()) continue;
      if (!ab || !ba) { e.data({ down: !s.up, label: s.up ? name : `${name} (down)` }); continue; }
      const uAb = l && l.ab.bandwidth_bps ? ab.bps / l.ab.bandwidth_bps : ab.bps / 1e9;
      const uBa = l && l.ba.bandwidth_bps ? ba.bps / l.ba.bandwidth_bps : ba.bps / 1e9;
      const u = Math.max(uAb, uBa);
      const drops = ab.dropsPerS + ba.dropsPerS;
      const q = Math.round(20 * Math.min(1, u)) / 20;    // 5 % steps: fewer restyles
      const next = {
        down: !s.up, width: 2 + 10 * q, colour: utilColour(q),
        style: drops > 0 && s.up ? 'dashed' : 'solid',
        label: !s.up ? `${name} (down)` : big ? name
          : `${name} ${fmtRate(Math.max(ab.bps, ba.bps))}` + (drops > 0 ? ` ✕${drops.toFixed(0)}/s` : ''),
      };
      const old = e.data();
      if (Object.keys(next).some((k) => old[k] !== next[k])) e.data(next);
    }
  });
  return out;
}
