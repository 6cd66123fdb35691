// The sfc console: keeps the server-rendered pages live from the HTTP API (docs/console.md):
// the rows come with the page; this script reads them again when the stream tells a change.
// One event stream a page; on a change, at most one request a second.
"use strict";
(function () {
  const body = document.body;
  const page = body.dataset.page;
  const control = body.dataset.control === "true";
  const dataNode = document.getElementById("data");
  const data = dataNode ? JSON.parse(dataNode.textContent) : {};
  const $ = (id) => document.getElementById(id);

  function text(value) {
    const span = document.createElement("span");
    span.textContent = value == null ? "" : String(value);
    return span.innerHTML;
  }
  function when(ms) {
    return ms == null ? "" : new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z");
  }
  function span(ms) {
    const s = Math.max(0, ms) / 1000;
    if (s < 60) return s.toFixed(1) + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  async function call(method, url, doc) {
    const init = { method, credentials: "same-origin", headers: { "X-SFC-Console": "1" } };
    if (doc !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(doc);
    }
    const response = await fetch(url, init);
    let answer = null;
    try { answer = await response.json(); } catch (e) { answer = null; }
    return { ok: response.ok, status: response.status, answer };
  }

  // -- the token: entered once, a session cookie from then on
  $("login").addEventListener("submit", async (e) => {
    e.preventDefault();
    const token = $("token").value;
    $("token").value = "";
    const r = await call("POST", "/api/v1/session", { token });
    $("who").textContent = r.ok ? (r.answer.control ? "signed in, control allowed" : "signed in, read-only") : (r.answer && r.answer.error) || "refused";
    if (r.ok && page === "login") location.reload();
  });

  // -- the stream: says when it is lost, and connects again
  let pending = null;
  let last = 0;
  function later(refresh) {
    if (pending) return;
    const wait = Math.max(0, 1000 - (Date.now() - last));
    pending = setTimeout(async () => {
      pending = null;
      last = Date.now();
      try { await refresh(); } catch (e) { $("live").textContent = "cannot read: " + e; }
    }, wait);
  }
  function watch(scope, onChange) {
    const live = $("live");
    const source = new EventSource("/api/v1/stream?scope=" + encodeURIComponent(scope));
    // the rows came with the page: read again once, for what moved before the hello
    source.addEventListener("hello", () => { live.textContent = "live"; live.className = "live on"; onChange(null); });
    source.addEventListener("change", (e) => onChange(JSON.parse(e.data)));
    source.onerror = () => {
      live.textContent = "stream lost: reconnecting…";
      live.className = "live off";
      source.close();
      setTimeout(() => watch(scope, onChange), 2000);
    };
  }

  // -- the jobs list
  function jobsPage() {
    const form = $("filter");
    let scope = data.scope;
    async function refresh() {
      const state = form.state.value;
      const q = "scope=" + encodeURIComponent(scope) + "&limit=1000&waits=true" + (state ? "&state=" + encodeURIComponent(state) : "");
      const r = await call("GET", "/api/v1/jobs?" + q);
      if (!r.ok) { $("total").textContent = (r.answer && r.answer.error) || "refused"; return; }
      const needle = form.text.value;
      const rows = r.answer.jobs.filter((j) => !needle || j.job.includes(needle));
      $("jobs").tBodies[0].innerHTML = rows.map((j) => {
        const w = j.waiting;
        const link = "/jobs/" + encodeURIComponent(scope) + "/" + encodeURIComponent(j.job);
        const what = w ? w.for + ": " + w.what + (w.held ? " (held)" : "") : "";
        return '<tr data-job="' + text(j.job) + '"><td><a href="' + link + '">' + text(j.job) + "</a></td><td>" + text(j.unreadable ? "unreadable" : j.state) +
          "</td><td>" + text(what) + '</td><td class="since"' + (w && w.since != null ? ' data-since="' + w.since + '"' : "") + ">" + (w ? when(w.since) : "") +
          "</td><td>" + when(j.storedAt) + "</td><td>" + when(j.endedAt) + "</td></tr>";
      }).join("");
      ago();
      $("total").textContent = rows.length + " of " + r.answer.total + " job(s)";
    }
    function ago() {
      for (const cell of document.querySelectorAll("[data-since]")) {
        cell.title = when(Number(cell.dataset.since));
        cell.textContent = span(Date.now() - Number(cell.dataset.since)) + " ago";
      }
    }
    setInterval(ago, 1000);
    form.addEventListener("input", () => {
      if (form.scope.value && form.scope.value !== scope) { scope = form.scope.value; $("scope").textContent = scope; }
      later(refresh);
    });
    form.addEventListener("submit", (e) => { e.preventDefault(); later(refresh); });
    ago();
    watch(scope, (change) => { if (!change || change.jobs.length) later(refresh); });
  }

  // -- a job
  function jobPage() {
    let detail = data.detail;
    let readAt = Date.now();
    function render() {
      const state = detail.order ? detail.order.state.map((s) => s.stateText).join("/") : "unreadable";
      $("state").textContent = state;
      const w = detail.waitingFor[0];
      const dwell = Object.keys(detail.dwells || {}).sort((a, b) => detail.dwells[a] - detail.dwells[b])[0];
      $("waiting").textContent = w ? "waits for " + w.for + (w.since != null ? " since " + when(w.since) : "")
        : dwell ? "waits for the dwell of step " + dwell + " until " + when(detail.dwells[dwell]) : "waits for nothing";
      $("actions").tBodies[0].innerHTML = detail.actions.map((a) =>
        '<tr data-action="' + text(a.name) + '"' + (a.step != null ? ' data-step="' + text(a.step) + '"' : "") + ' data-status="' + text(a.status) + '"><td>' + text(a.name) + "</td><td>" + text(a.step) + "</td><td>" + text(a.status) +
        "</td><td>" + text(a.commandId) + "</td><td>" + text(a.attempt) + (a.maxAttempts ? " of " + a.maxAttempts : "") +
        '</td><td class="deadline"' + (a.status === "open" && a.deadline != null ? ' data-deadline="' + a.deadline + '"' : "") + ">" + when(a.deadline) +
        "</td><td>" + text(a.outcome || a.error) + "</td><td>" + text(a.hold) + "</td></tr>").join("");
      $("next").textContent = detail.nextDeadline ? detail.nextDeadline.text : "";
      $("history").innerHTML = detail.history.slice().reverse().map((h) =>
        "<li><time>" + when(h.at) + "</time> <b>" + text(h.event) + "</b> " + text(h.disposition) + (h.reason ? ": " + text(h.reason) : "") + "</li>").join("");
      $("order").textContent = JSON.stringify(detail.order, null, 2);
      $("response").textContent = JSON.stringify(detail.response, null, 2);
      tick();
    }
    function tick() {
      const now = detail.now + (Date.now() - readAt);
      for (const cell of document.querySelectorAll("[data-deadline]")) {
        const left = Number(cell.dataset.deadline) - now;
        cell.textContent = left > 0 ? "in " + span(left) : "due " + span(-left) + " ago";
      }
    }
    const url = "/api/v1/jobs/" + encodeURIComponent(detail.scope) + "/" + encodeURIComponent(detail.job);
    async function refresh() {
      const r = await call("GET", url + "?chart=true");
      if (!r.ok) { $("waiting").textContent = (r.answer && r.answer.error) || "refused"; return; }
      detail = r.answer;
      readAt = Date.now();
      if (detail.chart) $("chart").innerHTML = detail.chart;
      render();
    }
    if (control) {
      for (const b of document.querySelectorAll("[data-method]")) {
        b.addEventListener("click", async () => {
          const comment = $("comment").value;
          const r = await call("POST", url + "/" + b.dataset.method, comment && ["pause", "resume", "stop", "abort"].includes(b.dataset.method) ? { comment } : undefined);
          $("said").textContent = r.answer ? (r.answer.status ? r.answer.status + (r.answer.message ? ": " + r.answer.message : "") : r.answer.error) : String(r.status);
          later(refresh);
        });
      }
    }
    tick();
    setInterval(tick, 250);
    watch(detail.scope, (change) => { if (!change || change.jobs.includes(detail.job)) later(refresh); });
  }

  // -- the work stream
  function workPage() {
    const scope = data.scope;
    async function refresh() {
      const r = await call("GET", "/api/v1/work?scope=" + encodeURIComponent(scope));
      if (!r.ok) return;
      $("pending").tBodies[0].innerHTML = r.answer.pending.pending.map((p) =>
        "<tr><td>" + text(p.id) + "</td><td>" + text(p.entry) + "</td><td>" + text(p.job) + "</td><td>" + text(p.consumer) +
        "</td><td>" + span(p.idleMs) + "</td><td>" + text(p.deliveries) + "</td></tr>").join("");
      $("unread").textContent = r.answer.pending.unread + " entr(ies) no worker has read yet";
      $("dead").tBodies[0].innerHTML = r.answer.dead.dead.map((d) =>
        '<tr data-entry="' + text(d.id) + '"><td>' + text(d.id) + "</td><td>" + text(d.kind) + "</td><td>" + text(d.job) + "</td><td>" + text(d.reason) +
        "</td><td>" + text(d.deliveries) + "</td><td>" + (control ? '<button data-do="requeue">requeue</button> <button data-do="drop">drop</button>' : "") + "</td></tr>").join("");
    }
    $("dead").addEventListener("click", async (e) => {
      const what = e.target.dataset && e.target.dataset.do;
      if (!what) return;
      const entry = e.target.closest("tr").dataset.entry;
      await call("POST", "/api/v1/work/" + encodeURIComponent(scope) + "/" + encodeURIComponent(entry) + "/" + what);
      later(refresh);
    });
    watch(scope, () => later(refresh));
  }

  // -- a recipe, checked and stored nowhere
  function recipePage() {
    for (const name of ["recipe", "script"]) {
      $(name + "-file").addEventListener("change", async (e) => {
        const file = e.target.files[0];
        if (file) $(name).value = await file.text();
      });
    }
    $("check").addEventListener("submit", async (e) => {
      e.preventDefault();
      const out = $("result");
      let doc;
      try {
        doc = { recipe: JSON.parse($("recipe").value) };
        if ($("script").value.trim()) doc.script = JSON.parse($("script").value);
      } catch (x) { out.textContent = "not JSON: " + x.message; return; }
      const r = await call("POST", "/api/v1/recipe/check", doc);
      if (!r.ok) { out.textContent = (r.answer && r.answer.error) || "refused"; return; }
      const a = r.answer;
      if (!a.valid) {
        out.innerHTML = "<h2>Invalid</h2><ul>" + a.errors.map((x) => "<li>" + text(x.code + " " + x.path + ": " + x.message) + "</li>").join("") + "</ul>";
        return;
      }
      let html = "<h2>Valid</h2>" + a.chart + "<h2>Explained</h2><pre>" + text(a.explain) + "</pre>";
      if (a.dryrun) {
        html += a.dryrun.error ? "<h2>Script</h2><p>" + text(a.dryrun.error.path + ": " + a.dryrun.error.message) + "</p>"
          : "<h2>Dry run: " + text(a.dryrun.status) + "</h2><pre>" + text(a.dryrun.transcript) + "</pre>" + a.dryrun.chart;
      }
      out.innerHTML = html;
    });
  }

  if (page === "jobs") jobsPage();
  else if (page === "job") jobPage();
  else if (page === "work") workPage();
  else if (page === "recipe") recipePage();
})();
