"""The status page's three static files. No build step, no external assets.

Every value from /status.json reaches the DOM through `textContent` (never `innerHTML`), and the
Content-Security-Policy the server sends allows scripts only from this origin, so a record holding
`<script>` or an `onerror=` attribute is shown as text and never runs. The optional bearer token is
read from the URL fragment (`/status#token=...`, never sent to the server or its logs) or typed into
the page, kept in sessionStorage, and sent as an `Authorization` header.
"""

HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>telesum status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="status.css"></head>
<body>
<header><h1>telesum <span id="worker"></span></h1><span id="ready" class="badge">loading</span>
<p id="about"></p></header>
<form id="auth" hidden><label>Bearer token <input id="token" type="password" autocomplete="off"></label>
<button type="submit">Show</button> <span id="autherr"></span></form>
<main id="main" hidden>
<section class="cards">
<div class="card"><b id="rate">-</b><span>records/s</span></div>
<div class="card"><b id="fill">-</b><span>bin fill</span></div>
<div class="card"><b id="busy">-</b><span id="busylabel">GPU busy</span></div>
<div class="card"><b id="inflight">-</b><span>in flight</span></div>
<div class="card"><b id="summaries">-</b><span>summaries</span></div>
<div class="card"><b id="dlq">-</b><span>dead letters</span></div>
</section>
<section><h2>Consumer lag per partition</h2>
<table><thead><tr><th>topic</th><th>partition</th><th>lag</th><th>in flight</th><th>paused</th></tr></thead>
<tbody id="partitions"></tbody></table></section>
<section><h2>Dead letters by reason</h2>
<table><thead><tr><th>reason</th><th>count</th></tr></thead><tbody id="reasons"></tbody></table></section>
<section id="incidentsbox" hidden><h2>Open incidents</h2>
<table><thead><tr><th>incident</th><th>root cause</th><th>alarms</th><th>elements</th><th>since</th><th>summary</th></tr></thead>
<tbody id="incidents"></tbody></table></section>
<section id="alertsbox" hidden><h2>Alertmanager</h2><p id="alertsnote"></p>
<table><thead><tr><th>Alertmanager</th><th>up</th><th>alerts sent</th><th>failed requests</th><th>rejected</th><th>dropped</th><th>waiting</th><th>last accepted</th><th>last error</th></tr></thead>
<tbody id="alerts"></tbody></table></section>
<section><h2>Latest summaries</h2><div id="latest"></div></section>
<details><summary>Settings in force</summary>
<table><thead><tr><th>setting</th><th>value</th><th>source</th></tr></thead><tbody id="settings"></tbody></table>
</details>
<p id="updated"></p>
</main>
<script src="status.js"></script>
</body></html>
"""

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1d2430;background:#f6f7f9}
h1{display:inline;font-size:1.4rem;margin-right:.6rem}h2{font-size:1.05rem;margin:1.4rem 0 .4rem}
.badge{padding:.15rem .55rem;border-radius:1rem;background:#999;color:#fff;font-weight:600}
.badge.ok{background:#1f8a4c}.badge.no{background:#c0392b}
#about{color:#555;margin:.3rem 0 1rem}
.cards{display:flex;flex-wrap:wrap;gap:.7rem}
.card{background:#fff;border:1px solid #dde1e6;border-radius:.4rem;padding:.6rem .9rem;min-width:7.5rem}
.card b{display:block;font-size:1.5rem}.card span{color:#666}
table{border-collapse:collapse;background:#fff;min-width:24rem}
th,td{border:1px solid #dde1e6;padding:.25rem .55rem;text-align:left;vertical-align:top}
th{background:#eef0f3}
.summary{background:#fff;border:1px solid #dde1e6;border-radius:.4rem;padding:.5rem .8rem;margin:.5rem 0}
.summary .id{font-family:monospace;font-weight:600}.summary .meta{color:#666;font-size:.85rem}
.summary p{margin:.3rem 0;white-space:pre-wrap}
.facts{font-size:.85rem;color:#333}.facts span{margin-right:1rem}
#updated{color:#888;font-size:.8rem}
"""

JS = r"""'use strict';
(function () {
  const KEY = 'telesum-status-token';
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  const $ = (id) => document.getElementById(id);
  // Every record-derived value goes in as text: no markup from the data is ever parsed.
  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function rows(tbody, list) {
    tbody.replaceChildren(...list.map((cells) => {
      const tr = el('tr');
      cells.forEach((c) => tr.appendChild(el('td', c)));
      return tr;
    }));
  }
  const pct = (x) => (x === null || x === undefined) ? '-' : (100 * x).toFixed(0) + ' %';
  function render(d) {
    const a = d.about || {};
    $('worker').textContent = a.worker || '';
    $('about').textContent = [a.model, a.device, a.attention_backend && ('attention ' + a.attention_backend),
      a.budgets].filter(Boolean).join(' · ');
    const ready = d.ready && d.ready.ready;
    const stuck = (d.ready && d.ready.stuck_partitions) || [];
    $('ready').textContent = ready ? 'ready' : stuck.length
      ? 'stuck: ' + stuck.map((p) => p.topic + '[' + p.partition + '] at ' + p.offset).join(', ') : 'not ready';
    $('ready').className = 'badge ' + (ready ? 'ok' : 'no');
    if (d.ready && !ready) {
      $('ready').title = Object.entries(d.ready.checks).filter((e) => !e[1]).map((e) => e[0]).join(', ');
    }
    const s = d.stats || {}, e = d.engine || {};
    $('rate').textContent = d.records_per_s.toFixed(1);
    $('fill').textContent = pct(e.bin_fill_ratio);
    $('busy').textContent = pct(e.engine_busy_ratio);
    $('busylabel').textContent = String(a.device || '').startsWith('cuda') ? 'GPU busy' : 'engine busy';
    $('inflight').textContent = (s.in_flight || 0) + (s.backlog || 0);
    $('summaries').textContent = s.summaries || 0;
    $('dlq').textContent = s.dead_letters || 0;
    rows($('partitions'), d.partitions.map((p) => [p.topic, p.partition, p.lag === null ? '-' : p.lag,
      p.in_flight, p.paused ? 'yes' : 'no']));
    rows($('reasons'), Object.entries(d.dead_letters).sort((x, y) => y[1] - x[1]));
    $('incidentsbox').hidden = !d.open_incidents;
    rows($('incidents'), (d.open_incidents || []).map((i) => [i.incident_id, i.root_cause, i.alarms, i.elements,
      i.first_time, i.summary]));
    const al = d.alerting;
    $('alertsbox').hidden = !al;
    if (al) {
      $('alertsnote').textContent = al.firing + ' incidents firing · ' + al.queued + ' events queued · ' +
        al.dropped_events + ' events dropped (queue full)';
      rows($('alerts'), al.targets.map((t) => [t.url, t.up ? 'yes' : 'no', t.sent, t.requests_failed, t.rejected,
        t.dropped, t.pending, t.last_ok ? new Date(t.last_ok * 1000).toISOString().slice(11, 19) : '-',
        t.last_error || '']));
    }
    $('latest').replaceChildren(...d.latest.map((r) => {
      const box = el('div', null, 'summary');
      const head = el('div');
      head.appendChild(el('span', r.id, 'id'));
      head.appendChild(el('span', '  ' + r.at + ' · ' + r.prompt_tokens + ' → ' + r.output_tokens +
        ' tokens · ' + r.total_s + ' s' + (r.hierarchical ? ' · hierarchical' : ''), 'meta'));
      box.appendChild(head);
      box.appendChild(el('p', r.summary));
      const f = el('div', null, 'facts');
      Object.entries(r.facts || {}).forEach(([k, v]) => {
        if (k === 'details') Object.entries(v).forEach(([dk, dv]) => f.appendChild(el('span', dk + ': ' + dv)));
        else f.appendChild(el('span', k + ': ' + v));
      });
      box.appendChild(f);
      return box;
    }));
    rows($('settings'), d.settings.map((r) => [r.path, r.value, r.source]));
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString() + ' · up ' + d.uptime_s + ' s';
  }
  async function refresh() {
    const token = sessionStorage.getItem(KEY);
    const headers = token ? { Authorization: 'Bearer ' + token } : {};
    try {
      const r = await fetch('status.json', { headers, cache: 'no-store' });
      if (r.status === 401) {
        $('main').hidden = true;
        $('auth').hidden = false;
        $('autherr').textContent = token ? 'token refused' : '';
        return;
      }
      const d = await r.json();
      $('auth').hidden = true;
      $('main').hidden = false;
      render(d);
      document.body.dataset.loaded = 'yes';
    } catch (err) {
      $('ready').textContent = 'unreachable';
      $('ready').className = 'badge no';
    }
  }
  $('auth').addEventListener('submit', (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $('token').value);
    refresh();
  });
  refresh();
  setInterval(refresh, 2000);
})();
"""
