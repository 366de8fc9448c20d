// The portal's pages: log in, the experiment list (create from an uploaded ns / YAML file,
// on this host or the cluster; swap in / out, clean up, terminate), and an experiment's
// page: live topology, link panel (values in force, time series, change delay / bandwidth
// / loss / up-down), commands in a node and routing tables, modify, event log with a tevc
// form, consoles, flows and plot, captures, audit. Routing is by the URL's hash: #/ and #/exp/NAME.

import '@xterm/xterm/css/xterm.css';
import './style.css';
import { api, ApiError, setCsrf, wsUrl, enc } from './api.js';
import { buildGraph, applyLive, fmtRate } from './topology.js';
import { openConsole } from './console.js';

const $ = (sel, root = document) => root.querySelector(sel);
const main = () => $('#main');
let me = null;
let teardown = [];   // what the current page must close when we leave it

// The page's hooks for tests and the bench: the graph, the console, the live timings.
window.wanlab = { perf: [] };

function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

function flash(text, isError = true) {
  let f = $('#flash');
  if (!f) {
    f = h('div', { id: 'flash' });
    document.body.insertBefore(f, main());
  }
  f.className = isError ? 'flash error' : 'flash ok';
  f.textContent = text;
}

function when(t) { return t ? new Date(t * 1000).toLocaleTimeString() : ''; }

async function guard(fn) {
  try { return await fn(); } catch (e) {
    if (e instanceof ApiError && e.status === 401) { location.hash = '#/login'; return null; }
    flash(e.message);
    return null;
  }
}

// -- login ---------------------------------------------------------------------------
function loginPage() {
  const form = h('form', { id: 'login', class: 'card narrow' },
    h('h2', {}, 'Log in'),
    h('label', {}, 'User ', h('input', { name: 'user', id: 'user', autocomplete: 'username' })),
    h('label', {}, 'Password ', h('input', { name: 'password', id: 'password', type: 'password',
                                             autocomplete: 'current-password' })),
    h('button', { type: 'submit', id: 'login-button' }, 'Log in'),
    h('p', { class: 'hint' }, 'Accounts are made by root: wanlab portal user add NAME'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const r = await api('POST', '/login', { user: form.user.value,
                                               password: form.password.value });
      setCsrf(r.csrf);
      me = null;
      location.hash = '#/';
    } catch (e) { flash(e.message); }
  });
  main().replaceChildren(form);
}

// -- experiment list ------------------------------------------------------------------
async function listPage() {
  const exps = await guard(() => api('GET', '/experiments'));
  if (!exps) return;
  const rows = exps.map((x) => h('tr', { 'data-name': x.name },
    h('td', {}, h('a', { href: `#/exp/${enc(x.name)}` }, x.name)),
    h('td', { class: `state ${x.state}` }, x.state), h('td', {}, x.project || '—'),
    h('td', {}, x.owner), h('td', {}, `${x.nodes} nodes, ${x.links} links, ${x.lans} LANs`),
    h('td', {}, when(x.updated)), h('td', {}, ...opButtons(x.name, x.state, listPage))));
  const table = h('table', { id: 'experiments' },
    h('tr', {}, ...['experiment', 'state', 'project', 'owner', 'size', 'updated', ''].map(
      (t) => h('th', {}, t))), ...rows);
  main().replaceChildren(h('h2', {}, 'Experiments'),
    exps.length ? table : h('p', {}, 'No experiments you may see yet.'), createForm());
}

function opButtons(name, st, after) {
  const op = (what, label, confirmText) => h('button', { class: `op-${what}`,
    onclick: async () => {
      if (confirmText && !confirm(confirmText)) return;
      flash(`${label} ${name} ...`, false);
      const r = await guard(() => api('POST', `/experiments/${enc(name)}/${what}`));
      if (r) {
        flash(`${name}: ${label} done`, false);
        // terminated, or a cluster's cleaned up (forgotten): back to the list
        if (r.state === 'terminated' && location.hash !== '#/') location.hash = '#/';
        else after();
      }
    } }, label);
  const out = [];
  if (st === 'new' || st === 'swapped' || st === 'degraded') out.push(op('swapin', 'swap in'));
  if (st === 'active' || st === 'degraded') out.push(op('swapout', 'swap out'));
  out.push(op('cleanup', 'clean up', `Clean up ${name}? Everything recorded for it is `
    + 'removed (an experiment of this host is left swapped, one on the cluster is forgotten).'));
  out.push(op('terminate', 'terminate', `Terminate ${name}? Its record and folder go.`));
  return out;
}

function createForm() {
  const projects = Object.keys((me && me.projects) || {});
  const errors = h('pre', { id: 'spec-errors', class: 'spec-errors' });
  const text = h('textarea', { id: 'spec-text', rows: 14, spellcheck: 'false',
                               placeholder: 'paste an ns-2 script or YAML, or choose a file' });
  const filename = h('input', { id: 'spec-filename', value: 'experiment.tcl' });
  const file = h('input', { type: 'file', id: 'spec-file', accept: '.tcl,.ns,.yaml,.yml',
    onchange: async () => {
      const f = file.files[0];
      if (!f) return;
      filename.value = f.name;
      text.value = await f.text();
    } });
  // tarballs and .deb files the description names by file name (a project's stored
  // files it names as project:NAME): sent along, each as base64
  const attach = h('input', { type: 'file', id: 'spec-attach', multiple: true });
  const form = h('form', { id: 'create', class: 'card' },
    h('h3', {}, 'Create an experiment'),
    h('label', {}, 'Project ', h('select', { id: 'spec-project' },
      ...projects.map((p) => h('option', { value: p }, p)))),
    h('label', {}, 'File ', file), h('label', {}, 'File name ', filename),
    h('label', {}, 'Name (optional) ', h('input', { id: 'spec-name' })),
    h('label', {}, 'Files it names ', attach),
    h('label', { title: 'its nodes spread over the machines of the cluster (wanlab cluster up)' },
      h('input', { type: 'checkbox', id: 'spec-cluster' }), ' on the cluster'),
    text, errors,
    h('div', {},
      h('button', { type: 'button', id: 'spec-check', onclick: () => submit(true) }, 'Check'),
      h('button', { type: 'submit', id: 'spec-create' }, 'Create and swap in')));
  async function submit(checkOnly) {
    errors.textContent = '';
    text.classList.remove('bad');
    const body = { project: $('#spec-project').value, filename: filename.value,
                   text: text.value, name: $('#spec-name').value || null,
                   check_only: checkOnly, files: await attached(attach.files),
                   cluster: $('#spec-cluster').checked };
    flash(checkOnly ? 'checking ...' : 'creating (swap-in takes a few seconds) ...', false);
    try {
      const r = await api('POST', '/experiments', body);
      flash(`${r.name}: ${r.nodes} nodes, ${r.links} links, ${r.lans} LANs`
            + (checkOnly ? ' — parses' : ` — ${r.state}`), false);
      if (!checkOnly) location.hash = `#/exp/${enc(r.name)}`;
    } catch (e) {
      flash(e.message);
      if (e.body && e.body.line) showErrorLine(text, errors, e.body);
    }
  }
  form.addEventListener('submit', (ev) => { ev.preventDefault(); submit(false); });
  return form;
}

// Files chosen in an <input type=file> as {name: base64 of its bytes}.
async function attached(list) {
  const out = {};
  for (const f of list) {
    const bytes = new Uint8Array(await f.arrayBuffer());
    let bin = '';
    for (let i = 0; i < bytes.length; i += 0x8000) {
      bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
    }
    out[f.name] = btoa(bin);
  }
  return out;
}

// Show the parser's error at its line: the listing around it, and the line selected.
function showErrorLine(textarea, out, err) {
  const lines = textarea.value.split('\n');
  const n = err.line;
  const from = Math.max(1, n - 2);
  const to = Math.min(lines.length, n + 2);
  const listing = [];
  for (let i = from; i <= to; i++) {
    listing.push(`${i === n ? '>' : ' '}${String(i).padStart(4)} | ${lines[i - 1]}`);
  }
  out.textContent = `${err.file}:${n}: ${err.error}\n\n${listing.join('\n')}`;
  textarea.classList.add('bad');
  let start = 0;
  for (let i = 0; i < n - 1 && i < lines.length; i++) start += lines[i].length + 1;
  textarea.focus();
  textarea.setSelectionRange(start, start + (lines[n - 1] || '').length);
}

// -- an experiment -------------------------------------------------------------------
async function experimentPage(name) {
  const x = await guard(() => api('GET', `/experiments/${enc(name)}`));
  if (!x) return;
  const topo = x.topology;
  topo.uploads = x.uploads || [];   // files kept with it: traces and schedules to switch to
  const side = h('aside', { id: 'side', class: 'card' }, h('p', { class: 'hint' },
    'Click a link for its parameters and traffic, a node for its console.'));
  const graph = h('div', { id: 'cy' });
  const stateEl = h('span', { id: 'exp-state', class: `state ${x.state}` }, x.state);
  const events = h('tbody', { id: 'events' });
  const consoleBox = h('div', { id: 'console', class: 'console' });
  const consoleTitle = h('h3', { id: 'console-title' }, 'Console');
  main().replaceChildren(
    h('h2', {}, name, ' ', stateEl, ' ',
      h('small', {}, x.owner ? `project ${x.owner.project}, owner ${x.owner.owner}` : 'root')),
    h('div', { class: 'ops' }, ...opButtons(name, x.state, () => experimentPage(name))),
    x.error ? h('p', { class: 'flash error' }, x.error) : '',
    h('div', { class: 'live' }, graph, side),
    h('section', { class: 'card' }, consoleTitle,
      h('div', {}, 'Node ', h('select', { id: 'console-node' },
        ...topo.nodes.filter((n) => n.kind === 'emulated').map(
          (n) => h('option', { value: n.name }, n.name))),
        h('button', { id: 'console-open', onclick: () => startConsole($('#console-node').value) },
          'Open console')),
      consoleBox),
    nodeTools(name, topo),
    modifyForm(name),
    h('section', { class: 'card' }, h('h3', {}, 'Event log'), tevcForm(name, topo),
      h('table', { class: 'events' }, h('thead', {}, h('tr', {},
        ...['t (s)', 'origin', 'object', 'event', 'args', 'outcome', 'late (ms)', 'detail']
          .map((t) => h('th', {}, t)))), events)),
    h('section', { class: 'card', id: 'results' }, h('h3', {}, 'Flows, plots and captures'),
      h('div', { id: 'flows' }), h('div', { id: 'captures' })));

  const prev = new Map();
  const series = new Map();   // link -> [{t, ab, ba, drops, up}]
  const inForce = new Map();  // link or LAN -> its values in force (the live stream's)
  let selected = null;
  const cy = buildGraph(graph, topo, (sel) => {
    selected = sel;
    renderSide();
  });
  window.wanlab.cy = cy;
  window.wanlab.topology = topo;

  function renderSide() {
    if (!selected) return;
    if (selected.type === 'node') {
      const n = topo.nodes.find((m) => m.name === selected.name);
      side.replaceChildren(h('h3', {}, `node ${n.name}`),
        h('p', {}, `${n.kind} ${n.role}`), h('p', {}, n.addresses.join(', ')),
        n.kind === 'emulated' ? h('button', { id: 'node-console',
          onclick: () => startConsole(n.name) }, 'Open console') : '');
      return;
    }
    side.replaceChildren(...linkPanel(name, topo, selected, series.get(selected.name) || [],
                                      inForce.get(selected.name)));
  }

  let term = null;
  function startConsole(node) {
    if (term) term.close();
    consoleTitle.textContent = `Console: ${node}`;
    $('#console-node').value = node;
    term = openConsole(consoleBox, name, node);
    window.wanlab.console = term;
    consoleBox.scrollIntoView({ block: 'nearest' });
  }

  // the live stream: statistics, state and new events once a second
  const ws = new WebSocket(wsUrl(`/experiments/${enc(name)}/live`));
  ws.onmessage = (ev) => {
    const t0 = performance.now();
    const msg = JSON.parse(ev.data);
    stateEl.textContent = msg.state;
    stateEl.className = `state ${msg.state}`;
    const rates = applyLive(cy, topo, prev, msg);
    for (const [l, r] of Object.entries(rates)) {
      if (!r.ab || !r.ba) continue;
      const s = series.get(l) || [];
      s.push({ t: msg.now_ns / 1e9, ab: r.ab.bps, ba: r.ba.bps,
               drops: r.ab.dropsPerS + r.ba.dropsPerS, up: r.up });
      if (s.length > 300) s.shift();
      series.set(l, s);
    }
    for (const e of msg.events || []) events.prepend(eventRow(e));
    if (msg.in_force) {
      let redraw = false;
      for (const l of [...(msg.in_force.links || []), ...(msg.in_force.lans || [])]) {
        const text = JSON.stringify(l);
        if (selected && selected.name === l.name && JSON.stringify(inForce.get(l.name)) !== text) {
          redraw = true;
        }
        inForce.set(l.name, l);
      }
      // only the values shown change: the form (what the user may be typing) and the
      // buttons stay the same elements
      const box = $('#link-params');
      if (redraw && box && selected.type !== 'node') {
        box.replaceChildren(...linkParams(topo, selected, inForce.get(selected.name)));
      }
    }
    if (selected && selected.type !== 'node') {
      const canvas = $('#series');
      if (canvas) drawSeries(canvas, series.get(selected.name) || []);
      const st = $('#link-state');
      if (st && rates[selected.name]) st.textContent = rates[selected.name].up ? 'up' : 'down';
    }
    const applied = performance.now();
    requestAnimationFrame(() => {
      window.wanlab.perf.push({ apply_ms: applied - t0, frame_ms: performance.now() - t0,
                                server_at: msg.at, received: Date.now() / 1000 });
      if (window.wanlab.perf.length > 1000) window.wanlab.perf.shift();
    });
  };
  teardown.push(() => ws.close(), () => term && term.close(), () => cy.destroy());
  loadResults(name, topo);
}

// Run a command in a node (as `wanlab exec`) and each node's routing table (`wanlab routes`).
function nodeTools(name, topo) {
  const nodes = topo.nodes.filter((n) => n.kind === 'emulated').map((n) => n.name);
  const out = h('pre', { id: 'exec-output', class: 'output' });
  const form = h('form', { id: 'exec', class: 'inline' },
    'Node ', h('select', { id: 'exec-node' }, ...nodes.map((n) => h('option', { value: n }, n))),
    h('input', { id: 'exec-argv', placeholder: 'command and arguments (no shell)', size: 36 }),
    h('button', { type: 'submit', id: 'exec-run' }, 'run'),
    h('button', { type: 'button', id: 'routes-show', onclick: async () => {
      const r = await guard(() => api('GET', `/experiments/${enc(name)}/routes`));
      if (r) out.textContent = Object.entries(r).map(([n, t]) => `${n}:\n${t}`).join('\n');
    } }, 'routing tables'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const argv = $('#exec-argv').value.trim().split(/\s+/).filter(Boolean);
    if (!argv.length) return;
    out.textContent = `${$('#exec-node').value}$ ${argv.join(' ')} ...`;
    const r = await guard(() => api('POST', `/experiments/${enc(name)}/exec`,
                                    { node: $('#exec-node').value, argv }));
    if (r) out.textContent = r.stdout + r.stderr + `(exit ${r.code})`;
  });
  return h('section', { class: 'card', id: 'node-tools' }, h('h3', {}, 'Commands and routes'),
    form, out);
}

// Apply a changed description (as `wanlab modify`): only what differs changes.
function modifyForm(name) {
  const text = h('textarea', { id: 'modify-text', rows: 8, spellcheck: 'false',
                               placeholder: 'the changed ns-2 script or YAML, or choose a file' });
  const filename = h('input', { id: 'modify-filename', value: 'experiment.tcl' });
  const file = h('input', { type: 'file', id: 'modify-file', accept: '.tcl,.ns,.yaml,.yml',
    onchange: async () => {
      const f = file.files[0];
      if (!f) return;
      filename.value = f.name;
      text.value = await f.text();
    } });
  const attach = h('input', { type: 'file', id: 'modify-attach', multiple: true });
  const form = h('form', { id: 'modify', class: 'card' }, h('h3', {}, 'Modify'),
    h('label', {}, 'File ', file), h('label', {}, 'File name ', filename),
    h('label', {}, 'Files it names ', attach), text,
    h('div', {}, h('button', { type: 'submit', id: 'modify-apply' }, 'Apply the changes')));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    flash(`modifying ${name} ...`, false);
    const r = await guard(async () => api('POST', `/experiments/${enc(name)}/modify`, {
      filename: filename.value, text: text.value, files: await attached(attach.files) }));
    if (r) {
      // the page is rebuilt first: "done" shows once its buttons are the new page's
      await experimentPage(name);
      flash(`${name}: modify done`, false);
    }
  });
  return form;
}

function eventRow(e) {
  const args = Array.isArray(e.args) ? e.args.join(' ') : e.args;
  return h('tr', { class: e.outcome === 'ok' ? '' : 'bad' },
    h('td', {}, e.fired_s != null ? e.fired_s.toFixed(3) : e.scheduled_s.toFixed(3)),
    h('td', {}, e.origin), h('td', {}, e.target), h('td', {}, e.action), h('td', {}, args),
    h('td', {}, e.outcome),
    h('td', {}, e.lateness_s != null ? (1000 * e.lateness_s).toFixed(2) : ''),
    h('td', {}, e.detail || ''));
}

function tevcForm(name, topo) {
  const objects = [...topo.links.map((l) => l.name), ...topo.lans.map((l) => l.name),
                   ...topo.nodes.map((n) => n.name)];
  const form = h('form', { id: 'tevc', class: 'inline' },
    'tevc ', h('input', { id: 'tevc-time', value: 'now', size: 6, title: 'now, +S or S' }),
    h('input', { id: 'tevc-object', list: 'tevc-objects', placeholder: 'object', size: 12 }),
    h('datalist', { id: 'tevc-objects' }, ...objects.map((o) => h('option', { value: o }))),
    h('input', { id: 'tevc-event', placeholder: 'event (delay, down, start, ...)', size: 14 }),
    h('input', { id: 'tevc-args', placeholder: 'args', size: 16 }),
    h('button', { type: 'submit' }, 'send'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const args = $('#tevc-args').value.trim();
    const r = await guard(() => api('POST', `/experiments/${enc(name)}/tevc`, {
      time: $('#tevc-time').value, object: $('#tevc-object').value,
      event: $('#tevc-event').value, args: args ? args.split(/\s+/) : [] }));
    if (r) flash(`tevc: ${r.outcome || 'scheduled'} ${r.detail || ''}`, r.ok === false);
  });
  return form;
}

function fmtParams(p) {
  return `${p.bandwidth_bps ? fmtRate(p.bandwidth_bps) + 'b/s' : 'unlimited'}, `
    + `${(p.delay_s * 1000).toFixed(2)} ms, loss ${p.loss}, ${p.queue}`
    + (p.limit ? ` (${p.limit})` : '') + fmtImpair(p.impair);
}

// Values in force (as `wanlab show` prints them): each with the configured value where
// that differs.
function fmtInForce(p) {
  const cfg = p.configured || {};
  const bw = (v) => (v ? fmtRate(v) + 'b/s' : 'unlimited');
  const ms = (v) => `${(v * 1000).toFixed(2)} ms`;
  const was = (k, f) => (k in cfg ? ` (configured ${f(cfg[k])})` : '');
  return `${bw(p.bandwidth_bps)}${was('bandwidth_bps', bw)}, ${ms(p.delay_s)}`
    + `${was('delay_s', ms)}, loss ${p.loss}${was('loss', String)}${fmtImpair(p.impair)}`;
}

// netem's impairments, a trace and a schedule, as `wanlab show` words them
function fmtImpair(words) {
  return words && words.length ? `; ${words.join('; ')}` : '';
}

// A link's or LAN's values: those in force once the live stream gave them, else the
// description's.
function linkParams(topo, sel, now) {
  const l = sel.type === 'link' ? topo.links.find((k) => k.name === sel.name)
                                : topo.lans.find((k) => k.name === sel.name);
  return sel.type === 'link'
    ? [h('p', { class: 'link-ab' }, `${l.a} → ${l.b}: ${now ? fmtInForce(now.ab) : fmtParams(l.ab)}`),
       h('p', { class: 'link-ba' }, `${l.b} → ${l.a}: ${now ? fmtInForce(now.ba) : fmtParams(l.ba)}`)]
    : [h('p', {}, `members ${l.members.join(', ')}`),
       h('p', { class: 'link-ab' }, now ? fmtInForce(now)
         : `${l.bandwidth_bps ? fmtRate(l.bandwidth_bps) + 'b/s' : 'unlimited'}, `
           + `${(l.delay_s * 1000).toFixed(2)} ms, loss ${l.loss}`),
       now && now.varies ? h('p', {}, `differs between members: ${now.varies.join(', ')}`) : '',
       now && now.member_impair ? h('p', {}, 'each member receives: ' + Object.entries(
         now.member_impair).map(([m, w]) => `${m}: ${w.join(', ')}`).join('; ')) : ''];
}

function linkPanel(exp, topo, sel, series, now) {
  const last = series[series.length - 1];
  const params = linkParams(topo, sel, now);
  const change = async (body) => {
    for (const el of document.querySelectorAll('#link-form [aria-invalid]')) {
      el.removeAttribute('aria-invalid');
    }
    const r = await guard(async () => {
      try {
        return await api('POST', `/experiments/${enc(exp)}/links/${enc(sel.name)}`, body);
      } catch (e) {     // the server names the field it refused: mark it
        const el = e instanceof ApiError && e.body.field && $(`#link-${e.body.field}`);
        if (el) el.setAttribute('aria-invalid', 'true');
        throw e;
      }
    });
    if (r) flash(`${sel.name}: ${Object.entries(body).map(([k, v]) => `${k} ${v}`).join(', ')}`,
                 false);
  };
  // netem's words, as tevc takes them (docs/impairments.md); a link's one direction
  const link = sel.type === 'link' ? topo.links.find((k) => k.name === sel.name) : null;
  const fields = [['delay', 'e.g. 50ms', 8], ['bandwidth', 'e.g. 10Mb', 8],
    ['loss', 'e.g. 0.01, gemodel 1% 30%', 12], ['jitter', 'e.g. 5ms normal 25%', 12],
    ['duplicate', 'e.g. 1%', 6], ['corrupt', 'e.g. 0.1%', 6], ['reorder', 'e.g. 25% gap 5', 10]];
  const form = h('form', { id: 'link-form' },
    ...fields.map(([k, hint, size]) => h('label', {}, `${k} `,
      h('input', { id: `link-${k}`, placeholder: hint, size }))),
    // a capacity trace or a schedule: one of the files uploaded with the experiment
    h('label', {}, 'capacity ', h('select', { id: 'link-trace' },
      h('option', { value: '' }, 'unchanged'),
      h('option', { value: 'fixed' }, 'fixed rate (bandwidth)'),
      ...topo.uploads.map((f) => h('option', { value: f }, `trace ${f}`))),
    h('input', { id: 'link-trace-opts', placeholder: 'offset, noloop', size: 10 })),
    h('label', {}, 'schedule ', h('select', { id: 'link-schedule' },
      h('option', { value: '' }, 'unchanged'),
      h('option', { value: 'none' }, 'none (end it)'),
      ...topo.uploads.map((f) => h('option', { value: f }, f))),
    h('input', { id: 'link-schedule-opts', placeholder: 'linear loop', size: 10 })),
    link ? h('label', {}, 'direction ', h('select', { id: 'link-dir' },
      h('option', { value: 'both' }, 'both'),
      h('option', { value: 'ab' }, `${link.a} → ${link.b}`),
      h('option', { value: 'ba' }, `${link.b} → ${link.a}`))) : '',
    h('button', { type: 'submit', id: 'link-apply' }, 'apply'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const body = {};
    for (const [k] of fields) {
      const v = $(`#link-${k}`).value.trim();
      if (v) body[k] = v;
    }
    const opts = (k) => $(`#link-${k}-opts`).value.trim();
    const trace = $('#link-trace').value;
    if (trace === 'fixed' && !body.bandwidth) {   // back to a fixed rate: which one
      $('#link-bandwidth').setAttribute('aria-invalid', 'true');
      flash('a fixed rate: give the bandwidth', true);
      return;
    }
    if (trace && trace !== 'fixed') body.trace = `${trace} ${opts('trace')}`.trim();
    const sched = $('#link-schedule').value;
    if (sched) body.schedule = sched === 'none' ? 'none' : `${sched} ${opts('schedule')}`.trim();
    const dir = $('#link-dir');
    if (Object.keys(body).length) change(dir && dir.value !== 'both' ? { ...body, dir: dir.value }
                                                                     : body);
  });
  const canvas = h('canvas', { id: 'series', width: 320, height: 140 });
  setTimeout(() => drawSeries(canvas, series), 0);
  return [h('h3', {}, `${sel.type} ${sel.name}`),
    h('p', {}, 'state: ', h('b', { id: 'link-state' }, last ? (last.up ? 'up' : 'down') : '?')),
    h('div', { id: 'link-params' }, ...params),
    canvas,
    h('p', { class: 'hint' }, 'throughput a→b (blue), b→a (green), drops/s (red)'),
    form,
    h('div', {}, h('button', { id: 'link-down', onclick: () => change({ state: 'down' }) },
                   'set down'),
      h('button', { id: 'link-up', onclick: () => change({ state: 'up' }) }, 'set up'),
      sel.type === 'link' ? h('button', { id: 'link-capture', onclick: async () => {
        const r = await guard(() => api('POST', `/experiments/${enc(exp)}/captures`,
                                        { link: sel.name }));
        if (r) { flash(`capturing into ${(r.files || [r.file]).join(', ')}`, false); loadResults(exp, topo); }
      } }, 'capture') : '')];
}

function drawSeries(canvas, s) {
  const g = canvas.getContext('2d');
  const W = canvas.width;
  const H = canvas.height;
  g.clearRect(0, 0, W, H);
  g.strokeStyle = '#ddd';
  g.strokeRect(0.5, 0.5, W - 1, H - 1);
  if (s.length < 2) return;
  const top = Math.max(1, ...s.map((p) => Math.max(p.ab, p.ba)));
  const dtop = Math.max(1, ...s.map((p) => p.drops));
  const x = (i) => (W - 4) * (i / (s.length - 1)) + 2;
  const line = (key, colour, scale) => {
    g.beginPath();
    g.strokeStyle = colour;
    s.forEach((p, i) => {
      const y = H - 14 - (H - 20) * (p[key] / scale);
      if (i === 0) g.moveTo(x(i), y); else g.lineTo(x(i), y);
    });
    g.stroke();
  };
  s.forEach((p, i) => { if (!p.up) { g.fillStyle = '#f3d0d0'; g.fillRect(x(i) - 2, 0, 4, H); } });
  line('ab', '#2a62b8', top);
  line('ba', '#2a9a4a', top);
  line('drops', '#c0302a', dtop);
  g.fillStyle = '#333';
  g.font = '10px sans-serif';
  g.fillText(`max ${fmtRate(top)}b/s`, 4, 10);
}

async function loadResults(name, topo) {
  const flows = await guard(() => api('GET', `/experiments/${enc(name)}/flows`));
  const box = $('#flows');
  if (flows && box) {
    box.replaceChildren(flows.length ? h('table', {},
      h('tr', {}, ...['agent', 'kind', 'started', 'stopped', 'result'].map((t) => h('th', {}, t))),
      ...flows.map((f) => h('tr', {}, h('td', {}, f.agent), h('td', {}, f.kind),
        h('td', {}, f.started_s.toFixed(2)), h('td', {}, f.stopped_s?.toFixed(2) ?? ''),
        h('td', {}, summarise(f.result))))) : h('p', {}, 'No flows yet.'),
      flows.length ? h('img', { src: `/api/experiments/${enc(name)}/plot`, class: 'plot',
                                alt: 'throughput of every flow' }) : '');
  }
  const caps = await guard(() => api('GET', `/experiments/${enc(name)}/captures`));
  const cbox = $('#captures');
  if (caps && cbox) {
    cbox.replaceChildren(h('h4', {}, 'Captures'), caps.length ? h('ul', {}, ...caps.map(
      (c) => h('li', {}, h('a', { href: `/api/experiments/${enc(name)}/captures/${c.file}`,
                                  download: true }, c.file), ` (${c.bytes} bytes)`)))
      : h('p', {}, 'None (select a link, then "capture").'),
      caps.length ? h('button', { onclick: async () => {
        await guard(() => api('POST', `/experiments/${enc(name)}/captures/stop`));
        loadResults(name, topo);
      } }, 'stop captures') : '');
  }
}

function summarise(r) {
  const keys = ['packets', 'bytes', 'lost', 'loss_ratio', 'owd_avg_us', 'throughput_bps',
                'mean_bps', 'retransmits'];
  const parts = keys.filter((k) => r[k] !== undefined).map((k) => `${k} ${r[k]}`);
  return parts.length ? parts.join(', ') : JSON.stringify(r).slice(0, 120);
}

// -- audit -----------------------------------------------------------------------------
async function auditPage() {
  const rows = await guard(() => api('GET', '/audit'));
  if (!rows) return;
  main().replaceChildren(h('h2', {}, 'Audit log'), h('table', { id: 'audit' },
    h('tr', {}, ...['when', 'user', 'action', 'project', 'experiment', 'detail'].map(
      (t) => h('th', {}, t))),
    ...rows.map((r) => h('tr', {}, h('td', {}, new Date(r.at * 1000).toLocaleString()),
      h('td', {}, r.user), h('td', {}, r.action), h('td', {}, r.project || ''),
      h('td', {}, r.experiment || ''), h('td', {}, r.detail)))));
}

// -- routing -----------------------------------------------------------------------------
async function route() {
  for (const f of teardown.splice(0)) { try { f(); } catch (e) { /* already gone */ } }
  const hash = location.hash || '#/';
  if (hash === '#/login') { $('#who').textContent = ''; loginPage(); return; }
  if (!me) {
    try {
      me = await api('GET', '/me');
      setCsrf(me.csrf);
    } catch (e) { location.hash = '#/login'; return; }
  }
  $('#who').replaceChildren(`${me.user}${me.admin ? ' (admin)' : ''} `,
    h('button', { id: 'logout', onclick: async () => {
      await api('POST', '/logout').catch(() => null);
      me = null;
      location.hash = '#/login';
    } }, 'log out'));
  $('#nav').replaceChildren(h('a', { href: '#/' }, 'experiments'), ' ',
                            h('a', { href: '#/audit' }, 'audit'));
  const m = hash.match(/^#\/exp\/([^/]+)$/);
  if (m) await experimentPage(decodeURIComponent(m[1]));
  else if (hash === '#/audit') await auditPage();
  else await listPage();
}

window.addEventListener('hashchange', route);
route();
