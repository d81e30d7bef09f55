// Quartermaster dashboard: a read-only view of one job queue, built from the same HTTP API that
// boto3 and `qm` use (AWS Batch REST-JSON under /v1, Quartermaster's own usage under /qm/v1).
//
// House rules: no framework, no network beyond this origin, and no server string ever reaches
// innerHTML — every text goes through textContent or setAttribute (see `h`). The page refreshes
// every REFRESH_MS while the tab is visible; a failed refresh keeps the last data on screen and
// says that the server cannot be reached.
//
// Signing in: the server refuses a request without a signature or a session with 403
// MissingAuthenticationTokenException; the page then shows a form for an access key pair,
// POSTs it once to /qm/v1/session, and from then on the browser sends the HttpOnly session
// cookie the server set. The secret is never kept: not in localStorage or sessionStorage, not
// in a variable beyond the sign-in call, not in the URL. For automation the page also takes the
// pair from its fragment, `#key=<id>&secret=<secret>[&view=/queue/NAME]`, removes the fragment
// with history.replaceState before anything else runs (a fragment never reaches the server),
// signs in with it and shows `view`.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  const STATUSES = ["RUNNING", "SCHEDULED", "RUNNABLE", "FAILED", "SUCCEEDED"];
  const ACTIVE = ["RUNNING", "SCHEDULED", "RUNNABLE"];
  const TERMINAL = new Set(["SUCCEEDED", "FAILED"]);
  // Bounds: pages per status in the jobs table, job descriptions kept, parallel requests.
  const MAX_PAGES_PER_STATUS = 2;
  const MAX_CACHED_JOBS = 2000;
  const PARALLEL = 6;
  const SVG_NS = "http://www.w3.org/2000/svg";

  const state = {
    queues: [],
    queue: null,          // selected queue name
    filter: "ALL",
    paused: false,
    timer: null,
    inFlight: false,
    again: false,         // a refresh was asked for while one was in flight
    skewMs: 0,
    skewExact: false,            // server clock minus this browser's, from the snapshot's lastUpdatedAt
    lastOk: null,         // Date of the last successful refresh
    described: new Map(), // jobId -> DescribeServiceJob (terminal jobs are kept, others refreshed)
    history: { window: "day", at: 0, key: "", report: null }, // the last usage report fetched
    recentWindow: "hour", // the in-memory history's window (/qm/v1/history)
    jobs: { share: "", name: "", submitter: "", sort: "age" }, // the jobs table's filters (from the route)
    names: new Map(),     // jobId -> jobName, to name the jobs that reasons mention by id
    who: null,            // GET /qm/v1/whoami of the signed-in principal
    signedOut: false,     // the sign-in form is shown: nothing is fetched or refreshed
  };
  // The history changes slowly and costs the server an archive read: fetched at most this often.
  const HISTORY_MS = 60000;

  // -- DOM helpers --------------------------------------------------------------------------

  // h("td", {class: "x", "data-testid": "y"}, "text", childNode, ...): text children become
  // text nodes, so server strings are never parsed as HTML.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function s(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      node.setAttribute(k, v === true ? "" : String(v));
    }
  }

  function append(node, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function replace(id, ...children) {
    const node = document.getElementById(id);
    node.replaceChildren();
    append(node, children);
  }

  // Each cell carries its column's name (data-label), which narrow screens show next to it.
  function table(caption, headers, rows, attrs) {
    for (const row of rows) {
      Array.from(row.children).forEach((cell, i) => { if (headers[i]) cell.setAttribute("data-label", headers[i]); });
    }
    return h("div", { class: "table-wrap" },
      h("table", attrs,
        caption ? h("caption", { class: "visually-hidden" }, caption) : null,
        h("thead", null, h("tr", null, headers.map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", null, rows)));
  }

  // -- formatting ---------------------------------------------------------------------------

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "—";
    if (ms < 10000) return `${(Math.max(0, ms) / 1000).toFixed(1)}s`;
    let sec = Math.round(ms / 1000);
    if (sec < 60) return `${sec}s`;
    let min = Math.floor(sec / 60); sec %= 60;
    if (min < 60) return `${min}m ${sec}s`;
    let hr = Math.floor(min / 60); min %= 60;
    if (hr < 48) return `${hr}h ${min}m`;
    return `${Math.floor(hr / 24)}d ${hr % 24}h`;
  }

  // ISO 8601 in the browser's time zone with its UTC offset (`2026-12-01T14:03:09+01:00`),
  // as the CLI prints times: unambiguous whatever the reader's locale.
  function isoParts(ms) {
    const d = new Date(ms);
    const p = (n, w = 2) => String(Math.abs(n)).padStart(w, "0");
    const off = -d.getTimezoneOffset();
    const zone = `${off < 0 ? "-" : "+"}${p(Math.floor(Math.abs(off) / 60))}:${p(Math.abs(off) % 60)}`;
    return {
      date: `${p(d.getFullYear(), 4)}-${p(d.getMonth() + 1)}-${p(d.getDate())}`,
      time: `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`,
      zone,
    };
  }

  function fmtTime(ms) {
    if (!ms) return "—";
    const t = isoParts(ms);
    return `${t.date}T${t.time}${t.zone}`;
  }

  // Ages are measured on the server's clock, so that a browser with a wrong clock still shows
  // how long jobs have waited.
  function serverNow() {
    return Date.now() + state.skewMs;
  }

  function fmtClock(ms) {
    const t = isoParts(ms);
    return `${t.time}${t.zone}`;
  }

  function fmtNum(n) {
    if (n === null || n === undefined) return "—";
    return String(Math.round(n * 100) / 100);
  }

  // Instance-hours in the unit that shows them best: short test runs in seconds, a quarter
  // in hours.
  function fmtHours(h) {
    if (!h) return "0 h";
    if (h < 1 / 60) return `${Math.round(h * 3600)} s`;
    if (h < 1) return `${Math.round(h * 60)} min`;
    return `${fmtNum(h)} h`;
  }

  function idOfArn(arn) {
    const s = String(arn || "");
    return s.slice(s.lastIndexOf("/") + 1);
  }

  // The machine code at the start of a pending reason (`NOTHING_TO_BORROW: ...`), if any.
  function reasonCode(reason) {
    const m = /^([A-Z][A-Z_]+(?::[A-Z][A-Z_]+)?)(?=[:\s]|$)/.exec(reason || "");
    return m ? m[1] : null;
  }

  const JOB_ID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

  // Text with every job id in it replaced by a link to that job, named when its name is known
  // (`learnNames` looks the others up for the next refresh).
  function withJobLinks(text) {
    const out = [];
    let last = 0;
    for (const m of text.matchAll(JOB_ID)) {
      if (m.index > last) out.push(text.slice(last, m.index));
      const id = m[0];
      out.push(h("a", { href: `#/job/${encodeURIComponent(id)}`, "data-testid": "reason-job", "data-job-id": id, title: id },
        state.names.get(id) || id));
      last = m.index + id.length;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }

  // Remembers job names, bounded like the descriptions.
  function nameJob(id, name) {
    if (!id || !name) return;
    if (state.names.size >= MAX_CACHED_JOBS) state.names.clear();
    state.names.set(id, name);
  }

  // Looks up the names of the jobs that `texts` mention by id and no listing named (a few per
  // refresh: a job preempted by one outside the listing).
  async function learnNames(texts) {
    const unknown = new Set();
    for (const t of texts) for (const m of String(t || "").matchAll(JOB_ID)) if (!state.names.has(m[0])) unknown.add(m[0]);
    await pool(Array.from(unknown).slice(0, PARALLEL * 2), (id) => describe(id).then((j) => nameJob(id, j.jobName)).catch(() => null));
  }

  function reasonCell(reason) {
    // One span in the cell, so that narrow screens lay it out as one value.
    const text = h("span", null);
    const code = reasonCode(reason);
    if (code) {
      text.appendChild(h("code", { class: "code", "data-testid": "reason-code" }, code));
      const rest = reason.slice(code.length).replace(/^[\s:\u2013\u2014-]+/, "").trim();
      if (rest) append(text, [" ", withJobLinks(rest)]);
    } else {
      append(text, [withJobLinks(reason || "")]);
    }
    return h("td", { class: "reason", "data-testid": "reason" }, text);
  }

  function statusBadge(status) {
    const st = status || "UNKNOWN";
    return h("span", { class: `badge st-${st.toLowerCase()}`, "data-testid": "status" }, st);
  }

  function jobLink(id, name) {
    return h("a", { href: `#/job/${encodeURIComponent(id)}`, "data-testid": "job-link", "data-job-id": id }, name || id);
  }

  // -- API ----------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(message, reachable) { super(message); this.reachable = reachable; }
  }

  async function call(method, path, body) {
    let res;
    try {
      res = await fetch(path, {
        method,
        headers: body === undefined ? {} : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (e) {
      throw new ApiError(`The dashboard cannot reach the Quartermaster server at ${location.origin} (${e.message || e}); is qm serve running?`, false);
    }
    // Until a snapshot gives the server's clock to the millisecond, its Date header (to the
    // second) will do.
    const date = Date.parse(res.headers.get("date") || "");
    if (!state.skewExact && isFinite(date)) state.skewMs = date + 500 - Date.now();
    const text = await res.text();
    let data = null;
    try { data = text ? JSON.parse(text) : {}; } catch (_) { data = null; }
    if (!res.ok) {
      const msg = (data && (data.message || data.Message)) || text.slice(0, 200) || res.statusText;
      const err = new ApiError(`${path}: HTTP ${res.status}: ${msg}`, true);
      err.status = res.status;
      // AWS names the error in __type (`prefix#Code`) and x-amzn-ErrorType (`Code:url`).
      err.code = String((data && data.__type) || res.headers.get("x-amzn-ErrorType") || "").split("#").pop().split(":")[0];
      throw err;
    }
    if (data === null) throw new ApiError(`${path}: the answer is not JSON`, true);
    return data;
  }

  const api = (op, body) => call("POST", `/v1/${op}`, body || {});

  // Runs `fn` over `items` with at most PARALLEL requests in flight.
  async function pool(items, fn) {
    const out = new Array(items.length);
    let next = 0;
    async function worker() {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]);
      }
    }
    await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
    return out;
  }

  async function listJobs(queue, status) {
    const out = [];
    let token;
    for (let page = 0; page < MAX_PAGES_PER_STATUS; page++) {
      const body = { jobQueue: queue, jobStatus: status, maxResults: 100 };
      if (token) body.nextToken = token;
      const r = await api("listservicejobs", body);
      out.push(...(r.jobSummaryList || []));
      token = r.nextToken;
      if (!token) return { jobs: out, more: false };
    }
    return { jobs: out, more: true };
  }

  async function describe(jobId, force) {
    const cached = state.described.get(jobId);
    if (cached && !force && TERMINAL.has(cached.status)) return cached;
    const job = await api("describeservicejob", { jobId });
    if (state.described.size >= MAX_CACHED_JOBS) state.described.clear();
    state.described.set(jobId, job);
    return job;
  }

  // Per share and instance type: entitled, ownUse, borrowed, lentOut, stopping, runnable.
  // From /qm/v1/usage; a server without it gets what ListQuotaShares and the snapshot tell
  // (lent out and stopping are then unknown).
  async function loadUsage(queue, snapshot, runnableJobs) {
    try {
      const r = await call("GET", "/qm/v1/usage");
      const q = (r.queues || []).find((x) => x.jobQueue === queue) || {};
      // pool and flows are absent from older servers (and flows when nobody borrows).
      return { shares: q.shares || [], pool: q.pool || null, flows: q.flows || [],
        idle: q.idleWhileWaiting || [], fairness: q.fairness || null, derived: false };
    } catch (e) {
      // An older server has no /qm/v1/usage: derive what we can. A refusal is no such server.
      if (!e.reachable || e.status === 401 || e.status === 403) throw e;
    }
    const shares = [];
    let token;
    do {
      const r = await api("listquotashares", token ? { jobQueue: queue, nextToken: token } : { jobQueue: queue });
      shares.push(...(r.quotaShares || []));
      token = r.nextToken;
    } while (token);
    const used = new Map();
    const util = ((snapshot.queueUtilization || {}).quotaShareUtilization || {}).topCapacityUtilization || [];
    for (const u of util) {
      for (const c of u.capacityUsage || []) used.set(`${u.quotaShareName}\u0000${c.capacityUnit}`, c.quantity || 0);
    }
    const waiting = new Map();
    for (const j of runnableJobs) waiting.set(j.quotaShareName, (waiting.get(j.quotaShareName) || 0) + 1);
    const out = [];
    for (const sh of shares) {
      for (const lim of sh.capacityLimits || []) {
        const u = used.get(`${sh.quotaShareName}\u0000${lim.capacityUnit}`) || 0;
        out.push({
          quotaShareName: sh.quotaShareName, capacityUnit: lim.capacityUnit,
          entitled: lim.maxCapacity, used: u, ownUse: Math.min(u, lim.maxCapacity),
          borrowed: Math.max(0, u - lim.maxCapacity), lentOut: null, stopping: null,
          runnable: waiting.get(sh.quotaShareName) || 0,
        });
      }
    }
    return { shares: out, pool: null, flows: null, derived: true };
  }

  // -- queue view ---------------------------------------------------------------------------

  async function loadQueues() {
    const queues = [];
    let token;
    do {
      const r = await api("describejobqueues", token ? { nextToken: token } : {});
      queues.push(...(r.jobQueues || []));
      token = r.nextToken;
    } while (token);
    state.queues = queues.map((q) => q.jobQueueName).filter(Boolean);
    if (!state.queue || !state.queues.includes(state.queue)) state.queue = state.queues[0] || null;
    const sel = document.getElementById("queue");
    const current = Array.from(sel.options).map((o) => o.value).join("\u0000");
    if (current !== state.queues.join("\u0000")) {
      sel.replaceChildren(...state.queues.map((n) => h("option", { value: n }, n)));
    }
    if (state.queue) sel.value = state.queue;
    sel.disabled = state.queues.length === 0;
  }

  async function refreshQueue() {
    await loadQueues();
    const queue = state.queue;
    if (!queue) {
      replace("shares-body", h("p", { class: "muted" }, "No job queue yet. Create one with ", h("code", null, "qm apply -f cluster.yaml"), " or the AWS CLI."));
      replace("share-heads"); replace("front"); replace("jobs-body");
      return;
    }
    const wanted = state.filter === "ALL" ? STATUSES
      : state.filter === "ACTIVE" ? ACTIVE : [state.filter];
    // RUNNABLE is always listed: the snapshot's jobs are named from it.
    const listed = Array.from(new Set([...wanted, "RUNNABLE"]));
    const [snapshot, lists] = await Promise.all([
      api("getjobqueuesnapshot", { jobQueue: queue }),
      Promise.all(listed.map((st) => listJobs(queue, st))),
    ]);
    const stamp = (snapshot.frontOfQueue || {}).lastUpdatedAt;
    if (stamp) { state.skewMs = stamp - Date.now(); state.skewExact = true; }
    const byStatus = new Map(listed.map((st, i) => [st, lists[i]]));
    const runnable = byStatus.get("RUNNABLE").jobs;
    // An older server has no history: the rest of the page still works.
    const absent = (e) => { if (e.status === 404) return null; throw e; };
    const [usage, history, recent] = await Promise.all([
      loadUsage(queue, snapshot, runnable),
      loadHistory(queue).catch(absent),
      call("GET", `/qm/v1/history?${new URLSearchParams({ jobQueue: queue, window: state.recentWindow })}`).catch(absent),
    ]);

    let listedJobs = [];
    let more = false;
    for (const st of wanted) {
      listedJobs.push(...byStatus.get(st).jobs);
      more = more || byStatus.get(st).more;
    }
    for (const l of lists) for (const j of l.jobs) nameJob(j.jobId, j.jobName);
    fillJobFilters(usage, listedJobs);
    const shown = filterJobs(listedJobs);
    await learnNames(shown.map((j) => j.statusReason).concat(runnable.map((j) => j.statusReason)));
    // A qm server's listing carries each job's priority (an extension); only a server whose
    // listing lacks it costs a DescribeServiceJob per job.
    const details = await pool(shown, (j) => (j.schedulingPriority !== undefined
      ? Promise.resolve(j)
      : describe(j.jobId).catch(() => null)));
    // The selection changed, or the user signed out, while loading.
    if (queue !== state.queue || state.signedOut) return;

    renderShares(usage);
    renderPool(usage);
    renderFlows(usage);
    renderRecent(recent);
    renderHistory(history, queue);
    const byId = new Map(runnable.map((j) => [j.jobId, j]));
    shown.forEach((j, i) => { if (details[i]) byId.set(j.jobId, Object.assign({}, j, { schedulingPriority: details[i].schedulingPriority })); });
    renderSnapshot(snapshot, byId);
    renderJobs(shown, details, more);
  }

  function renderShares(usage) {
    const rows = usage.shares;
    if (rows.length === 0) {
      replace("shares-body", h("p", { class: "muted" }, "This queue has no quota shares."));
      return;
    }
    // One scale for every bar of the queue, so that lengths compare across shares.
    const scale = Math.max(1, ...rows.map((r) => Math.max(r.entitled || 0, (r.ownUse || 0) + (r.lentOut || 0)) + (r.borrowed || 0)));
    const pct = (n) => `${(100 * (n || 0)) / scale}%`;
    const list = h("ul", { class: "shares", "data-testid": "share-list" });
    for (const r of rows) {
      const entitled = r.entitled || 0;
      const own = Math.min(r.ownUse || 0, entitled);
      const lent = Math.min(r.lentOut || 0, Math.max(0, entitled - own));
      const idle = Math.max(0, entitled - own - lent);
      // Which instances are stopping is not reported: borrowed ones first, since a preempted
      // borrower is what usually stops.
      const stopBorrowed = Math.min(r.stopping || 0, r.borrowed || 0);
      const stopOwn = Math.min((r.stopping || 0) - stopBorrowed, own);
      const stopSeg = (n) => (n > 0 ? h("div", { class: "seg stopping", "data-testid": "seg-stopping", style: `width:${pct(n)}`, title: `stopping ${fmtNum(n)}` }) : null);
      const label = `${r.quotaShareName} on ${r.capacityUnit}: entitled ${fmtNum(r.entitled)}, own use ${fmtNum(r.ownUse)}, ` +
        `borrowed ${fmtNum(r.borrowed)}, lent out ${fmtNum(r.lentOut)}`;
      const bar = h("div", { class: "bar", role: "img", "aria-label": label },
        h("div", { class: "entitled-box", style: `width:${pct(entitled)}` }),
        h("div", { class: "seg own", style: `width:${pct(own - stopOwn)}`, title: `own use ${fmtNum(r.ownUse)}` }),
        stopSeg(stopOwn),
        h("div", { class: "seg lent", style: `width:${pct(lent)}`, title: `lent out ${fmtNum(r.lentOut)}` }),
        h("div", { class: "seg idle", style: `width:${pct(idle)}`, title: `idle ${fmtNum(idle)}` }),
        h("div", { class: "seg borrowed", style: `width:${pct((r.borrowed || 0) - stopBorrowed)}`, title: `borrowed ${fmtNum(r.borrowed)}` }),
        stopSeg(stopBorrowed));
      const num = (key, text, value) => h("span", { class: `num ${key}` },
        `${text} `, h("b", { "data-testid": `share-${key}` }, fmtNum(value)));
      list.appendChild(h("li", {
        class: "share" + ((r.borrowed || 0) > 0 ? " is-borrowing" : "") + ((r.lentOut || 0) > 0 ? " is-lending" : ""),
        "data-testid": "share-row", "data-share": r.quotaShareName, "data-unit": r.capacityUnit,
      },
        h("div", { class: "share-name" },
          h("strong", { "data-testid": "share-name" }, r.quotaShareName),
          h("span", { class: "unit" }, r.capacityUnit)),
        bar,
        h("p", { class: "nums" },
          num("entitled", "entitled", r.entitled),
          num("own", "own use", r.ownUse),
          num("borrowed", "borrowed", r.borrowed),
          num("lent", "lent out", r.lentOut),
          num("runnable", "runnable", r.runnable),
          r.stopping ? num("stopping", "stopping", r.stopping) : null),
        shareConf(r),
        shareFairness(usage.fairness, r)));
    }
    replace("shares-body", fairnessLine(usage.fairness), list, groupsTable(usage.fairness),
      usage.derived ? h("p", { class: "muted small" }, "Lent-out capacity is unknown: this server has no /qm/v1/usage.") : null);
  }

  // What the share does with idle capacity, how much it may borrow and whether its jobs
  // preempt each other; nothing from servers that do not report it.
  function shareConf(r) {
    if (!r.strategy) return null;
    const parts = [h("span", { "data-testid": "share-strategy" }, r.strategy)];
    if (r.strategy === "RESERVE") parts.push(" · ", h("span", { class: "never" }, "never lends"));
    if (r.strategy === "LEND_AND_BORROW" && r.borrowLimit !== undefined) {
      parts.push(" · borrow limit ", h("span", { "data-testid": "share-borrow-limit" }, r.borrowLimit < 0 ? "unlimited" : `${r.borrowLimit}%`));
    } else if (r.strategy !== "LEND_AND_BORROW") {
      parts.push(" · ", h("span", { "data-testid": "share-borrow-limit" }, "never borrows"));
    }
    if (r.inSharePreemption !== undefined) {
      parts.push(" · in-share preemption ", h("span", { "data-testid": "share-preemption" }, r.inSharePreemption ? "on" : "off"));
    }
    if (r.protection) parts.push(" · ", r.protection);
    return h("p", { class: "share-conf", "data-testid": "share-conf" }, parts);
  }

  // How the queue assigns idle capacity (the scheduling policy's qm:idle-assignment and
  // qm:fair-reclaim tags); nothing from servers that do not report it.
  function fairnessLine(f) {
    if (!f) return null;
    return h("p", { class: "small", "data-testid": "idle-assignment" }, "Idle capacity: ",
      h("b", { "data-testid": "idle-assignment-mode" }, f.idleAssignment),
      ` · fair reclaim ${f.fairReclaim ? "on" : "off"}`);
  }

  // A weighted borrowed share as status reasons write it.
  function fmtShare(x) {
    return x >= 1e9 ? "∞" : (Math.round(x * 100) / 100).toFixed(2);
  }

  // A share's standing under fair sharing: its weight and group, its weighted borrowed
  // share (what FAIR_SHARE ranks borrowers by) and its fair share of the instance type.
  function shareFairness(f, r) {
    const st = f && (f.shares || []).find((x) => x.quotaShareName === r.quotaShareName);
    if (!st) return null;
    const fair = (st.fairShare || {})[r.capacityUnit];
    const parts = [`weight ${st.weight}`];
    if (st.group) parts.push(` · group ${st.group}`);
    parts.push(" · weighted share ", h("b", { "data-testid": "share-weighted" }, fmtShare(st.weightedShare)));
    parts.push(" · fair share ", h("b", { "data-testid": "share-fair" }, fair === undefined ? "—" : fmtNum(Math.round(fair * 100) / 100)));
    return h("p", { class: "share-conf", "data-testid": "share-fairness" }, parts);
  }

  // The queue's groups of shares: members, weight, and per instance type what the members
  // hold against the group's limit.
  function groupsTable(f) {
    if (!f || !(f.groups || []).length) return null;
    const rows = f.groups.map((g) => {
      const units = Array.from(new Set([...Object.keys(g.limits || {}), ...Object.keys(g.usage || {})])).sort();
      const held = units.map((u) => {
        const used = (g.usage || {})[u] || 0;
        const lim = (g.limits || {})[u];
        return lim === undefined ? `${u} ${used}` : `${u} ${used}/${lim}`;
      }).join(", ");
      return h("tr", { "data-testid": "group-row", "data-group": g.name },
        h("th", { scope: "row" }, g.name),
        h("td", null, (g.shares || []).join(", ") || "—"),
        h("td", { class: "num" }, String(g.weight)),
        h("td", { "data-testid": "group-used" }, held || "—"),
        h("td", { class: "num", "data-testid": "group-weighted" }, fmtShare(g.weightedShare)));
    });
    return table("Groups of shares", ["Group", "Shares", "Weight", "Used / limit", "Weighted share"], rows, { "data-testid": "groups-table" });
  }

  const IDLE_CAUSES = {
    reservation: "held for a reservation",
    reserve: "RESERVE or unassigned: never lent",
    borrow_limit: "borrow limit reached",
    no_borrowing: "share full, does not borrow",
    group_limit: "group at its ceiling",
    never_fits: "job can never run",
    other: "preemption under way",
  };

  function renderPool(usage) {
    if (!usage.pool) {
      replace("pool-body", h("p", { class: "muted small" }, "This server does not report its pool."));
      return;
    }
    // Free instances a waiting job fits: the sign that the policy wastes the cluster.
    const idleOf = (unit) => (usage.idle || []).find((i) => i.capacityUnit === unit);
    const idleCell = (unit) => {
      const i = idleOf(unit);
      if (!i) return h("td", { "data-testid": "pool-idle" }, "—");
      return h("td", { class: "warn", "data-testid": "pool-idle", "data-cause": i.cause },
        `${i.idle} (${IDLE_CAUSES[i.cause] || i.cause}; `, jobLink(i.jobId, i.jobName), " waits)");
    };
    const rows = usage.pool.map((p) => h("tr", { "data-testid": "pool-row", "data-unit": p.capacityUnit },
      h("th", { scope: "row" }, p.capacityUnit),
      h("td", { class: "num", "data-testid": "pool-limit" }, String(p.environmentMax)),
      h("td", { class: "num", "data-testid": "pool-physical" }, p.physical === undefined ? "—" : String(p.physical)),
      h("td", { class: "num", "data-testid": "pool-used" }, String(p.used)),
      h("td", { class: "num", "data-testid": "pool-free" }, String(p.free)),
      idleCell(p.capacityUnit)));
    replace("pool-body", rows.length === 0 ? h("p", { class: "muted" }, "No instance type yet.")
      : table("Pool by instance type", ["Instance type", "Limit", "Physical", "Used", "Free", "Idle while jobs wait"], rows, { "data-testid": "pool-table" }));
  }

  // One matrix per instance type: a row per lender, a column per borrower.
  function renderFlows(usage) {
    if (usage.flows === null) {
      replace("flows-body", h("p", { class: "muted small" }, "This server does not report who lends to whom."));
      return;
    }
    if (usage.flows.length === 0) {
      replace("flows-body", h("p", { class: "muted", "data-testid": "flows-empty" }, "Nobody borrows now."));
      return;
    }
    const units = Array.from(new Set(usage.flows.map((f) => f.capacityUnit))).sort();
    const out = units.map((unit) => {
      const fl = usage.flows.filter((f) => f.capacityUnit === unit);
      const lenders = Array.from(new Set(fl.map((f) => f.lender))).sort();
      const borrowers = Array.from(new Set(fl.map((f) => f.borrower))).sort();
      const rows = lenders.map((l) => h("tr", { "data-testid": "flow-row", "data-lender": l },
        h("th", { scope: "row" }, l),
        borrowers.map((b) => {
          const f = fl.find((x) => x.lender === l && x.borrower === b);
          return h("td", { class: "flow-cell" + (f ? " has" : ""), "data-testid": "flow-cell", "data-lender": l, "data-borrower": b, "data-unit": unit,
            title: f ? `${l} lends ${fmtNum(f.instances)} × ${unit} to ${b}` : null }, f ? fmtNum(f.instances) : "·");
        })));
      return h("div", { class: "flow-unit", "data-testid": "flow-unit", "data-unit": unit },
        h("h3", null, unit),
        table(`Lenders to borrowers on ${unit}`, ["Lender ↓ · borrower →", ...borrowers], rows, { class: "flow-matrix", "data-testid": "flow-matrix" }));
    });
    replace("flows-body", out);
  }

  // -- recent history (in memory on the server) --------------------------------------------

  // One small chart per share (own and borrowed instances stacked), then one for the queue
  // (runnable jobs as a line, preemptions as ticks), all on the same time axis.
  function renderRecent(hist) {
    if (!hist) {
      replace("recent-body", h("p", { class: "muted" }, "This server keeps no recent history (/qm/v1/history)."));
      return;
    }
    if (hist.at.length === 0) {
      replace("recent-body", h("p", { class: "muted", "data-testid": "recent-empty" }, "No sample yet: the server samples every ", fmtDuration(hist.sampleIntervalMs), "."));
      return;
    }
    const W = 720, H = 70;
    const x = (t) => ((t - hist.since) / Math.max(1, hist.until - hist.since)) * W;
    const bw = Math.max(1, (hist.stepMs / Math.max(1, hist.until - hist.since)) * W);
    const scale = Math.max(1, ...hist.shares.map((sh) => Math.max(...sh.ownUse.map((o, i) => o + sh.borrowed[i]))));
    const chart = (label, attrs, ...parts) => h("div", { class: "chart-wrap", role: "img", "aria-label": label },
      s("svg", Object.assign({ viewBox: `0 0 ${W} ${H}`, class: "recent-chart", preserveAspectRatio: "none" }, attrs), ...parts));
    const list = h("ul", { class: "history", "data-testid": "recent-list" });
    for (const sh of hist.shares) {
      const rects = [];
      hist.at.forEach((t, i) => {
        const own = (H * sh.ownUse[i]) / scale, bor = (H * sh.borrowed[i]) / scale;
        if (own > 0) rects.push(s("rect", { x: x(t), y: H - own, width: bw, height: own, class: "r-own" }));
        if (bor > 0) rects.push(s("rect", { x: x(t), y: H - own - bor, width: bw, height: bor, class: "r-borrowed" }));
      });
      const maxOwn = Math.max(0, ...sh.ownUse), maxBor = Math.max(0, ...sh.borrowed);
      list.appendChild(h("li", { class: "history-row", "data-testid": "recent-share", "data-share": sh.quotaShareName },
        h("div", { class: "share-name" }, h("strong", null, sh.quotaShareName)),
        chart(`${sh.quotaShareName}: at most ${fmtNum(maxOwn)} own and ${fmtNum(maxBor)} borrowed instances`,
          { "data-testid": "recent-chart", "data-points": hist.at.length, "data-max-own": maxOwn, "data-max-borrowed": maxBor }, ...rects),
        h("p", { class: "nums" },
          h("span", { class: "num" }, "most own ", h("b", null, fmtNum(maxOwn))),
          h("span", { class: "num borrowed" }, "most borrowed ", h("b", null, fmtNum(maxBor))),
          h("span", { class: "num" }, "preempted ", h("b", null, String(sh.preemptions.reduce((a, b) => a + b, 0)))))));
    }
    const depthMax = Math.max(1, ...hist.queueDepth);
    const line = hist.at.map((t, i) => `${(x(t) + bw / 2).toFixed(1)},${(H - (H * hist.queueDepth[i]) / depthMax).toFixed(1)}`).join(" ");
    const ticks = [];
    hist.at.forEach((t, i) => { if (hist.preemptions[i] > 0) ticks.push(s("rect", { x: x(t), y: H - 12, width: Math.max(2, bw), height: 12, class: "r-preempt" }, s("title", null, `${fmtTime(t)}: ${hist.preemptions[i]} preemption(s)`))); });
    const total = hist.preemptions.reduce((a, b) => a + b, 0);
    list.appendChild(h("li", { class: "history-row", "data-testid": "recent-queue" },
      h("div", { class: "share-name" }, h("strong", null, "Queue")),
      chart(`Runnable jobs, at most ${fmtNum(Math.max(...hist.queueDepth))}; ${total} preemption(s)`,
        { "data-testid": "recent-queue-chart", "data-points": hist.at.length, "data-preemptions": total },
        s("polyline", { points: line, class: "r-depth" }), ...ticks),
      h("p", { class: "nums" },
        h("span", { class: "num" }, "most runnable ", h("b", { "data-testid": "recent-depth" }, fmtNum(Math.max(...hist.queueDepth)))),
        h("span", { class: "num" }, "preemptions ", h("b", { "data-testid": "recent-preemptions" }, String(total))))));
    replace("recent-body", list, h("p", { class: "muted small" },
      `${fmtTime(hist.since)} to ${fmtTime(hist.until)}; one point per ${fmtDuration(hist.stepMs)}; bar height: ${fmtNum(scale)} instances.`));
  }

  // -- history ------------------------------------------------------------------------------

  async function loadHistory(queue) {
    const hist = state.history;
    const key = `${queue}/${hist.window}`;
    const now = serverNow();
    if (hist.report && hist.key === key && now - hist.at < HISTORY_MS) return hist.report;
    const hour = 3600000;
    const [span, every] = hist.window === "week" ? [7 * 24 * hour, "day"] : [24 * hour, "hour"];
    // Whole periods, ending with the current one.
    const until = Math.ceil(now / hour) * hour;
    const q = new URLSearchParams({ since: String(until - span), until: String(until), by: "share", every });
    const report = await call("GET", `/qm/v1/usage/report?${q}`);
    Object.assign(hist, { key, at: now, report });
    return report;
  }

  function renderHistory(report, queue) {
    if (!report) {
      replace("history-body", h("p", { class: "muted" }, "This server has no usage history (/qm/v1/usage/report)."));
      return;
    }
    const rows = report.rows.filter((r) => r.jobQueue === queue);
    // Every period of the window, also those without a row (the server splits at UTC hours
    // and days, as here).
    const len = report.every === "day" ? 86400000 : 3600000;
    const periods = [];
    for (let t = report.since; t < report.until; t = Math.min(Math.floor(t / len) * len + len, report.until)) periods.push(t);
    if (rows.length === 0) {
      replace("history-body", h("p", { class: "muted" }, "No share of this queue held or was entitled to capacity in this window."));
      return;
    }
    const byShare = new Map();
    for (const r of rows) {
      if (!byShare.has(r.quotaShareName)) byShare.set(r.quotaShareName, new Map());
      byShare.get(r.quotaShareName).set(r.periodStart, r);
    }
    // Average instances over a period = instance-hours / the period's hours; one scale for all.
    const avg = (r, part) => (r ? r.instanceHours[part] / ((r.periodEnd - r.periodStart) / 3600000) : 0);
    const entitled = (r) => avg(r, "withinEntitlement") + avg(r, "lentOut") + avg(r, "idleEntitlement");
    let scale = 1;
    for (const m of byShare.values()) for (const r of m.values()) scale = Math.max(scale, entitled(r) + avg(r, "borrowed"));
    const W = 720, H = 90, gap = 2, bw = (W - gap * periods.length) / periods.length;
    const list = h("ul", { class: "history", "data-testid": "history-list" });
    for (const [share, m] of byShare) {
      const svg = s("svg", { viewBox: `0 0 ${W} ${H + 14}`, class: "history-chart", preserveAspectRatio: "none", "aria-hidden": "true" });
      let used = 0, borrowed = 0, lent = 0, suffered = 0, caused = 0;
      periods.forEach((p, i) => {
        const r = m.get(p);
        if (!r) return;
        used += r.instanceHours.used; borrowed += r.instanceHours.borrowed; lent += r.instanceHours.lentOut;
        suffered += r.preemptionsSuffered; caused += r.preemptionsCaused;
        const x = i * (bw + gap);
        const own = (H * avg(r, "withinEntitlement")) / scale;
        const bor = (H * avg(r, "borrowed")) / scale;
        const tip = `${fmtTime(r.periodStart)}: own ${fmtHours(r.instanceHours.withinEntitlement)}, borrowed ${fmtHours(r.instanceHours.borrowed)}, lent out ${fmtHours(r.instanceHours.lentOut)}, preemptions ${r.preemptionsSuffered}`;
        const g = s("g", null, s("title", null, tip));
        const ent = (H * entitled(r)) / scale;
        if (ent > 0) g.appendChild(s("rect", { x, y: H - ent, width: bw, height: ent, class: "h-entitled" }));
        if (own > 0) g.appendChild(s("rect", { x, y: H - own, width: bw, height: own, class: "h-own" }));
        if (bor > 0) g.appendChild(s("rect", { x, y: H - own - bor, width: bw, height: bor, class: "h-borrowed" }));
        if (r.preemptionsSuffered > 0) g.appendChild(s("circle", { cx: x + bw / 2, cy: H + 7, r: Math.min(5, bw / 2), class: "h-preempt" }));
        g.appendChild(s("rect", { x, y: 0, width: bw, height: H + 14, class: "h-hit" }));
        svg.appendChild(g);
      });
      const label = `${share}: used ${fmtHours(used)} of instance time, of which borrowed ${fmtHours(borrowed)}; lent out ${fmtHours(lent)}; ` +
        `${suffered} preemption(s) suffered, ${caused} caused`;
      list.appendChild(h("li", { class: "history-row", "data-testid": "history-row", "data-share": share },
        h("div", { class: "share-name" }, h("strong", null, share)),
        h("div", { class: "chart-wrap", role: "img", "aria-label": label }, svg),
        h("p", { class: "nums" },
          h("span", { class: "num" }, "used ", h("b", { "data-testid": "history-used" }, fmtHours(used))),
          h("span", { class: "num borrowed" }, "borrowed ", h("b", { "data-testid": "history-borrowed" }, fmtHours(borrowed))),
          h("span", { class: "num lent" }, "lent out ", h("b", { "data-testid": "history-lent" }, fmtHours(lent))),
          h("span", { class: "num" }, "preempted ", h("b", { "data-testid": "history-preempted" }, String(suffered))),
          h("span", { class: "num" }, "caused ", h("b", { "data-testid": "history-caused" }, String(caused))))));
    }
    replace("history-body", list,
      h("p", { class: "muted small" }, `${fmtTime(report.since)} to ${fmtTime(report.until)}; bar height: ${fmtNum(scale)} instances; the pale box is the share's entitlement. `,
        ...report.notes.map((n) => h("span", { class: "note" }, n))));
  }

  function snapshotRows(entries, byId, withShare) {
    return entries.map((e, i) => {
      const id = idOfArn(e.jobArn);
      const j = byId.get(id) || {};
      return h("tr", { "data-testid": "snapshot-row", "data-job-id": id },
        withShare ? h("th", { scope: "row" }, withShare[i]) : h("td", { class: "num" }, String(i + 1)),
        h("td", null, jobLink(id, j.jobName)),
        withShare ? null : h("td", null, j.quotaShareName || "—"),
        h("td", { class: "num" }, j.schedulingPriority === undefined ? "—" : String(j.schedulingPriority)),
        h("td", { class: "num", title: fmtTime(e.earliestTimeAtPosition) }, fmtDuration(serverNow() - e.earliestTimeAtPosition)),
        reasonCell(j.statusReason));
    });
  }

  function renderSnapshot(snapshot, byId) {
    const heads = ((snapshot.frontOfQuotaShares || {}).quotaShares) || {};
    const names = Object.keys(heads).sort();
    const headEntries = names.map((n) => heads[n][0]).filter(Boolean);
    replace("share-heads", headEntries.length === 0
      ? h("p", { class: "muted", "data-testid": "share-heads-empty" }, "No share has a waiting job.")
      : table("Head of each share", ["Share", "Job", "Priority", "Waiting", "Reason"],
        snapshotRows(headEntries, byId, names), { "data-testid": "share-heads" }));
    const front = ((snapshot.frontOfQueue || {}).jobs) || [];
    replace("front", front.length === 0
      ? h("p", { class: "muted", "data-testid": "front-empty" }, "Nothing is waiting.")
      : table("Front of queue", ["#", "Job", "Share", "Priority", "Waiting", "Reason"],
        snapshotRows(front, byId, null), { "data-testid": "front-of-queue" }));
  }

  // How long a job waited for capacity: until its first start, or until now while it waits.
  function waitMs(j, now) {
    const until = j.scheduledAt || j.startedAt || (TERMINAL.has(j.status) ? j.stoppedAt : null) || now;
    return Math.max(0, until - (j.createdAt || until));
  }

  // The choices of the share and submitter filters: the queue's shares, and whoever submitted
  // a listed job (a qm server names them in its listing), keeping the current choice.
  function fillJobFilters(usage, jobs) {
    const fill = (id, values, current) => {
      const sel = document.getElementById(id);
      const all = Array.from(new Set(values.concat(current ? [current] : []))).sort();
      const now = Array.from(sel.options).map((o) => o.value).join("\u0000");
      if (now !== ["", ...all].join("\u0000")) sel.replaceChildren(h("option", { value: "" }, "All"), ...all.map((v) => h("option", { value: v }, v)));
      sel.value = current;
    };
    fill("share-filter", usage.shares.map((r) => r.quotaShareName).concat(jobs.map((j) => j.quotaShareName).filter(Boolean)), state.jobs.share);
    fill("submitter-filter", jobs.map((j) => j.submittedBy).filter(Boolean), state.jobs.submitter);
    document.getElementById("name-filter").value = state.jobs.name;
    document.getElementById("job-sort").value = state.jobs.sort;
  }

  function filterJobs(jobs) {
    const f = state.jobs;
    const needle = f.name.trim().toLowerCase();
    const out = jobs.filter((j) => (!f.share || j.quotaShareName === f.share)
      && (!f.submitter || j.submittedBy === f.submitter)
      && (!needle || String(j.jobName || "").toLowerCase().includes(needle) || j.jobId === f.name.trim()));
    const now = serverNow();
    if (f.sort === "wait") out.sort((a, b) => waitMs(b, now) - waitMs(a, now));
    return out;
  }

  function renderJobs(jobs, details, more) {
    if (jobs.length === 0) {
      replace("jobs-body", h("p", { class: "muted", "data-testid": "jobs-empty" }, "No job matches these filters."));
      return;
    }
    const now = serverNow();
    const rows = jobs.map((j, i) => {
      const d = details[i] || {};
      const wait = waitMs(j, now);
      return h("tr", { "data-testid": "job-row", "data-job-id": j.jobId, "data-status": j.status, "data-wait-ms": wait },
        h("td", null, jobLink(j.jobId, j.jobName)),
        h("td", null, j.quotaShareName || "—"),
        h("td", { class: "num" }, d.schedulingPriority === undefined ? "—" : String(d.schedulingPriority)),
        h("td", null, statusBadge(j.status)),
        reasonCell(j.statusReason),
        h("td", { "data-testid": "job-submitter" }, j.submittedBy || "—"),
        h("td", { class: "num", "data-testid": "job-wait", title: j.scheduledAt || j.startedAt ? `started ${fmtTime(j.startedAt || j.scheduledAt)}` : "still waiting" }, fmtDuration(wait)),
        h("td", { class: "num", title: fmtTime(j.createdAt) }, fmtDuration(now - j.createdAt)));
    });
    replace("jobs-body",
      table("Jobs", ["Name", "Share", "Priority", "Status", "Reason", "Submitter", "Wait", "Age"], rows, { "data-testid": "jobs-table" }),
      more ? h("p", { class: "muted small" }, `Showing the newest ${MAX_PAGES_PER_STATUS * 100} jobs of each status; `, h("code", null, "qm jobs"), " lists the rest.") : null);
  }

  // -- job view -----------------------------------------------------------------------------

  // Every attempt of a job, oldest first: ended ones (attempts[]), preempted ones
  // (recentPreemptedAttempts, the last 10) and the one that runs now, if any.
  function attemptsOf(job) {
    const out = [];
    for (const a of job.attempts || []) out.push({ ...a, preempted: false });
    for (const a of ((job.preemptionSummary || {}).recentPreemptedAttempts) || []) out.push({ ...a, preempted: true });
    out.sort((a, b) => (a.startedAt || 0) - (b.startedAt || 0));
    const latest = ((job.latestAttempt || {}).serviceResourceId || {}).value;
    const known = new Set(out.map((a) => (a.serviceResourceId || {}).value));
    if (!TERMINAL.has(job.status) && latest && !known.has(latest) && (job.status === "RUNNING" || job.status === "SCHEDULED")) {
      const lastStop = Math.max(0, ...out.map((a) => a.stoppedAt || a.startedAt || 0));
      const start = Math.max(job.startedAt || 0, lastStop) || job.scheduledAt || null;
      if (start) out.push({ serviceResourceId: { value: latest }, startedAt: start, stoppedAt: null, statusReason: job.status === "RUNNING" ? "still running" : "scheduled, starting", preempted: false, current: true });
    }
    return out;
  }

  function outcome(a) {
    if (a.current) return "running";
    if (a.preempted) return "preempted";
    if (!a.stoppedAt) return "stopping";
    return "ended";
  }

  function renderTimeline(job, attempts) {
    const now = serverNow();
    if (attempts.length === 0) {
      replace("timeline", h("p", { class: "muted", "data-testid": "timeline-empty" },
        job.status === "RUNNABLE" ? "No attempt yet: the job waits for capacity." : "No attempt recorded."));
      return;
    }
    const t0 = Math.min(job.createdAt || Infinity, ...attempts.map((a) => a.startedAt || Infinity));
    // A job that is not finished is drawn up to now, so that its wait after a preemption shows.
    const end = TERMINAL.has(job.status) ? (job.stoppedAt || 0) : now;
    const t1 = Math.max(t0 + 1000, end, ...attempts.map((a) => a.stoppedAt || now));
    const W = 1000, left = 135, right = 20, rowH = 28, top = 10, axisH = 30;
    const H = top + attempts.length * rowH + axisH;
    const x = (t) => left + ((t - t0) / (t1 - t0)) * (W - left - right);
    const svg = s("svg", {
      viewBox: `0 0 ${W} ${H}`, class: "timeline", role: "img", "data-testid": "timeline-svg",
      "aria-label": `Timeline of ${attempts.length} attempt(s), ${attempts.filter((a) => a.preempted).length} preempted`,
      preserveAspectRatio: "xMinYMin meet",
    });
    // Axis: five ticks relative to the submission.
    const axisY = top + attempts.length * rowH + 6;
    svg.appendChild(s("line", { x1: left, x2: W - right, y1: axisY, y2: axisY, class: "axis" }));
    for (let i = 0; i <= 4; i++) {
      const t = t0 + ((t1 - t0) * i) / 4;
      const tx = x(t);
      svg.appendChild(s("line", { x1: tx, x2: tx, y1: top - 4, y2: axisY + 4, class: "grid" }));
      svg.appendChild(s("text", { x: tx, y: axisY + 20, class: "tick", "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle" },
        i === 0 ? "submitted" : "+" + fmtDuration(t - t0)));
    }
    attempts.forEach((a, i) => {
      const y = top + i * rowH;
      const start = a.startedAt || t0;
      const stop = a.stoppedAt || now;
      const kind = outcome(a);
      const g = s("g", { class: `attempt ${kind}`, "data-testid": "attempt-bar", "data-preempted": a.preempted ? "true" : "false" },
        s("title", null, `Attempt ${i + 1} (${kind}): ${fmtTime(start)} → ${a.stoppedAt ? fmtTime(a.stoppedAt) : "now"}` +
          (a.statusReason ? `\n${a.statusReason}` : "")),
        s("text", { x: 0, y: y + 18, class: "row-label" }, `#${i + 1} ${kind}`),
        s("rect", { x: x(start), y: y + 4, width: Math.max(4, x(stop) - x(start)), height: rowH - 10, rx: 3 }));
      if (a.preempted) {
        const px = x(stop);
        g.appendChild(s("path", { d: `M${px - 6},${y + 2} L${px + 6},${y + rowH - 4} M${px + 6},${y + 2} L${px - 6},${y + rowH - 4}`, class: "mark" }));
      }
      svg.appendChild(g);
    });
    // Scrolls sideways on narrow screens rather than shrinking its labels out of legibility.
    replace("timeline", h("div", { class: "timeline-wrap" }, svg));
  }

  function renderAttemptTable(attempts) {
    if (attempts.length === 0) { replace("attempts"); return; }
    const rows = attempts.map((a, i) => h("tr", { "data-testid": "attempt-row", "data-preempted": a.preempted ? "true" : "false" },
      h("td", { class: "num" }, String(i + 1)),
      h("td", null, h("span", { class: `badge at-${outcome(a)}` }, outcome(a))),
      h("td", null, fmtTime(a.startedAt)),
      h("td", null, a.stoppedAt ? fmtTime(a.stoppedAt) : "—"),
      h("td", { class: "num" }, fmtDuration((a.stoppedAt || serverNow()) - a.startedAt)),
      reasonCell(a.statusReason)));
    replace("attempts", table("Attempts", ["#", "Outcome", "Started", "Stopped", "Duration", "Reason"], rows, { "data-testid": "attempts-table" }));
  }

  // How each attempt after a preemption resumed (GET /qm/v1/jobs/{job}/attempt, `resumes`):
  // from its checkpoint or from the start, and the work done twice. Nothing for a job never
  // preempted, or from a server without the endpoint.
  function renderResumes(resumes) {
    if (!resumes || resumes.length === 0) { replace("resumes"); return; }
    const num = (v) => (v === undefined || v === null ? "—" : fmtNum(v));
    const rows = resumes.map((r) => h("tr", { "data-testid": "resume-row", "data-outcome": r.outcome },
      h("td", { class: "num" }, String(r.attempt)),
      h("td", null, h("span", { class: `badge rs-${r.outcome}` }, r.outcome)),
      h("td", { class: "num" }, num(r.checkpointStep)),
      h("td", { class: "num" }, num(r.previousLastStep)),
      h("td", { class: "num" }, num(r.firstStep)),
      h("td", { class: "num" }, num(r.recomputedSteps)),
      h("td", { class: "num" }, r.recomputedInstanceHours === undefined || r.recomputedInstanceHours === null
        ? "—" : r.recomputedInstanceHours.toFixed(3))));
    replace("resumes", h("h3", null, "Resumes after preemption"),
      table("Resumes after preemption", ["Attempt", "Resume", "Checkpoint step", "Stopped at step", "Went on from step", "Steps done twice", "Instance-hours done twice"],
        rows, { "data-testid": "resumes-table" }));
  }

  // What each ended attempt used (GET /qm/v1/jobs/{job}/attempt, `usage`): CPU time and the
  // largest host's peak memory, as the kernel counted them. Nothing where none was counted.
  function fmtBytes(b) {
    if (b === undefined || b === null) return "—";
    const k = 1024;
    if (b < k * k) return `${(b / k).toFixed(0)} KiB`;
    if (b < k * k * k) return `${(b / (k * k)).toFixed(0)} MiB`;
    return `${(b / (k * k * k)).toFixed(1)} GiB`;
  }

  // The GPU columns only where some attempt's GPUs were sampled (nvidia-smi).
  function renderUsage(usage) {
    if (!usage || usage.length === 0) { replace("usage"); return; }
    const gpus = usage.some((u) => u.gpuUtilizationPercent !== undefined);
    const rows = usage.map((u) => h("tr", { "data-testid": "usage-row" },
      h("td", { class: "num" }, String(u.attempt)),
      h("td", { class: "num", "data-testid": "usage-cpu" }, `${u.cpuSeconds.toFixed(1)} s`),
      h("td", { class: "num", "data-testid": "usage-memory" }, fmtBytes(u.peakMemoryBytes)),
      gpus ? h("td", { class: "num", "data-testid": "usage-gpu" },
        u.gpuUtilizationPercent === undefined ? "—" : `${u.gpuUtilizationPercent} %`) : null,
      gpus ? h("td", { class: "num", "data-testid": "usage-gpu-memory" },
        fmtBytes(u.peakGpuMemoryBytes)) : null));
    const headers = ["Attempt", "CPU time", "Peak memory (largest host)"];
    if (gpus) headers.push("GPU utilisation (mean)", "Peak GPU memory");
    replace("usage", h("h3", null, "Usage per attempt"),
      table("Usage per attempt", headers, rows, { "data-testid": "usage-table" }));
  }

  async function refreshJob(jobId) {
    let job;
    try {
      job = await describe(jobId, true);
    } catch (e) {
      if (e.reachable && e.status !== 403) {
        replace("job-title", `Job ${jobId}`);
        replace("job-body", h("p", { class: "muted", "data-testid": "job-missing" }, e.message));
        replace("timeline"); replace("attempts"); replace("resumes"); replace("usage");
        return;
      }
      throw e;
    }
    if (route().job !== jobId || state.signedOut) return;
    replace("job-title", job.jobName || jobId, " ", statusBadge(job.status));
    const jobQueue = idOfArn(job.jobQueue);
    if (jobQueue) {
      state.queue = jobQueue;
      if (state.queues.includes(jobQueue)) document.getElementById("queue").value = jobQueue;
      document.getElementById("back").setAttribute("href", `#/queue/${encodeURIComponent(jobQueue)}`);
    }
    const cap = (job.capacityUsage || []).map((c) => `${fmtNum(c.quantity)} × ${c.capacityUnit}`).join(", ") || "—";
    const summary = job.preemptionSummary || {};
    const dl = h("dl", { class: "facts", "data-testid": "job-facts" });
    const fact = (k, v) => { dl.appendChild(h("dt", null, k)); dl.appendChild(v instanceof Node ? h("dd", null, v) : h("dd", null, v)); };
    fact("Job id", h("code", null, job.jobId));
    fact("Queue", idOfArn(job.jobQueue));
    fact("Share", job.quotaShareName || "—");
    fact("Priority", job.schedulingPriority === undefined ? "—" : String(job.schedulingPriority));
    fact("Capacity", cap);
    fact("Submitted by", (job.tags && job.tags["qm:submitted-by"]) || "—");
    fact("Submitted", fmtTime(job.createdAt));
    fact("Started", fmtTime(job.startedAt));
    fact("Stopped", fmtTime(job.stoppedAt));
    fact("Preemptions", String(summary.preemptedAttemptCount || 0));
    const reason = h("p", { class: "job-reason", "data-testid": "job-reason" });
    const rc = reasonCell(job.statusReason || "");
    reason.append(...Array.from(rc.childNodes));
    replace("job-body", job.statusReason ? h("div", { class: "reason-box" }, h("span", { class: "label" }, "Reason: "), reason) : null, dl);
    const attempts = attemptsOf(job);
    await learnNames([job.statusReason, ...attempts.map((a) => a.statusReason)]);
    if (route().job !== jobId || state.signedOut) return;
    renderTimeline(job, attempts);
    renderAttemptTable(attempts);
    const now = await call("GET", `/qm/v1/jobs/${encodeURIComponent(jobId)}/attempt`).catch(() => null);
    if (route().job !== jobId || state.signedOut) return;
    renderResumes(now && now.resumes);
    renderUsage(now && now.usage);
  }

  // -- signing in ---------------------------------------------------------------------------

  const MISSING_TOKEN = "MissingAuthenticationTokenException";

  function showWho(who) {
    state.who = who;
    const anonymous = who.name === "anonymous"; // qm serve --no-auth: nobody signs in
    replace("who-label", anonymous ? "Authentication is off; acting as" : "Signed in as");
    replace("whoami", who.name, who.admin && !anonymous ? " (admin)" : "");
    document.getElementById("sign-out").hidden = anonymous;
    document.getElementById("who").hidden = false;
  }

  async function loadWho() {
    try { showWho(await call("GET", "/qm/v1/whoami")); } catch (_) { /* shown at the next refresh */ }
  }

  // Shows the sign-in form instead of the data, and forgets the data: a signed-out page shows
  // nothing the server answered to the last principal.
  function showLogin(message) {
    state.signedOut = true;
    state.who = null;
    clearTimeout(state.timer);
    state.queues = [];
    state.described.clear();
    state.history.report = null;
    document.getElementById("queue").replaceChildren();
    state.names.clear();
    for (const id of ["shares-body", "jobs-body", "history-body", "recent-body", "flows-body", "job-body"]) replace(id, h("p", { class: "muted" }, "Loading…"));
    for (const id of ["share-heads", "front", "timeline", "attempts", "pool-body"]) replace(id);
    replace("job-title", "Job");
    document.getElementById("view-queue").hidden = true;
    document.getElementById("view-job").hidden = true;
    document.getElementById("who").hidden = true;
    showError(null);
    replace("last-refresh", "Not signed in");
    const err = document.getElementById("login-error");
    err.hidden = !message;
    err.replaceChildren();
    if (message) err.textContent = message;
    document.getElementById("view-login").hidden = false;
    document.body.classList.add("signed-out");
    const key = document.getElementById("login-key");
    if (!key.value) key.focus(); else document.getElementById("login-secret").focus();
  }

  function hideLogin() {
    state.signedOut = false;
    document.body.classList.remove("signed-out");
    document.getElementById("view-login").hidden = true;
    document.getElementById("login-error").hidden = true;
  }

  // Trades the key pair for a session cookie; true when signed in.
  async function signIn(accessKeyId, secretAccessKey) {
    const button = document.getElementById("login-submit");
    button.disabled = true;
    try {
      const who = await call("POST", "/qm/v1/session", { accessKeyId, secretAccessKey });
      hideLogin();
      showWho({ name: who.name });
      loadWho(); // groups and admin
      return true;
    } catch (e) {
      const why = e.code === "UnrecognizedClientException" ? "No principal of this server has this access key id."
        : e.code === "InvalidSignatureException" ? "The secret access key is not the one of this access key id."
          : e.message;
      showLogin(`Sign-in failed: ${why}`);
      return false;
    } finally {
      button.disabled = false;
    }
  }

  async function signOut() {
    clearTimeout(state.timer);
    let message = null;
    try {
      // An empty JSON body: a DELETE with no body at all may carry no Content-Length either,
      // which a server that checks content types can take for a body of unknown type.
      await call("DELETE", "/qm/v1/session", {});
    } catch (e) {
      message = `The server did not end the session: ${e.message}`;
    }
    document.getElementById("login-key").value = "";
    showLogin(message);
  }

  // A request was refused for want of a signature: either no session (sign in) or a session
  // the server does not accept for this request (say so, rather than ask to sign in again).
  async function refusedUnsigned(e) {
    try {
      showWho(await call("GET", "/qm/v1/whoami"));
    } catch (e2) {
      if (e2.status === 403) { showLogin(null); return; }
      throw e2;
    }
    throw new ApiError(`${e.message} (signed in as ${state.who.name}, but the session is not accepted for this request)`, true);
  }

  // `#key=<id>&secret=<secret>[&view=<route>]`: the pair, with the fragment already removed
  // from the address bar and the history; null when the fragment carries no key.
  function takeKeysFromFragment() {
    const fragment = location.hash.replace(/^#/, "");
    if (!/(^|&)(key|secret)=/.test(fragment)) return null;
    const params = new URLSearchParams(fragment);
    const view = (params.get("view") || "").replace(/^#?\/?/, "");
    history.replaceState(null, "", location.pathname + location.search + (view ? `#/${view}` : ""));
    const key = params.get("key"), secret = params.get("secret");
    return key && secret ? { key, secret } : null;
  }

  async function signInFromFragment() {
    const keys = takeKeysFromFragment();
    if (!keys) return false;
    if (await signIn(keys.key, keys.secret)) refresh();
    return true;
  }

  // -- routing and the refresh loop ---------------------------------------------------------

  // `#/job/ID`, or `#/queue/NAME?status=&share=&q=&submitter=&sort=` (every part optional):
  // the jobs table's filters live in the address, so that a filtered view can be shared.
  function route() {
    const hash = location.hash.replace(/^#\/?/, "");
    const m = /^job\/(.+)$/.exec(hash);
    if (m) return { job: decodeURIComponent(m[1]) };
    const [path, query] = hash.split("?", 2);
    const q = /^queue\/(.+)$/.exec(path);
    const p = new URLSearchParams(query || "");
    return {
      queue: q ? decodeURIComponent(q[1]) : null,
      filters: {
        status: p.get("status") || "ALL", share: p.get("share") || "", name: p.get("q") || "",
        submitter: p.get("submitter") || "", sort: p.get("sort") === "wait" ? "wait" : "age",
      },
    };
  }

  // The address of the queue view with the current filters (defaults left out).
  function queueHash() {
    const p = new URLSearchParams();
    if (state.filter !== "ALL") p.set("status", state.filter);
    if (state.jobs.share) p.set("share", state.jobs.share);
    if (state.jobs.name) p.set("q", state.jobs.name);
    if (state.jobs.submitter) p.set("submitter", state.jobs.submitter);
    if (state.jobs.sort !== "age") p.set("sort", state.jobs.sort);
    const qs = p.toString();
    return `#/queue/${encodeURIComponent(state.queue || "")}${qs ? `?${qs}` : ""}`;
  }

  function showError(message) {
    const box = document.getElementById("error");
    if (!message) { box.hidden = true; box.replaceChildren(); document.body.classList.remove("stale"); return; }
    box.hidden = false;
    document.body.classList.add("stale");
    box.replaceChildren(h("strong", null, "Server unreachable. "), message,
      state.lastOk ? ` Showing data from ${fmtClock(state.lastOk)}; retrying every ${REFRESH_MS / 1000} s.` : ` Retrying every ${REFRESH_MS / 1000} s.`);
  }

  async function refresh() {
    if (state.signedOut) return;
    if (state.inFlight) { state.again = true; return; }
    state.inFlight = true;
    state.again = false;
    clearTimeout(state.timer);
    const r = route();
    document.getElementById("view-job").hidden = !r.job;
    document.getElementById("view-queue").hidden = !!r.job;
    try {
      try {
        if (r.job) {
          await Promise.all([refreshJob(r.job), loadQueues()]);
        } else {
          if (r.queue) state.queue = r.queue;
          state.filter = r.filters.status;
          const { status, ...jobs } = r.filters;
          state.jobs = jobs;
          document.getElementById("status-filter").value = state.filter;
          await refreshQueue();
        }
      } catch (e) {
        if (e.status === 403 && e.code === MISSING_TOKEN) await refusedUnsigned(e);
        else throw e;
      }
      if (state.signedOut) return;
      if (!state.who) loadWho();
      state.lastOk = serverNow();
      showError(null);
      replace("last-refresh", "Updated ", h("time", { datetime: new Date(state.lastOk).toISOString() }, fmtClock(state.lastOk)),
        state.paused ? " (paused)" : "");
    } catch (e) {
      if (e.reachable) {
        showError(null);
        const box = document.getElementById("error");
        box.hidden = false;
        box.replaceChildren(h("strong", null, "The server answered with an error. "), e.message);
      } else {
        showError(e.message);
      }
      replace("last-refresh", state.lastOk ? `Last update ${fmtClock(state.lastOk)} (failed since)` : "Not loaded");
    } finally {
      state.inFlight = false;
      if (state.again) refresh(); else schedule();
    }
  }

  function schedule() {
    clearTimeout(state.timer);
    if (!state.paused && !document.hidden && !state.signedOut) state.timer = setTimeout(refresh, REFRESH_MS);
  }

  function init() {
    const sel = document.getElementById("queue");
    sel.addEventListener("change", () => {
      for (const id of ["shares-body", "jobs-body"]) replace(id, h("p", { class: "muted" }, "Loading…"));
      replace("share-heads"); replace("front");
      state.queue = sel.value;
      location.hash = queueHash();
    });
    const filter = document.getElementById("status-filter");
    filter.value = state.filter;
    // A filter changes the address (without a new history entry) and refreshes.
    const refilter = () => {
      history.replaceState(null, "", location.pathname + location.search + queueHash());
      refresh();
    };
    filter.addEventListener("change", () => {
      state.filter = filter.value;
      replace("jobs-body", h("p", { class: "muted" }, "Loading…"));
      refilter();
    });
    for (const [id, key] of [["share-filter", "share"], ["submitter-filter", "submitter"], ["job-sort", "sort"]]) {
      const sel = document.getElementById(id);
      sel.addEventListener("change", () => { state.jobs[key] = sel.value; refilter(); });
    }
    const search = document.getElementById("name-filter");
    let typing = null;
    search.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { state.jobs.name = search.value; refilter(); }, 250);
    });
    const recentSel = document.getElementById("recent-window");
    recentSel.value = state.recentWindow;
    recentSel.addEventListener("change", () => {
      state.recentWindow = recentSel.value;
      replace("recent-body", h("p", { class: "muted" }, "Loading…"));
      refresh();
    });
    const windowSel = document.getElementById("history-window");
    windowSel.value = state.history.window;
    windowSel.addEventListener("change", () => {
      state.history.window = windowSel.value;
      replace("history-body", h("p", { class: "muted" }, "Loading…"));
      refresh();
    });
    const pause = document.getElementById("pause");
    pause.addEventListener("click", () => {
      state.paused = !state.paused;
      pause.setAttribute("aria-pressed", String(state.paused));
      pause.textContent = state.paused ? "Resume" : "Pause";
      if (state.paused) clearTimeout(state.timer); else refresh();
    });
    const form = document.getElementById("login-form");
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const key = document.getElementById("login-key");
      const secret = document.getElementById("login-secret");
      const pair = [key.value.trim(), secret.value];
      secret.value = ""; // the form does not hold on to the secret either
      signIn(...pair).then((ok) => { if (ok) refresh(); });
    });
    document.getElementById("sign-out").addEventListener("click", signOut);
    window.addEventListener("hashchange", () => {
      window.scrollTo(0, 0);
      signInFromFragment().then((took) => { if (!took) refresh(); });
    });
    // Hidden tabs do not poll; coming back refreshes at once.
    document.addEventListener("visibilitychange", () => { if (document.hidden) clearTimeout(state.timer); else refresh(); });
    // The fragment's keys are taken (and the fragment removed) before the first request.
    signInFromFragment().then((took) => { if (!took) refresh(); });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
