/**
 * The dashboard: one self-contained HTML page (inline CSS and script, no CDN, no framework) served
 * at `GET /dashboard` on a router's admin port. It carries no data: it reads the admin token from
 * `#token=…` in its URL (then keeps it in sessionStorage and drops it from the address bar) or from
 * its password field, connects to the live stream (`/admin/v1/live`, subprotocols
 * `quotaring, bearer.<token>`) and redraws on every snapshot: ring, nodes, busiest tenants with a
 * bar per limit, fair shares (each node's table of each fair-shared deployment: demand, share and
 * used per tenant and kind, units per minute), hot tenants, events. It reconnects with backoff
 * (0.5 s doubling to 10 s).
 *
 * Stable hooks for tests: `#status` (text `live` while connected and updated), `#ring-version`,
 * `#ring-members`, `#router`, `#updated` (snapshots received), `[data-node="<id>"]` (with
 * `data-up`), `[data-tenant="<id>"]` (with `data-tenant-node`), `#shares` (rows
 * `[data-share="<deployment>"]` with `data-share-node`, `data-share-tenant`, `data-share-kind`),
 * `#hot`, `#events`.
 *
 * Kept in a TS module (not a .html file) because the build (tsc) copies only compiled sources.
 * Written as String.raw so the script's backslashes survive; it must contain no backtick and no
 * dollar-brace.
 */
export const DASHBOARD_HTML = String.raw`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>quotaring · live</title>
<style>
  :root { --bg:#0f1419; --panel:#171d24; --line:#26303b; --text:#d8dee6; --dim:#8a96a3; --ok:#3fb950; --warn:#d29922; --bad:#f85149; --acc:#58a6ff; --mono: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
  * { box-sizing: border-box; }
  body { margin:0; background:var(--bg); color:var(--text); font: 14px/1.4 system-ui, -apple-system, Segoe UI, Roboto, sans-serif; }
  header { display:flex; flex-wrap:wrap; align-items:center; gap:18px; padding:12px 20px; border-bottom:1px solid var(--line); background:var(--panel); position:sticky; top:0; z-index:1; }
  header h1 { font-size:17px; margin:0; letter-spacing:.5px; }
  header .kv { color:var(--dim); } header .kv b { color:var(--text); font-family:var(--mono); font-weight:600; }
  #status { padding:2px 10px; border-radius:10px; font-weight:600; font-size:12px; background:var(--line); }
  #status.ok { background:rgba(63,185,80,.18); color:var(--ok); } #status.warn { background:rgba(210,153,34,.18); color:var(--warn); } #status.bad { background:rgba(248,81,73,.18); color:var(--bad); }
  main { padding:16px 20px; display:grid; gap:16px; grid-template-columns: minmax(0,2fr) minmax(280px,1fr); }
  section { background:var(--panel); border:1px solid var(--line); border-radius:8px; padding:12px 14px; min-width:0; }
  section h2 { font-size:12px; text-transform:uppercase; letter-spacing:1px; color:var(--dim); margin:0 0 10px; font-weight:600; }
  .wide { grid-column: 1 / -1; }
  #auth { display:none; gap:8px; align-items:center; } #auth.show { display:flex; }
  #auth input { background:var(--bg); color:var(--text); border:1px solid var(--line); border-radius:6px; padding:5px 8px; width:240px; }
  #auth button { background:var(--acc); color:#000; border:0; border-radius:6px; padding:6px 12px; font-weight:600; cursor:pointer; }
  #auth-msg { color:var(--bad); font-size:12px; }
  #nodes { display:grid; gap:10px; grid-template-columns: repeat(auto-fill, minmax(190px,1fr)); }
  .node { border:1px solid var(--line); border-left:4px solid var(--ok); border-radius:6px; padding:8px 10px; }
  .node.down { border-left-color:var(--bad); opacity:.75; }
  .node .id { font-family:var(--mono); font-weight:700; display:flex; gap:6px; align-items:center; flex-wrap:wrap; }
  .node dl { display:grid; grid-template-columns:auto auto; gap:2px 10px; margin:6px 0 0; font-size:13px; }
  .node dt { color:var(--dim); } .node dd { margin:0; text-align:right; font-family:var(--mono); }
  .badge { font-size:11px; padding:0 6px; border-radius:8px; font-weight:600; font-family:system-ui, sans-serif; }
  .b-up { background:rgba(63,185,80,.18); color:var(--ok); } .b-down { background:rgba(248,81,73,.18); color:var(--bad); }
  .b-fb { background:rgba(210,153,34,.2); color:var(--warn); } .b-ring { background:rgba(88,166,255,.18); color:var(--acc); }
  table { width:100%; border-collapse:collapse; }
  th { text-align:left; color:var(--dim); font-weight:600; font-size:12px; padding:4px 6px; border-bottom:1px solid var(--line); }
  td { padding:6px; border-bottom:1px solid var(--line); vertical-align:top; }
  td.num { text-align:right; font-family:var(--mono); white-space:nowrap; }
  td.name { font-family:var(--mono); font-weight:600; }
  .refused { color:var(--bad); font-weight:700; }
  .limit { display:grid; grid-template-columns: 130px minmax(60px,1fr) max-content; gap:8px; align-items:center; font-size:12px; margin:2px 0; }
  .limit .lname { color:var(--dim); font-family:var(--mono); overflow:hidden; text-overflow:ellipsis; white-space:nowrap; }
  .limit .lval { font-family:var(--mono); text-align:right; white-space:nowrap; }
  .bar { height:8px; background:var(--line); border-radius:4px; overflow:hidden; }
  .bar > span { display:block; height:100%; background:var(--ok); }
  .bar.mid > span { background:var(--warn); } .bar.low > span { background:var(--bad); }
  .empty { color:var(--dim); font-style:italic; }
  #hot li, #events li { list-style:none; padding:4px 0; border-bottom:1px solid var(--line); }
  #hot, #events { margin:0; padding:0; }
  #hot .badge { margin-left:8px; }
  #events { max-height:360px; overflow:auto; font-size:13px; }
  #events time { color:var(--dim); font-family:var(--mono); margin-right:8px; }
  .kind { font-family:var(--mono); font-size:11px; padding:0 5px; border-radius:4px; margin-right:6px; background:var(--line); }
  .k-node_down, .k-fallback_entered { color:var(--bad); } .k-node_up, .k-fallback_left, .k-tenant_cooled { color:var(--ok); } .k-tenant_hot { color:var(--warn); } .k-ring_changed { color:var(--acc); }
  #chart { width:100%; height:110px; display:block; }
  .legend { display:flex; gap:16px; font-size:12px; color:var(--dim); margin-top:4px; }
  .legend b { font-family:var(--mono); color:var(--text); }
  .sw { display:inline-block; width:10px; height:3px; vertical-align:middle; margin-right:4px; }
  @media (max-width: 900px) { main { grid-template-columns: 1fr; } }
</style>
</head>
<body>
<header>
  <h1>quotaring · live</h1>
  <span id="status" class="warn">connecting</span>
  <span class="kv">router <b id="router">–</b></span>
  <span class="kv">ring <b id="ring-version">–</b></span>
  <span class="kv">members <b id="ring-members">–</b></span>
  <span class="kv">snapshots <b id="updated">0</b></span>
  <span class="kv">at <b id="updated-at">–</b></span>
  <form id="auth" autocomplete="off">
    <input id="token-input" type="password" placeholder="admin token" aria-label="admin token">
    <button type="submit">Connect</button>
    <span id="auth-msg"></span>
  </form>
</header>
<main>
  <section class="wide">
    <h2>Cluster: requests per second</h2>
    <svg id="chart" viewBox="0 0 600 110" preserveAspectRatio="none" role="img" aria-label="admitted and refused requests per second"></svg>
    <div class="legend"><span><span class="sw" style="background:var(--ok)"></span>admitted/s <b id="total-admitted">0</b></span><span><span class="sw" style="background:var(--bad)"></span>429/s <b id="total-refused">0</b></span><span>in flight <b id="total-inflight">0</b></span><span>queued <b id="total-queued">0</b></span><span>chart top <b id="chart-max">1</b>/s</span></div>
  </section>
  <section class="wide">
    <h2>Nodes</h2>
    <div id="nodes"><span class="empty">waiting for the first snapshot…</span></div>
  </section>
  <section>
    <h2>Busiest tenants</h2>
    <table>
      <thead><tr><th>tenant</th><th>node</th><th style="text-align:right">admitted/s</th><th style="text-align:right">429/s</th><th style="text-align:right">queued</th><th>limits (remaining / limit)</th></tr></thead>
      <tbody id="tenants"><tr><td colspan="6" class="empty">no traffic</td></tr></tbody>
    </table>
  </section>
  <div style="display:grid; gap:16px; align-content:start; min-width:0">
    <section>
      <h2>Hot tenants (spread)</h2>
      <ul id="hot"><li class="empty">none</li></ul>
    </section>
    <section>
      <h2>Events</h2>
      <ul id="events"><li class="empty">none yet</li></ul>
    </section>
  </div>
  <section class="wide">
    <h2>Fair shares (units per minute; used above share in red)</h2>
    <table>
      <thead><tr><th>deployment</th><th>node</th><th>tenant</th><th>kind</th><th style="text-align:right">demand</th><th style="text-align:right">share</th><th style="text-align:right">used</th></tr></thead>
      <tbody id="shares"><tr><td colspan="7" class="empty">no fair-shared deployment</td></tr></tbody>
    </table>
  </section>
</main>
<script>
(function () {
  'use strict';
  var KEY = 'quotaring-admin-token';
  var HISTORY = 120;
  var $ = function (id) { return document.getElementById(id); };
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) for (var k in attrs) {
      if (attrs[k] === undefined || attrs[k] === null) continue;
      if (k === 'text') e.textContent = attrs[k];
      else if (k === 'cls') e.className = attrs[k];
      else e.setAttribute(k, attrs[k]);
    }
    for (var i = 2; i < arguments.length; i++) if (arguments[i] !== null && arguments[i] !== undefined) e.appendChild(arguments[i]);
    return e;
  }
  function rate(n) { return n >= 100 ? Math.round(n).toLocaleString() : (Math.round(n * 10) / 10).toString(); }
  function num(n) { return Math.round(n).toLocaleString(); }
  function clock(ms) { var d = new Date(ms); return d.toLocaleTimeString([], { hour12: false }); }

  function readToken() {
    var m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      var t = decodeURIComponent(m[1]);
      try { sessionStorage.setItem(KEY, t); } catch (e) { /* private mode */ }
      history.replaceState(null, '', location.pathname + location.search);
      return t;
    }
    try { return sessionStorage.getItem(KEY) || ''; } catch (e) { return ''; }
  }

  var token = readToken();
  var ws = null, retry = 0, retryTimer = null, lastMessage = 0, count = 0;
  var events = [], series = [];

  function setStatus(text, cls) { var s = $('status'); s.textContent = text; s.className = cls; }
  function showAuth(msg) { $('auth').className = 'show'; $('auth-msg').textContent = msg || ''; }
  function hideAuth() { $('auth').className = ''; $('auth-msg').textContent = ''; }

  $('auth').addEventListener('submit', function (ev) {
    ev.preventDefault();
    token = $('token-input').value.trim();
    try { sessionStorage.setItem(KEY, token); } catch (e) { /* private mode */ }
    retry = 0;
    clearTimeout(retryTimer);
    if (ws) { var old = ws; ws = null; old.close(); }
    connect();
  });

  function connect() {
    if (!token) { setStatus('token needed', 'warn'); showAuth('Enter the admin token (the value of QUOTARING_ADMIN_TOKEN) or open /dashboard#token=…'); return; }
    var url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/admin/v1/live';
    var sock;
    try { sock = new WebSocket(url, ['quotaring', 'bearer.' + token]); }
    catch (e) { setStatus('token unusable', 'bad'); showAuth('This token has characters a WebSocket subprotocol cannot carry (use letters, digits and -._~).'); return; }
    ws = sock;
    var opened = false, gotFirst = false;
    setStatus(retry > 0 ? 'reconnecting' : 'connecting', 'warn');
    sock.onopen = function () { opened = true; retry = 0; hideAuth(); setStatus('live', 'ok'); lastMessage = Date.now(); };
    sock.onmessage = function (m) {
      var s;
      try { s = JSON.parse(m.data); } catch (e) { return; }
      if (!s || s.type !== 'snapshot') return;
      lastMessage = Date.now();
      if ($('status').textContent !== 'live') setStatus('live', 'ok');
      render(s, !gotFirst);
      gotFirst = true;
    };
    sock.onclose = function () {
      if (ws !== sock) return;
      ws = null;
      if (opened) { later(); return; }
      // The browser hides why a handshake failed: ask a plain admin route whether the token is refused.
      fetch('/admin/v1/ring', { headers: { authorization: 'Bearer ' + token }, cache: 'no-store' }).then(function (r) {
        if (r.status === 401) { setStatus('token refused', 'bad'); showAuth('The router refused this admin token.'); }
        else later();
      }, function () { later(); });
    };
  }

  function later() {
    var delay = Math.min(10000, 500 * Math.pow(2, retry++));
    setStatus('reconnecting in ' + Math.ceil(delay / 1000) + ' s', 'warn');
    clearTimeout(retryTimer);
    retryTimer = setTimeout(connect, delay);
  }

  setInterval(function () {
    if (ws && ws.readyState === 1 && lastMessage > 0 && Date.now() - lastMessage > 5000) setStatus('stale: no update for ' + Math.round((Date.now() - lastMessage) / 1000) + ' s', 'warn');
  }, 1000);

  function replace(container, children, empty) {
    while (container.firstChild) container.removeChild(container.firstChild);
    if (children.length === 0 && empty) container.appendChild(empty);
    for (var i = 0; i < children.length; i++) container.appendChild(children[i]);
  }

  function nodeCard(n, ringVersion) {
    var l = n.levels;
    var id = el('div', { cls: 'id' }, el('span', { text: n.id }), el('span', { cls: 'badge ' + (n.up ? 'b-up' : 'b-down'), text: n.up ? 'up' : 'down' }));
    if (l && l.fallback) id.appendChild(el('span', { cls: 'badge b-fb', text: 'fallback', title: 'deciding from local fallback shares: Redis unreachable' }));
    if (l && l.ring !== null && l.ring !== ringVersion) id.appendChild(el('span', { cls: 'badge b-ring', text: 'ring ' + l.ring, title: 'this node sees another ring version' }));
    var card = el('div', { cls: 'node' + (n.up ? '' : ' down'), 'data-node': n.id, 'data-up': String(n.up), title: n.url }, id);
    if (l) {
      card.appendChild(el('dl', null,
        el('dt', { text: 'in flight' }), el('dd', { 'data-field': 'inFlight', text: num(l.inFlight) }),
        el('dt', { text: 'admitted/s' }), el('dd', { 'data-field': 'admittedPerSec', text: rate(l.admittedPerSec) }),
        el('dt', { text: '429/s' }), el('dd', { 'data-field': 'refusedPerSec', cls: l.refusedPerSec > 0 ? 'refused' : null, text: rate(l.refusedPerSec) }),
        el('dt', { text: 'queued' }), el('dd', { 'data-field': 'queued', text: num(l.queued) })));
    } else {
      card.appendChild(el('div', { cls: 'empty', text: 'no answer to the last poll' }));
    }
    return card;
  }

  function limitRow(lim) {
    var frac = lim.limit > 0 ? Math.max(0, Math.min(1, lim.remaining / lim.limit)) : 0;
    var bar = el('div', { cls: 'bar' + (frac < 0.15 ? ' low' : frac < 0.5 ? ' mid' : '') }, el('span', { style: 'width:' + (frac * 100).toFixed(1) + '%' }));
    var reset = lim.resetMs > 0 ? ' · ' + (lim.resetMs >= 1000 ? Math.ceil(lim.resetMs / 1000) + 's' : lim.resetMs + 'ms') : '';
    return el('div', { cls: 'limit', 'data-limit': lim.name, title: lim.kind + ': ' + lim.remaining + ' of ' + lim.limit + ' left' + reset },
      el('span', { cls: 'lname', text: lim.name }), bar, el('span', { cls: 'lval', text: num(lim.remaining) + ' / ' + num(lim.limit) }));
  }

  function tenantRow(t) {
    var limits = el('td');
    if (t.limits.length === 0) limits.appendChild(el('span', { cls: 'empty', text: 'decided elsewhere' }));
    for (var i = 0; i < t.limits.length; i++) limits.appendChild(limitRow(t.limits[i]));
    return el('tr', { 'data-tenant': t.tenant, 'data-tenant-node': t.node },
      el('td', { cls: 'name', text: t.tenant }),
      el('td', { cls: 'name', text: t.node }),
      el('td', { cls: 'num', text: rate(t.admittedPerSec) }),
      el('td', { cls: 'num' + (t.refusedPerSec > 0 ? ' refused' : ''), 'data-field': 'refusedPerSec', text: rate(t.refusedPerSec) }),
      el('td', { cls: 'num', text: num(t.queued) }),
      limits);
  }

  // One row per node, fair-shared deployment, tenant and bucket kind; a tenant over its share in red.
  function shareRows(nodes) {
    var rows = [];
    for (var i = 0; i < nodes.length; i++) {
      var l = nodes[i].levels;
      if (!l || !l.shares) continue;
      for (var j = 0; j < l.shares.length; j++) {
        var d = l.shares[j];
        for (var k = 0; k < d.tenants.length; k++) {
          var t = d.tenants[k];
          for (var m = 0; m < t.kinds.length; m++) {
            var x = t.kinds[m];
            rows.push(el('tr', { 'data-share': d.deployment, 'data-share-node': nodes[i].id, 'data-share-tenant': t.tenant, 'data-share-kind': x.kind },
              el('td', { cls: 'name', text: d.deployment, title: (d.source === 'cluster' ? 'from ' + d.nodes + ' node report(s)' : 'local: this node alone (no fresh exchange)') + ', reserve ' + Math.round(d.reserve * 100) + '%' }),
              el('td', { cls: 'name', text: nodes[i].id }),
              el('td', { cls: 'name', text: t.tenant }),
              el('td', { text: x.kind }),
              el('td', { cls: 'num', 'data-field': 'demand', text: rate(x.demand) }),
              el('td', { cls: 'num', 'data-field': 'share', text: rate(x.share) }),
              el('td', { cls: 'num' + (x.used > x.share ? ' refused' : ''), 'data-field': 'used', text: rate(x.used) })));
          }
        }
        if (d.omitted > 0) rows.push(el('tr', null, el('td', { colspan: '7', cls: 'empty', text: d.deployment + ' on ' + nodes[i].id + ': ' + d.omitted + ' more tenant(s)' })));
      }
    }
    return rows;
  }

  function drawChart() {
    var svg = $('chart');
    var max = 1;
    for (var i = 0; i < series.length; i++) max = Math.max(max, series[i].a, series[i].r);
    function line(key, color) {
      var pts = [];
      for (var j = 0; j < series.length; j++) pts.push(((HISTORY - series.length + j) * 600 / (HISTORY - 1)).toFixed(1) + ',' + (105 - series[j][key] / max * 100).toFixed(1));
      var p = document.createElementNS('http://www.w3.org/2000/svg', 'polyline');
      p.setAttribute('points', pts.join(' '));
      p.setAttribute('fill', 'none');
      p.setAttribute('stroke', color);
      p.setAttribute('stroke-width', '2');
      p.setAttribute('vector-effect', 'non-scaling-stroke');
      return p;
    }
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    // The scale is text outside the SVG: the SVG stretches to the page width and would stretch text.
    $('chart-max').textContent = rate(max);
    if (series.length > 1) { svg.appendChild(line('a', '#3fb950')); svg.appendChild(line('r', '#f85149')); }
  }

  function render(s, first) {
    count++;
    $('updated').textContent = String(count);
    $('updated-at').textContent = clock(s.atMs);
    $('router').textContent = s.router;
    $('ring-version').textContent = s.ring.version || '(empty)';
    $('ring-members').textContent = String(s.ring.members);

    var a = 0, r = 0, f = 0, q = 0;
    for (var i = 0; i < s.nodes.length; i++) {
      var l = s.nodes[i].levels;
      if (l) { a += l.admittedPerSec; r += l.refusedPerSec; f += l.inFlight; q += l.queued; }
    }
    series.push({ a: a, r: r });
    if (series.length > HISTORY) series.shift();
    $('total-admitted').textContent = rate(a); $('total-refused').textContent = rate(r);
    $('total-inflight').textContent = num(f); $('total-queued').textContent = num(q);
    drawChart();

    replace($('nodes'), s.nodes.map(function (n) { return nodeCard(n, s.ring.version); }), el('span', { cls: 'empty', text: 'the ring is empty' }));
    replace($('tenants'), s.tenants.map(tenantRow), el('tr', null, el('td', { colspan: '6', cls: 'empty', text: 'no traffic in the last second' })));
    replace($('shares'), shareRows(s.nodes), el('tr', null, el('td', { colspan: '7', cls: 'empty', text: 'no fair-shared deployment' })));
    replace($('hot'), s.hot.map(function (h) { return el('li', { 'data-hot': h.tenant }, el('span', { cls: 'name', text: h.tenant }), el('span', { cls: 'badge b-fb', text: ' over ' + h.k + ' nodes' })); }), el('li', { cls: 'empty', text: 'none' }));

    // The first snapshot after (re)connecting carries the last 50 events; later ones only the new.
    if (first) events = [];
    events = events.concat(s.events).slice(-50);
    replace($('events'), events.slice().reverse().map(function (e) {
      return el('li', { 'data-event': e.kind }, el('time', { text: clock(e.atMs) }), el('span', { cls: 'kind k-' + e.kind, text: e.kind }), el('span', { text: e.message }));
    }), el('li', { cls: 'empty', text: 'none yet' }));
  }

  connect();
})();
</script>
</body>
</html>
`;
