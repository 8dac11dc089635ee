// ordo's dashboard: reads the same JSON API as the `ordo` CLI with the token the user pasted
// (kept in sessionStorage, sent in the Authorization header). Every value from the server is
// put in the page as text (textContent, attributes), never parsed as HTML: job names are the
// submitters' words.
'use strict';

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem('ordo-token');
let me = null;
let timer = null;

/** An element with attributes and children (strings become text nodes). */
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === 'class') e.className = v;
    else if (k === 'onclick') e.addEventListener('click', v);
    else e.setAttribute(k, String(v));
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

async function api(path, method, body) {
  const r = await fetch(path, {
    method: method || 'GET',
    headers: { 'Authorization': 'Bearer ' + token, 'Content-Type': 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
    cache: 'no-store',
    credentials: 'omit',
  });
  const data = await r.json().catch(() => ({}));
  if (r.status === 401) {
    logout('The server refused the token: ' + (data.error || r.statusText));
    throw new Error('logged out');
  }
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}

function rel(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 172800) return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
  return Math.floor(s / 86400) + 'd' + String(Math.floor((s % 86400) / 3600)).padStart(2, '0') + 'h';
}

/** A job's id as users name it everywhere: `123_2` for element 2 of array 123. */
const jobId = (j) => j.array ? j.array.id + '_' + j.array.index : String(j.id);

const pct = (x) => (x === null || x === undefined) ? '-' : (Math.round(x * 10) / 10) + '%';
const gib = (mib) => (mib === null || mib === undefined) ? '' : (mib / 1024).toFixed(1) + ' GiB';

function fill(id, rows, empty) {
  const body = $(id).tBodies[0];
  body.replaceChildren(...rows);
  if (!rows.length) body.append(el('tr', {}, el('td', { colspan: 9, class: 'empty' }, empty)));
}

function card(label, value, alert) {
  return el('div', { class: 'card' + (alert ? ' alert' : '') }, el('b', {}, value), el('span', {}, label));
}

function renderSummary(q, g, nodes) {
  const up = g.gpus.filter((x) => x.up).length;
  const alloc = g.gpus.filter((x) => x.up && x.job !== null).length;
  const sampled = g.gpus.filter((x) => x.up && x.sample);
  const busy = sampled.reduce((a, x) => a + x.sample.util_pct / 100, 0);
  const idleGpus = g.gpus.filter((x) => x.idle).length;
  const pending = q.jobs.filter((j) => j.state === 'pending').length;
  const running = q.jobs.length - pending;
  const down = nodes.filter((n) => n.state !== 'up').length;
  const drained = nodes.filter((n) => n.state === 'up' && (n.drain || n.maint)).length;
  $('summary').replaceChildren(
    card('nodes down', down, down > 0),
    card('nodes taking no new work', drained, drained > 0),
    card('GPUs up', up),
    card('allocated', up ? pct(100 * alloc / up) : '-'),
    card('really busy' + (sampled.length < up ? ' (of ' + sampled.length + ' sampled)' : ''),
      sampled.length ? pct(100 * busy / (sampled.length || 1)) : '-'),
    card('allocated-but-idle GPUs', idleGpus, idleGpus > 0),
    card('running jobs', running),
    card('pending jobs', pending),
  );
}

function renderNodes(nodes, g) {
  const byNode = new Map();
  for (const x of g.gpus) {
    if (!byNode.has(x.node)) byNode.set(x.node, []);
    byNode.get(x.node).push(x);
  }
  const th = g.idle_threshold_pct;
  $('nodes').replaceChildren(...nodes.map((n) => {
    const cells = (byNode.get(n.name) || []).map((x) => {
      let cls = 'free';
      let label = '';
      if (!x.up) cls = 'down';
      else if (x.job !== null) {
        if (x.idle) cls = 'idle';
        else if (!x.sample) cls = 'nodata';
        else cls = x.sample.util_pct < th ? 'low' : 'busy';
      }
      if (x.sample) label = Math.round(x.sample.util_pct);
      const title = 'GPU ' + x.gpu + (x.job !== null ? ': job ' + x.job + ' (' + x.user + ')' : ': free') +
        (x.sample ? ', ' + pct(x.sample.util_pct) + ' busy' + (x.sample.mem_used_mib !== null ? ', ' + gib(x.sample.mem_used_mib) : '') +
          (x.sample.power_w !== null ? ', ' + Math.round(x.sample.power_w) + ' W' : '') : ', no activity sample') +
        (x.idle ? ', ALLOCATED-BUT-IDLE' : '');
      return el('span', { class: 'cell ' + cls, title, 'data-node': x.node, 'data-gpu': x.gpu, 'data-job': x.job }, label);
    });
    // What its GPUs are: model (fake or real), memory each, the node's features.
    const model = n.fake ? 'fake ' + (n.gpu_model || 'GPUs') : (n.gpu_model || 'GPU');
    const kind = [model, n.gpu_mem_mib ? gib(n.gpu_mem_mib) : null, (n.features || []).join(',') || null]
      .filter((x) => x).join(' · ');
    const state = n.status || (n.state === 'up' && n.drain ? 'drain' : n.state);
    // An admin's cordon or drain: by whom, why, until when.
    const maint = n.maint ? (n.maint.kind === 'cordon' ? 'cordoned' : 'drained') + ' by ' + n.maint.by + ': ' +
      n.maint.reason + (n.maint.deadline ? ' (jobs stopped at ' + new Date(n.maint.deadline).toISOString().slice(0, 19).replace('T', ' ') + ' UTC)' : '') : null;
    const why = [maint, n.drain ? 'its agent: ' + n.drain : null].filter((x) => x).join('; ');
    // A node that is down shows no busy figure: its last samples are not what it does now.
    const busy = n.state === 'up' && n.busy_pct !== null && n.busy_pct !== undefined ? pct(n.busy_pct) + ' busy' : '';
    return el('div', { class: 'node', 'data-node': n.name, 'data-state': state },
      el('span', { class: 'name', title: why }, el('b', {}, n.name), ' ', state, ' · ', el('span', { class: 'kind' }, kind)),
      el('span', { class: 'gpus' }, ...cells),
      el('span', { class: 'busy' }, busy),
      why ? el('span', { class: 'drain' }, 'takes no new work: ' + why) : null);
  }));
}

function renderIdle(g) {
  $('idle-rule').textContent = 'under ' + g.idle_threshold_pct + '% busy for ' + rel(g.idle_after_ms);
  fill('idle', g.idle.map((i) => el('tr', { 'data-job': i.job },
    el('td', {}, i.job), el('td', {}, i.user), el('td', {}, i.name),
    el('td', {}, (i.ranks || [i]).map((r) => r.node + ': ' + r.gpu_ids.join(',')).join('; ')),
    el('td', { class: 'num' }, pct(i.busy_pct)),
    el('td', {}, rel(Date.now() - i.idle_since) + ' ago'))), 'none');
}

function waitText(j) {
  return j.wait ? j.wait.text : '';
}

function startText(j) {
  const t = j.wait && j.wait.expected_start;
  if (!t) return '';
  return t <= Date.now() ? 'now' : 'in ' + rel(t - Date.now()) + ' (' + new Date(t).toLocaleString() + ')';
}

/** Acts on one job (`123` or an array's element `123_2`: that element alone), or, for
 *  `whole`, on every element of an array not ended, after asking. */
async function act(id, what, whole) {
  if (whole && !window.confirm(what[0].toUpperCase() + what.slice(1) + ' every element of array ' + id +
    ' that has not ended, running ones included?')) return;
  try {
    await api('/v1/jobs/' + encodeURIComponent(id) + '/' + what, 'POST', {});
    $('error').textContent = '';
  } catch (e) {
    $('error').textContent = what + ' ' + (whole ? 'array ' : 'job ') + id + ': ' + e.message;
  }
  refresh();
}

function renderQueue(q) {
  $('policy').textContent = 'policy ' + q.policy + ', in the order it will run them';
  const pending = q.jobs.filter((j) => j.state === 'pending');
  fill('queue', pending.map((j, i) => el('tr', { 'data-job': jobId(j) },
    el('td', { class: 'num' }, i + 1), el('td', {}, jobId(j)), el('td', {}, j.user), el('td', {}, j.name),
    el('td', { class: 'num' }, j.gpus), el('td', { class: 'why' }, waitText(j)), el('td', {}, startText(j)))), 'nothing waits');
  const mine = q.jobs.filter((j) => me && j.user === me.user);
  fill('mine', mine.map((j) => {
    const id = jobId(j);
    // Each button acts on this row's job alone (an element of an array: that element).
    const buttons = [el('button', { type: 'button', class: 'cancel', onclick: () => act(id, 'cancel') }, 'Cancel')];
    if (j.state === 'pending') {
      buttons.push(j.held_by
        ? el('button', { type: 'button', class: 'release', onclick: () => act(id, 'release') }, 'Release')
        : el('button', { type: 'button', class: 'hold', onclick: () => act(id, 'hold') }, 'Hold'));
    }
    if (j.array) {
      buttons.push(el('button', { type: 'button', class: 'cancel-array', onclick: () => act(j.array.id, 'cancel', true) },
        'Cancel array ' + j.array.id));
    }
    const details = j.state === 'pending' ? waitText(j) : 'on ' + runWhere(j);
    const busy = j.activity ? pct(j.activity.mean_busy_pct) + (j.activity.idle_flagged ? ' (idle)' : '') : '-';
    return el('tr', { 'data-job': id }, el('td', {}, id), el('td', {}, j.state), el('td', {}, j.name),
      el('td', { class: 'num' }, j.gpus), el('td', { class: 'num' }, busy), el('td', {}, details), el('td', {}, ...buttons));
  }), 'you have no running or pending jobs');
  // Admins: every running job.
  $('running-box').hidden = !(me && me.role === 'admin');
  const running = q.jobs.filter((j) => j.state !== 'pending');
  fill('running', running.map((j) => el('tr', { 'data-job': jobId(j) },
    el('td', {}, jobId(j)), el('td', {}, j.state), el('td', {}, j.user), el('td', {}, j.name),
    el('td', { class: 'num' }, j.gpus), el('td', {}, runWhere(j)),
    el('td', {}, j.start ? rel(Date.now() - j.start) : ''))), 'nothing runs');
}

/** Where a job runs: `node GPUs 0,1`, or each rank's node and GPUs. */
function runWhere(j) {
  if (j.ranks && j.ranks.length) return j.ranks.map((r) => r.node + ' GPUs ' + r.gpu_ids.join(',')).join('; ');
  return (j.node || '?') + ' GPUs ' + (j.gpu_ids || []).join(',');
}

function chart(id, u) {
  const W = 600, H = 220, L = 36, B = 22, T = 8;
  const s = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img' });
  const x0 = Date.now() - u.span_ms, x1 = Date.now();
  const X = (t) => L + (W - L - 8) * (t - x0) / (x1 - x0);
  const Y = (p) => T + (H - T - B) * (1 - p / 100);
  for (const p of [0, 50, 100]) {
    s.append(svg('line', { x1: L, x2: W - 8, y1: Y(p), y2: Y(p), class: 'axis' }));
    const t = svg('text', { x: 2, y: Y(p) + 4 });
    t.textContent = p + '%';
    s.append(t);
  }
  const lbl = svg('text', { x: L, y: H - 4 });
  lbl.textContent = rel(u.span_ms) + ' ago';
  s.append(lbl);
  const pts = u.points.filter((p) => p.gpus > 0);
  const series = [['alloc', (p) => 100 * p.allocated / p.gpus], ['busy', (p) => 100 * p.busy / p.gpus],
    ['idle', (p) => 100 * p.idle_allocated / p.gpus]];
  for (const [cls, f] of series) {
    const xy = pts.map((p) => X(p.t + u.resolution_ms / 2).toFixed(1) + ',' + Y(f(p)).toFixed(1));
    if (xy.length === 1) {
      const [cx, cy] = xy[0].split(',');
      s.append(svg('circle', { cx, cy, r: 3, class: cls }));
    } else if (xy.length > 1) s.append(svg('polyline', { points: xy.join(' '), class: cls }));
  }
  const last = pts[pts.length - 1];
  const legend = el('div', { class: 'legend' },
    el('span', { class: 'cell nodata' }), 'allocated ' + (last ? pct(100 * last.allocated / last.gpus) : '-'),
    el('span', { class: 'cell busy' }), 'busy ' + (last ? pct(100 * last.busy / last.gpus) : '-'),
    el('span', { class: 'cell idle' }), 'allocated-but-idle');
  $(id).replaceChildren(s, legend);
}

function shares(id, list) {
  const rows = list.map((u) => el('tr', {},
    el('td', {}, u.name),
    el('td', { class: 'num' }, u.gpu_hours.toFixed(1) + ' GPU-h'),
    el('td', { class: 'num' }, pct(100 * u.share)),
    el('td', {}, el('div', { class: 'bar', 'data-share': u.share }))));
  fill(id, rows, 'no GPU-hours yet');
  // Widths through the CSSOM (no inline style attribute, which the page's policy forbids).
  for (const b of $(id).querySelectorAll('.bar')) b.style.width = (100 * Number(b.dataset.share)).toFixed(1) + '%';
}

async function refresh() {
  if (!token) return;
  try {
    const [q, nodes, g, day, two, usage] = await Promise.all([
      api('/v1/jobs'), api('/v1/nodes'), api('/v1/gpus'),
      api('/v1/utilization?span=1d'), api('/v1/utilization?span=14d'), api('/v1/usage?span=14d'),
    ]);
    renderSummary(q, g, nodes);
    renderNodes(nodes, g);
    renderIdle(g);
    renderQueue(q);
    chart('chart-day', day);
    chart('chart-2w', two);
    shares('share-users', usage.users);
    // Groups are worth their own table only where some group has more than one user.
    const sameAsUsers = usage.groups.length === usage.users.length &&
      usage.groups.every((g) => usage.users.some((u) => u.name === g.name));
    $('share-groups-box').hidden = sameAsUsers;
    shares('share-groups', usage.groups);
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    document.body.dataset.loaded = 'yes';
  } catch (e) {
    if (token) $('error').textContent = e.message;
  }
}

function logout(why) {
  token = null;
  me = null;
  sessionStorage.removeItem('ordo-token');
  if (timer) clearInterval(timer);
  timer = null;
  $('app').hidden = true;
  $('logout').hidden = true;
  $('login-box').hidden = false;
  $('who').textContent = '';
  $('login-error').textContent = why || '';
  delete document.body.dataset.loaded;
}

async function login(t) {
  token = t;
  try {
    me = await api('/v1/whoami');
  } catch (e) {
    if (token) logout(e.message);
    return;
  }
  sessionStorage.setItem('ordo-token', token);
  $('who').textContent = me.user + ' (' + me.role + ')';
  $('login-box').hidden = true;
  $('app').hidden = false;
  $('logout').hidden = false;
  $('login-error').textContent = '';
  await refresh();
  timer = setInterval(refresh, 5000);
}

document.addEventListener('DOMContentLoaded', () => {
  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    $('token').value = '';
    if (t) login(t);
  });
  $('logout').addEventListener('click', () => logout(''));
  // Only now may the form be sent (the page leaves the button disabled until the script runs).
  document.querySelector('#login button').disabled = false;
  if (token) login(token);
});
