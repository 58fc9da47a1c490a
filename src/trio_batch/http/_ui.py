"""``GET /ui``: one self-contained page to watch your jobs (SPEC §7).

No build step, no CDN: the HTML, CSS and JavaScript are below, and a Content-Security-Policy
lets in exactly this script and this style (by their SHA-256) and requests to this server only.
The key the user pastes is kept in ``sessionStorage`` (gone with the tab) and sent as the Bearer
header; the page reads ``GET /v1/batch`` for the list and follows each live job's events stream
(``fetch`` with the header, since ``EventSource`` cannot send one), resuming with
``Last-Event-ID`` after a dropped connection. The newest page of the list is read again every
second while the tab is visible (one indexed page of 20 summaries, and never two reads at once),
so a job submitted elsewhere shows within about a second and a cancel is painted from its own
answer at once. Under each job with failed targets the page lists them, URL, error and hint
(from the ``target`` events of a followed job, else one ``?results=1&state=failed`` read when
its failed count changes). A target that waits for its host's budget says so under its job, in
words (the site is busy with our requests, asked us to slow down, or its robots.txt asks for a
pause) and until when: from the stream's ``waiting`` events, and checked again with
``GET /v1/batch/{id}/{idx}`` at that time (or every two seconds when the end is unknown), so
the line goes once the target starts. ``GET /v1/me`` names the key's caller. Each job has
Cancel (while live), Retry (once finished with failed or unfinished targets:
``POST /v1/batch/{id}/retry``, the new job appears on top) and an NDJSON link. Below 40rem
the table becomes one card a job, so the actions stay on screen at 400 px. With no job on
screen the page says how to get a key and submit one (``curl`` to this server, MCP at its
``/mcp``); the live region says how many jobs are shown, and the poll keeps that count. A
crawl's job says its progress under its counts (pages stored of its limit, URLs skipped by
reason) from the ``crawl`` object of its answers, the list's poll keeping it current.
"""

from __future__ import annotations

import base64
import hashlib

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

_STYLE = """
:root { --fg: #1a1a1a; --muted: #4a4a4a; --bg: #ffffff; --line: #c8c8c8; --accent: #0b57d0;
  --done: #1e7a34; --failed: #b3261e; --running: #0b57d0; --pending: #d9d9d9;
  --waiting: #7a4100; }
* { box-sizing: border-box; }
body { font: 16px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  margin: 0 auto; max-width: 72rem; padding: 1rem 1.5rem 3rem; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; }
form { display: flex; flex-wrap: wrap; gap: 0.5rem; align-items: end; margin-bottom: 1rem; }
label { display: flex; flex-direction: column; font-weight: 600; font-size: 0.9rem; }
input, select, button { font: inherit; padding: 0.4rem 0.6rem; border: 1px solid #767676;
  border-radius: 4px; color: var(--fg); background: var(--bg); }
input[type=password] { min-width: 22rem; }
button { cursor: pointer; background: #f2f2f2; }
button.primary { background: var(--accent); color: #fff; border-color: var(--accent); }
button:disabled { cursor: default; color: #6b6b6b; }
:focus-visible { outline: 3px solid #e37400; outline-offset: 2px; }
#message { min-height: 1.5rem; color: var(--muted); }
#message.error { color: var(--failed); font-weight: 600; }
table { width: 100%; border-collapse: collapse; }
th, td { text-align: left; padding: 0.5rem; border-bottom: 1px solid var(--line);
  vertical-align: middle; }
th { font-size: 0.85rem; color: var(--muted); }
code { font-size: 0.9rem; }
.bar { display: flex; height: 1rem; min-width: 12rem; border: 1px solid #767676;
  border-radius: 3px; overflow: hidden; background: var(--pending); }
.bar span { display: block; height: 100%; }
.bar .done { background: var(--done); }
.bar .failed { background: var(--failed);
  background-image: repeating-linear-gradient(45deg, transparent 0 4px, #ffffff55 4px 8px); }
.bar .running { background: var(--running); }
.counts, .crawl { font-size: 0.85rem; color: var(--muted); }
.crawl { margin: 0.25rem 0 0; }
.status { font-weight: 600; }
.status[data-status=done] { color: var(--done); }
.status[data-status=failed], .status[data-status=partial] { color: var(--failed); }
.actions { display: flex; gap: 0.5rem; align-items: center; }
.failures { margin: 0.25rem 0 0; padding-left: 1.2rem; font-size: 0.85rem; }
.failures li { overflow-wrap: anywhere; }
.failures .error { color: var(--failed); }
.failures .hint { color: var(--muted); }
.waiting { margin: 0.25rem 0 0; font-size: 0.85rem; color: var(--waiting); }
#who { font-weight: 600; }
#empty { border: 1px solid var(--line); border-radius: 4px; padding: 0.5rem 1rem;
  margin-top: 1rem; }
#empty pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f2f2f2;
  padding: 0.5rem; margin: 0.25rem 0; }
@media (max-width: 40rem) {
  body { padding: 0.5rem 0.75rem 2rem; }
  input[type=password] { min-width: 0; width: 100%; }
  label { width: 100%; }
  thead { display: none; }
  table, tbody, tr, td { display: block; width: 100%; }
  tr { border-bottom: 2px solid var(--line); padding: 0.5rem 0; }
  td { border: 0; padding: 0.2rem 0; }
  .bar { min-width: 0; }
  .actions { flex-wrap: wrap; }
}
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden;
  clip: rect(0 0 0 0); white-space: nowrap; }
"""

_SCRIPT = r"""
"use strict";
const KEY = "trio-batch-key";
const MAX_STREAMS = 4;  // browsers allow about 6 connections per host: keep some free
const POLL_MS = 1000;  // a new job shows within about a second
const POLL_LIMIT = 20;  // the poll reads one small indexed page
const WAIT_CHECK_MS = 2000;  // a wait with no known end: is it over yet?
const WAIT_CHECK_MAX_MS = 20000;  // a long backoff is still checked now and then
const jobs = new Map();  // id -> {summary, row, ctl, last, failures, failedShown}
let next = null;
let polling = false;
let counting = false;  // the live region shows the count of jobs (the poll keeps it true)
const $ = (id) => document.getElementById(id);
const key = () => sessionStorage.getItem(KEY) || "";
const live = (s) => s === "queued" || s === "running";

function say(text, error) {
  const m = $("message");
  m.textContent = text;
  m.className = error ? "error" : "";
  counting = false;
}

function sayShown() {
  // The jobs on screen now: said after a load, and again when the poll adds one while the
  // live region still shows the count (never over another message, such as a retry's).
  const n = jobs.size;
  say(n ? n + " job" + (n === 1 ? "" : "s") + " shown" : "No jobs yet for this key.");
  counting = true;
}

function showEmpty() {
  // No job on screen: how to get a key and submit one (curl and MCP), for this server.
  $("empty").hidden = jobs.size > 0;
  for (const e of document.querySelectorAll(".origin")) e.textContent = location.origin;
}

async function api(path, options) {
  const init = Object.assign({headers: {}}, options || {});
  init.headers.Authorization = "Bearer " + key();
  const r = await fetch(path, init);
  if (!r.ok) {
    let body = {};
    try { body = await r.json(); } catch (e) { /* not JSON */ }
    const err = new Error((body.error || r.statusText) + (body.hint ? ": " + body.hint : ""));
    err.status = r.status;
    throw err;
  }
  return r;
}

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function row(id) {
  const tr = el("tr", {"data-job-id": id});
  const bar = el("div", {class: "bar", role: "progressbar", "aria-valuemin": "0"});
  for (const s of ["done", "failed", "running"]) bar.append(el("span", {class: s}));
  const cancel = el("button", {type: "button", class: "cancel"}, "Cancel");
  cancel.addEventListener("click", () => cancelJob(id));
  const retry = el("button", {type: "button", class: "retry"}, "Retry");
  retry.addEventListener("click", () => retryJob(id));
  const link = el("a", {href: "/v1/batch/" + id + "/results", class: "ndjson"}, "NDJSON");
  link.addEventListener("click", (ev) => { ev.preventDefault(); download(id); });
  const cells = [
    el("td", {}, ""), el("td", {}, ""), el("td", {}), el("td", {}),
  ];
  cells[0].append(el("code", {title: id}, id.slice(0, 12)));
  cells[2].append(bar, el("div", {class: "counts"}), el("p", {class: "crawl", hidden: ""}),
    el("p", {class: "waiting", hidden: ""}), el("ul", {class: "failures"}));
  const actions = el("div", {class: "actions"});
  actions.append(cancel, retry, link);
  cells[3].append(actions);
  tr.append(cells[0], el("td", {class: "status"}), cells[1], cells[2], cells[3]);
  return tr;
}

function paint(job) {
  const s = job.summary, tr = job.row, c = s.counts, total = s.targets_total || 1;
  const status = tr.querySelector(".status");
  status.textContent = s.status + (s.error ? " (" + s.error + ")" : "");
  status.setAttribute("data-status", s.status);
  tr.setAttribute("data-status", s.status);
  tr.children[2].textContent = new Date(s.created_at * 1000).toLocaleString();
  const bar = tr.querySelector(".bar");
  for (const k of ["done", "failed", "running"]) {
    bar.querySelector("." + k).style.width = (100 * c[k] / total) + "%";
  }
  const finished = c.done + c.failed;
  bar.setAttribute("aria-valuemax", String(s.targets_total));
  bar.setAttribute("aria-valuenow", String(finished));
  const words = c.done + " done, " + c.failed + " failed, " + c.running + " running, " +
    c.pending + " pending of " + s.targets_total;
  bar.setAttribute("aria-label", "job " + s.id.slice(0, 12) + ": " + words);
  tr.querySelector(".counts").textContent = words;
  const cancel = tr.querySelector(".cancel");
  cancel.disabled = !live(s.status);
  cancel.setAttribute("aria-label", "Cancel job " + s.id.slice(0, 12));
  const retry = tr.querySelector(".retry");
  retry.disabled = live(s.status) || !(c.failed + c.pending + c.running);
  retry.setAttribute("aria-label",
    "Retry failed and unfinished targets of job " + s.id.slice(0, 12));
  paintCrawl(job);
  paintWait(job);
  paintFailures(job);
}

function paintCrawl(job) {
  // A crawl's progress (its answers' crawl object): pages stored of its limit, what it skipped.
  const line = job.row.querySelector(".crawl"), cr = job.crawl;
  line.hidden = !cr;
  if (!cr) return;
  const skipped = Object.entries(cr.skipped).filter(([, n]) => n > 0)
    .map(([why, n]) => n + " " + why).join(", ");
  line.textContent = "crawl: " + cr.done + " of " + cr.limit + " pages stored, depth up to " +
    cr.max_depth + (skipped ? "; skipped " + skipped : "");
}

function waitWords(w, total) {
  // What a waiting target waits for, in a person's words (reasons: docs/politeness.md).
  const which = "Target " + (w.idx + 1) + (total ? " of " + total : "") + " is waiting: ";
  const at = w.until ? new Date(w.until * 1000).toLocaleTimeString() : "";
  if (w.reason === "backoff") {
    return which + "its site asked us to slow down (HTTP 429 or 503); " +
      (at ? "trying again at " + at : "trying again when the site allows");
  }
  if (w.reason === "crawl_delay") {
    return which + "its site's robots.txt asks for a pause between requests (Crawl-delay)" +
      (at ? "; next request at " + at : "");
  }
  if (at) return which + "requests to its site are spaced apart; next request at " + at;
  return which + "its site already has as many requests from this server as it takes at once";
}

function paintWait(job) {
  const line = job.row.querySelector(".waiting"), w = job.waiting;
  line.hidden = !w;
  line.textContent = w ? waitWords(w, job.summary.targets_total) : "";
  if (w) job.row.setAttribute("data-waiting", w.reason);
  else job.row.removeAttribute("data-waiting");
}

function onWaiting(job, w) {
  job.waiting = w;
  paint(job);
  checkWaitLater(job);
}

function stopWaiting(job) {
  clearTimeout(job.waitCheck);
  job.waiting = null;
}

function checkWaitLater(job) {
  // No event says a wait is over: read the target when it should be, or now and then.
  clearTimeout(job.waitCheck);
  const w = job.waiting;
  if (!w) return;
  let ms = WAIT_CHECK_MS;
  if (w.until) ms = Math.min(Math.max(w.until * 1000 - Date.now() + 100, 250), WAIT_CHECK_MAX_MS);
  job.waitCheck = setTimeout(() => checkWait(job, w), ms);
}

async function checkWait(job, w) {
  if (job.waiting !== w || jobs.get(job.summary.id) !== job) return;
  if (!live(job.summary.status)) { stopWaiting(job); paint(job); return; }
  try {
    const t = await (await api("/v1/batch/" + job.summary.id + "/" + w.idx)).json();
    if (job.waiting !== w) return;  // an event came meanwhile
    job.waiting = t.waiting ? Object.assign({idx: w.idx}, t.waiting) : null;
  } catch (e) {
    if (job.waiting !== w) return;
    if (e.status === 404 || e.status === 401) job.waiting = null;  // gone, or no key
  }
  paint(job);
  checkWaitLater(job);
}

function paintFailures(job) {
  const list = job.row.querySelector(".failures");
  const items = [...(job.failures || new Map()).entries()].sort((a, b) => a[0] - b[0]);
  list.replaceChildren();
  for (const [idx, t] of items) {
    const li = el("li", {"data-idx": String(idx)});
    li.append(el("code", {class: "url"}, t.url), " ",
      el("span", {class: "error"}, t.error || "failed"));
    if (t.hint) li.append(" ", el("span", {class: "hint"}, "(" + t.hint + ")"));
    list.append(li);
  }
  const more = job.summary.counts.failed - items.length;
  if (more > 0 && items.length) list.append(el("li", {}, "and " + more + " more (NDJSON)"));
  list.hidden = items.length === 0;
  if (!job.ctl && job.failedShown !== job.summary.counts.failed) loadFailures(job);
}

async function loadFailures(job) {
  // A job not followed: its failed targets, read once each time its failed count moves.
  const failed = job.summary.counts.failed;
  job.failedShown = failed;
  if (!failed) return;
  try {
    const r = await api("/v1/batch/" + job.summary.id + "?results=1&state=failed&limit=10");
    const body = await r.json();
    job.failures = new Map();
    for (const t of body.targets || []) job.failures.set(t.idx, t);
    paintFailures(job);
  } catch (e) {
    job.failedShown = null;  // try again on the next paint
  }
}

function onTarget(job, data) {
  const c = job.summary.counts;
  if (data.status !== "done" && data.status !== "failed") return;
  c[data.status] += 1;
  const left = job.summary.targets_total - c.done - c.failed;
  c.running = left > 0 && live(job.summary.status) ? 1 : 0;
  job.summary.status = "running";
  c.pending = left - c.running;
  if (job.waiting && job.waiting.idx === data.idx) stopWaiting(job);
  if (data.status === "failed" && data.url !== undefined) {
    job.failures = job.failures || new Map();
    job.failures.set(data.idx, data);
    job.failedShown = c.failed;
  }
  paint(job);
}

function streams() {
  let n = 0;
  for (const j of jobs.values()) if (j.ctl) n += 1;
  return n;
}

async function follow(job) {
  const ctl = new AbortController();
  job.ctl = ctl;
  job.last = null;
  try {
    while (!ctl.signal.aborted) {
      try {
        const headers = {};
        if (job.last !== null) headers["Last-Event-ID"] = job.last;
        else { job.summary.counts.done = 0; job.summary.counts.failed = 0; }
        const r = await api("/v1/batch/" + job.summary.id + "/events",
          {headers, signal: ctl.signal});
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buf += value;
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const ev = {event: "message", data: "", id: null};
            for (const line of block.split("\n")) {
              if (line === "" || line.startsWith(":")) continue;
              const c = line.indexOf(":");
              const field = c < 0 ? line : line.slice(0, c);
              let v = c < 0 ? "" : line.slice(c + 1);
              if (v.startsWith(" ")) v = v.slice(1);
              if (field === "event") ev.event = v;
              else if (field === "data") ev.data += (ev.data ? "\n" : "") + v;
              else if (field === "id") ev.id = v;
            }
            if (ev.id !== null) job.last = ev.id;
            if (ev.event === "target") onTarget(job, JSON.parse(ev.data));
            else if (ev.event === "waiting") onWaiting(job, JSON.parse(ev.data));
            else if (ev.event === "end") {
              stopWaiting(job);
              job.summary = JSON.parse(ev.data);
              job.crawl = job.summary.crawl || job.crawl;
              paint(job);
              const why = job.summary.error ? " (" + job.summary.error + ")" : "";
              say("job " + job.summary.id.slice(0, 12) + " is " + job.summary.status + why);
              return;
            }
          }
        }
      } catch (e) {
        if (ctl.signal.aborted) return;
        if (e.status === 404 || e.status === 401 || e.status === 400) {
          job.stuck = true;  // not again: the next reload of the list decides
          say(e.message, true);
          return;
        }
      }
      await new Promise((ok) => setTimeout(ok, 2000));  // dropped: resume after the last id
    }
  } finally {
    job.ctl = null;
    startStreams();
  }
}

function startStreams() {
  for (const job of jobs.values()) {
    if (streams() >= MAX_STREAMS) return;
    if (!job.ctl && !job.stuck && live(job.summary.status)) follow(job);
  }
}

function show(summary, atTop) {
  let job = jobs.get(summary.id);
  if (!job) {
    job = {summary, row: row(summary.id), ctl: null, last: null};
    jobs.set(summary.id, job);
    if (atTop) $("jobs").prepend(job.row); else $("jobs").append(job.row);
  } else if (!job.ctl) {
    job.summary = summary;  // a followed job is painted from its events
    job.stuck = false;
  }
  job.crawl = summary.crawl || job.crawl;  // a crawl's progress comes with the list, followed too
  paint(job);
}

function query(more, limit) {
  const params = new URLSearchParams();
  if (limit) params.set("limit", String(limit));
  const status = $("filter").value;
  if (status) params.set("status", status);
  if (more && next) params.set("before", next);
  return "/v1/batch?" + params.toString();
}

async function refresh() {
  // The newest page again: new jobs go on top, the others are updated; streams go on.
  if (polling) return;
  polling = true;
  try {
    const page = await (await api(query(false, POLL_LIMIT))).json();
    const before = jobs.size;
    for (const s of page.jobs.slice().reverse()) show(s, true);
    showEmpty();
    if (jobs.size !== before && counting) sayShown();
    startStreams();
  } catch (e) {
    say(e.message, true);
  } finally {
    polling = false;
  }
}

async function who() {
  try {
    const me = await (await api("/v1/me")).json();
    $("who").textContent = "Key of " + me.name +
      (me.workspace ? " (workspace " + me.workspace + ", " : " (") + me["class"] + ")";
  } catch (e) {
    $("who").textContent = "";
  }
}

async function load(more) {
  if (!key()) { say("Paste your API key first.", true); return; }
  try {
    const page = await (await api(query(more))).json();
    if (!more) {
      for (const j of jobs.values()) if (j.ctl) j.ctl.abort();
      jobs.clear();
      $("jobs").replaceChildren();
    }
    for (const s of page.jobs) show(s);
    next = page.next;
    $("more").hidden = !next;
    showEmpty();
    sayShown();
    startStreams();
  } catch (e) {
    say(e.message, true);
  }
}

async function cancelJob(id) {
  try {
    const r = await api("/v1/batch/" + id, {method: "DELETE"});
    const job = jobs.get(id);
    const after = await r.json();
    if (job) {
      if (job.ctl) { job.ctl.abort(); job.ctl = null; }
      stopWaiting(job);
      job.summary = after;
      paint(job);
    }
    say("job " + id.slice(0, 12) + " cancelled");
  } catch (e) {
    say(e.message, true);
  }
}

async function retryJob(id) {
  try {
    const r = await api("/v1/batch/" + id + "/retry", {method: "POST"});
    const made = await r.json();
    say("retrying the failed and unfinished targets of job " + id.slice(0, 12) + " as job " +
      made.id.slice(0, 12));
    await refresh();
  } catch (e) {
    say(e.message, true);
  }
}

async function download(id) {
  try {
    const r = await api("/v1/batch/" + id + "/results");
    const url = URL.createObjectURL(await r.blob());
    const a = el("a", {href: url, download: id + ".ndjson"});
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (e) {
    say(e.message, true);
  }
}

$("keyform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(KEY, $("key").value.trim());
  $("key").value = "";
  who();
  load(false);
});
$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  for (const j of jobs.values()) if (j.ctl) j.ctl.abort();
  jobs.clear();
  $("jobs").replaceChildren();
  $("who").textContent = "";
  showEmpty();
  say("Key forgotten.");
});
$("filter").addEventListener("change", () => load(false));
$("reload").addEventListener("click", () => load(false));
$("more").addEventListener("click", () => load(true));
setInterval(() => {
  if (key() && document.visibilityState === "visible") refresh();
}, POLL_MS);
if (key()) { who(); load(false); } else { showEmpty(); $("key").focus(); }
"""

_BODY = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>trio-batch: your jobs</title>
<link rel="icon" href="data:,">
<style>{style}</style>
</head>
<body>
<main>
<h1>trio-batch: your jobs</h1>
<form id="keyform">
  <label for="key">API key
    <input id="key" name="key" type="password" autocomplete="off" spellcheck="false"
      aria-describedby="keyhelp" placeholder="tb_...">
  </label>
  <button class="primary" type="submit">Use key</button>
  <button id="forget" type="button">Forget key</button>
  <label for="filter">Show
    <select id="filter">
      <option value="">all jobs</option>
      <option value="live">live (queued, running)</option>
      <option value="done">done</option>
      <option value="partial,failed">partial or failed</option>
      <option value="cancelled">cancelled</option>
    </select>
  </label>
  <button id="reload" type="button">Reload</button>
</form>
<p id="keyhelp" class="counts">The key stays in this tab (sessionStorage) and is sent only to
this server. Live jobs update as their targets finish, and say when a target waits for its
site; new jobs show within a second.</p>
<p id="who"></p>
<p id="message" role="status" aria-live="polite"></p>
<table>
  <caption class="sr-only">Your jobs, newest first</caption>
  <thead><tr><th scope="col">Job</th><th scope="col">Status</th><th scope="col">Created</th>
    <th scope="col">Targets</th><th scope="col">Actions</th></tr></thead>
  <tbody id="jobs"></tbody>
</table>
<section id="empty" hidden aria-labelledby="empty-title">
<h2 id="empty-title">No jobs yet: how to start one</h2>
<ol>
  <li>Get a key: the server's operator makes one with <code>trio-batch keys add NAME</code>
    (it prints the key once), and you paste it above.</li>
  <li>Submit a batch with curl, here or from any shell:
<pre><code>curl -s -X POST <span class="origin"></span>/v1/batch \
  -H "Authorization: Bearer $KEY" \
  -d '{"targets": [{"url": "https://example.org/"}], "concurrency": 4}'</code></pre></li>
  <li>Or from an agent over MCP: give its client the URL
    <code><span class="origin"></span>/mcp</code> with the header
    <code>Authorization: Bearer KEY</code>, and let it call <code>batch_submit</code>; for an
    agent on your own machine, <code>trio-batch mcp</code> runs the same tools on stdio.</li>
</ol>
<p class="counts">A job shows here within a second of its submit, and follows its targets as
they land.</p>
</section>
<button id="more" type="button" hidden>Older jobs</button>
</main>
<script>{script}</script>
</body>
</html>
"""

PAGE = _BODY.replace("{style}", _STYLE).replace("{script}", _SCRIPT).encode()


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


HEADERS = {
    "Content-Security-Policy": (
        f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; "
        "connect-src 'self'; img-src 'self' blob: data:; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


async def ui_page(request: Request) -> Response:
    """The page; no key needed to load it (it holds no data)."""
    return HTMLResponse(PAGE, headers=HEADERS)
