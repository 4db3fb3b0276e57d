// Quiver operator dashboard: reads /ui/api/state every 2 s and draws tables and SVG bar charts.
// No framework. With authentication on, open /ui#token=TOKEN: the token stays in this tab's
// sessionStorage and is sent as a bearer token; it never appears in a URL sent to the server.
"use strict";

(function () {
  const hash = new URLSearchParams(location.hash.slice(1));
  if (hash.get("token")) {
    sessionStorage.setItem("quiver-token", hash.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const token = sessionStorage.getItem("quiver-token");
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const previous = new Map();
  let lastAt = 0;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c ?? "")));
    return e;
  }
  function svg(tag, attrs, text) {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function fill(id, rows) {
    const body = document.querySelector("#" + id + " tbody");
    body.replaceChildren(...rows);
  }
  function num(v, digits) {
    return el("td", { class: "num" }, digits === undefined ? v : Number(v).toFixed(digits));
  }

  async function api(path) {
    const r = await fetch(path, { headers, cache: "no-store" });
    if (r.status === 401) throw new Error("authentication required: open /ui#token=YOUR_TOKEN");
    if (!r.ok) throw new Error(path + ": HTTP " + r.status);
    return r.json();
  }

  function barChart(boxId, chartId, title, rows, series) {
    const width = 820, rowH = 18, left = 170, right = 130;
    const height = rows.length * rowH + 24;
    const max = Math.max(1, ...rows.map((r) => series.reduce((m, s) => Math.max(m, s.value(r)), 0)));
    const chart = svg("svg", { id: chartId, width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": title });
    chart.append(svg("title", {}, title));
    rows.forEach((r, i) => {
      const y = 18 + i * rowH;
      chart.append(svg("text", { x: 0, y: y + 11 }, r.name));
      let label = [];
      for (const s of series) {
        const w = Math.max(s.value(r) > 0 ? 1 : 0, ((width - left - right) * s.value(r)) / max);
        chart.append(svg("rect", { class: s.cls, x: left, y: y + (s.offset || 0), width: w, height: s.height || 13, "data-tool": r.name }));
        label.push(s.text(r));
      }
      chart.append(svg("text", { x: width - right + 4, y: y + 11 }, label.join(" / ")));
    });
    chart.append(svg("text", { x: left, y: 11 }, title));
    document.getElementById(boxId).replaceChildren(chart);
  }

  function render(s) {
    const now = Date.now();
    const dt = lastAt ? (now - lastAt) / 1000 : 0;
    lastAt = now;
    document.getElementById("server").textContent = `${s.server.name} ${s.server.version}`;
    document.getElementById("tool-count").textContent = s.tools.length;
    document.getElementById("plugin-count").textContent = s.plugins.length;
    document.getElementById("session-count").textContent = s.sessions.length;
    document.getElementById("call-count").textContent = s.totals.calls;
    document.getElementById("error-count").textContent = s.totals.errors;

    const rate = new Map();
    for (const t of s.tools) {
      const before = previous.get(t.name);
      rate.set(t.name, dt > 0 && before !== undefined ? (t.calls - before) / dt : 0);
      previous.set(t.name, t.calls);
    }
    fill("tools", s.tools.map((t) => {
      const notes = t.aliases.map((a) => {
        let text = `${a.name} (${a.state}${a.action ? ", action " + a.action : ""}`;
        if (a.planned_removal_version) text += `, removal planned in ${a.planned_removal_version}`;
        if (a.removed_in_version) text += `, removed in ${a.removed_in_version}`;
        return text + ")";
      });
      if (t.replacement) notes.unshift(`replaced by ${t.replacement}` + (t.planned_removal_version ? `, removal planned in ${t.planned_removal_version}` : ""));
      return el("tr", { "data-tool": t.name },
        el("td", {}, el("code", {}, t.name)), el("td", {}, `${t.plugin} ${t.version}`),
        el("td", { class: "state-" + t.state }, t.state), el("td", {}, t.actions.join(", ")),
        el("td", {}, notes.join("; ")), num(t.calls), num(t.errors), num(rate.get(t.name), 2),
        num(t.p50_ms, 3), num(t.p95_ms, 3), el("td", {}, t.breaker || "closed"));
    }));
    fill("plugins", s.plugins.map((p) => el("tr", {},
      el("td", {}, p.id), el("td", {}, p.version), el("td", {}, el("code", {}, p.signer_key_id || "unsigned")),
      el("td", {}, el("code", {}, p.sha256)), el("td", { title: p.detail }, `${p.isolation} (${p.detail})`))));
    fill("sessions", s.sessions.map((x) => el("tr", { class: "session" },
      el("td", {}, el("code", {}, x.id)), el("td", {}, x.client), el("td", {}, x.profile), el("td", {}, x.mode),
      num(x.surface_bytes ?? "–"), el("td", {}, x.loaded.join(", ")))));
    fill("rejections", s.rejections.map((r) => el("tr", {},
      el("td", {}, new Date(r.at_ms).toISOString()), el("td", {}, r.stage), el("td", {}, el("code", {}, r.bundle)), el("td", {}, r.message))));

    const called = s.tools.filter((t) => t.calls > 0);
    const rows = called.length ? called : s.tools;
    barChart("calls-chart-box", "calls-chart", "calls (errors in red)", rows, [
      { cls: "ok", value: (t) => t.calls, text: (t) => `${t.calls} calls` },
      { cls: "err", value: (t) => t.errors, text: (t) => `${t.errors} err`, offset: 9, height: 4 },
    ]);
    barChart("latency-chart-box", "latency-chart", "latency p50 / p95 (ms)", rows, [
      { cls: "p95", value: (t) => t.p95_ms, text: (t) => t.p50_ms.toFixed(2) },
      { cls: "ok", value: (t) => t.p50_ms, text: (t) => t.p95_ms.toFixed(2), height: 7 },
    ]);

    const select = document.getElementById("search-profile");
    if (!select.options.length) {
      for (const p of s.profiles) select.append(el("option", { value: p }, p));
    }
  }

  async function refresh() {
    try {
      render(await api("/ui/api/state"));
      document.getElementById("status").textContent = "";
    } catch (e) {
      document.getElementById("status").textContent = e.message;
    }
  }

  async function search(event) {
    if (event) event.preventDefault();
    const q = document.getElementById("search-q").value;
    const profile = document.getElementById("search-profile").value;
    if (!q) return;
    try {
      const r = await api(`/ui/api/search?q=${encodeURIComponent(q)}&profile=${encodeURIComponent(profile)}`);
      fill("search-results", r.hits.map((h) => el("tr", { class: "hit" },
        num(h.rank), el("td", {}, el("code", {}, h.name)), num(h.score, 3), el("td", {}, h.plugin))));
    } catch (e) {
      document.getElementById("status").textContent = e.message;
    }
  }

  document.getElementById("search-form").addEventListener("submit", search);
  const initial = new URLSearchParams(location.search);
  refresh().then(() => {
    if (initial.get("q")) {
      document.getElementById("search-q").value = initial.get("q");
      if (initial.get("profile")) document.getElementById("search-profile").value = initial.get("profile");
      search();
    }
  });
  setInterval(refresh, 2000);
})();
