// One execution's page (#/executions/<eid>): its snapshot (its times in its task's zone),
// steps, resume chain, upstream, a timeline of what happened to it (every attempt of its
// fire time, its steps, its reports, the cancel call, its end), and its result.

import {
  ACTIVE, FINAL, RESUMABLE, bar, barColumn, button, duration, etaText, executionLink, get, h,
  learnZones, percent, put, quote, setBar, setText, stalledBadge, statusNode, syncRows, textOf,
  timeNode, tookText, zoneOf, zones,
} from "./view.js";

// How far the resume chain is followed each way.
const CHAIN_HOPS = 25;
// Executions of the chain that were resumed: final, they never change again.
const finals = new Map();

function detail(list, name, label) {
  let dd = list.querySelector(`dd[data-field="${name}"]`);
  if (!dd) {
    list.append(h("dt", {}, label));
    dd = h("dd", {"data-field": name});
    list.append(dd);
  }
  return dd;
}

function renderDetails(e) {
  const list = document.getElementById("execution-details");
  const show = (name, label, signature, build) => put(detail(list, name, label), signature, build);
  show("task", "task", e.task, () => h("a", {href: "#/?task=" + quote(e.task)}, e.task));
  show("status", "status", [e.status, e.reason, e.stalled],
    () => [statusNode(e), " ", stalledBadge(e)]);
  show("progress", "progress", ["bar", e.id], () => bar(`progress of ${e.id}`));
  setBar(detail(list, "progress").firstChild, e.progress);
  const eta = etaText(e);
  show("eta", "ETA", [eta, e.eta], () => h("span", {class: "eta", title: e.eta || ""}, eta));
  show("message", "message", e.message, () => h("span", {class: "message"}, textOf(e.message)));
  const kind = `${e.trigger_kind}, attempt ${e.attempt}` +
    (e.resume_attempt ? `, resume ${e.resume_attempt}` : "");
  show("trigger", "trigger", kind, () => kind);
  for (const [field, label] of [["scheduled_at", "scheduled"], ["created_at", "created"],
    ["triggered_at", "triggered"], ["last_report_at", "last report"],
    ["progress_at", "progress moved"],
    ["finished_at", "finished"], ["deadline", "deadline"]]) {
    show(field, label, [e[field], zoneOf(e.task)], () => timeNode(e[field], e.task));
  }
  const took = duration(e);
  show("took", "took", took, () => took == null ? "–"
    : `${tookText(took)} (first trigger call to end)`);
  const acknowledged = e.cancel_acknowledged == null ? "no cancel call sent"
    : e.cancel_acknowledged ? "acknowledged" : "sent, not acknowledged";
  show("cancel", "cancel call", acknowledged, () => acknowledged);
  show("owner", "node", e.owner, () => textOf(e.owner));
  const live = `${e.status}, ${Math.floor(percent(e.progress) / 10) * 10}% done`;
  setText("execution-live", live);
}

function renderActions(e) {
  const resumable = RESUMABLE.has(e.status) && !e.resumed_by;
  put(document.getElementById("execution-actions"), [e.status, resumable], () => [
    ACTIVE.has(e.status) ? button("cancel", "cancel", e.id) : null,
    resumable ? button("resume", "resume", e.id) : null]);
}

const STEP_COLUMNS = [
  s => [s.number, () => String(s.number)],
  s => [s.name, () => s.name],
  s => [[s.status, s.reason], () => statusNode(s)],
  barColumn(s => `progress of step ${s.number}, ${s.name}`),
  s => [s.message, () => h("span", {class: "message"}, textOf(s.message))],
  s => [s.remote_id, () => h("code", {}, s.remote_id)],
  s => [[s.started_at, zoneOf(s.task)], () => timeNode(s.started_at, s.task)],
  s => [[s.finished_at, zoneOf(s.task)], () => timeNode(s.finished_at, s.task)],
];

// An execution by id: from memory when final (a final execution never changes).
async function snapshotOf(eid) {
  if (finals.has(eid)) return finals.get(eid);
  const snapshot = await get("/executions/" + quote(eid));
  if (FINAL.has(snapshot.status) && snapshot.resumed_by) finals.set(eid, snapshot);
  return snapshot;
}

async function resumeChain(e) {
  const before = [];
  for (let id = e.resume_of; id && before.length < CHAIN_HOPS;) {
    const older = await snapshotOf(id);
    before.unshift(older);
    id = older.resume_of;
  }
  const after = [];
  for (let id = e.resumed_by; id && after.length < CHAIN_HOPS;) {
    const newer = await snapshotOf(id);
    after.push(newer);
    id = newer.resumed_by;
  }
  return [...before, e, ...after];
}

function renderChain(chain, current) {
  put(document.getElementById("chain"), chain.map(c => [c.id, c.status, c.reason]), () =>
    chain.length === 1 ? h("li", {class: "muted"}, "not a resume, and not resumed")
      : chain.map(c => h("li", {"data-execution": c.id},
        c.id === current ? h("strong", {class: "id"}, c.id) : executionLink(c.id), " ",
        statusNode(c), c.id === current ? " (this one)" : null)));
}

// Another execution of the same fire time (a retry, a resume), as a link with its name.
function otherRun(a) {
  const name = a.resume_attempt ? `resume ${a.resume_attempt} of attempt ${a.attempt}`
    : `attempt ${a.attempt}`;
  return [name, " (", executionLink(a.id), ")"];
}

// What happened to the execution, in order (ties keep this order: steps before its end):
// each event [at, text or nodes, a key for its signature]. `others`: the other executions
// of its fire time (its earlier attempts, its retries and resumes).
function timeline(e, steps, others) {
  const events = [[e.scheduled_at, "fire time", "fire"], [e.created_at, "recorded", "made"]];
  for (const a of others) {
    events.push([a.triggered_at, [...otherRun(a), " triggered"], `t${a.id}`]);
    if (a.finished_at) {
      events.push([a.finished_at, [...otherRun(a), ` ended ${a.status}` +
        (a.reason ? ` (${a.reason})` : "") + (a.message ? `: ${a.message}` : "")], `e${a.id}`]);
    }
  }
  const attempt = e.resume_attempt ? ` of resume ${e.resume_attempt}`
    : e.attempt > 1 || others.length ? ` of attempt ${e.attempt}` : "";
  events.push([e.triggered_at, `first trigger call${attempt} sent`, "trigger"]);
  for (const s of steps) {
    events.push([s.started_at, `step ${s.number} (${s.name}) started`, `s${s.number}`]);
    events.push([s.finished_at, `step ${s.number} (${s.name}) ended ${s.status}`, `f${s.number}`]);
  }
  events.push([e.progress_at, `progress moved, last to ${percent(e.progress).toFixed(0)}%`, "p"]);
  events.push([e.last_report_at, "last report applied" + (e.probe_failures
    ? `; ${e.probe_failures} failed polls in a row since` : ""), "report"]);
  if (e.finished_at) {
    if (e.cancel_acknowledged != null) {
      events.push([e.finished_at, "cancel call sent: " + (e.cancel_acknowledged
        ? "acknowledged" : "not acknowledged"), "cancel"]);
    }
    events.push([e.finished_at, `ended ${e.status}` + (e.reason ? ` (${e.reason})` : "") +
      (e.message ? `: ${e.message}` : ""), "end"]);
  } else {
    events.push([e.deadline, "deadline", "deadline"], [e.eta, "estimated end (ETA)", "eta"]);
  }
  const known = events.filter(([at]) => at).map(([at, what, key]) => [Date.parse(at), at, what,
    key]);
  return known.sort((a, b) => a[0] - b[0]);
}

function offset(seconds) {
  const sign = seconds < 0 ? "−" : "+";
  const s = Math.abs(seconds);
  return sign + (s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min`
    : `${(s / 3600).toFixed(1)} h`);
}

// What the timeline can and cannot show, under it.
const KEPT = "ecron keeps these moments of an execution, not yet each report, poll answer " +
  "or retry of one trigger call: those are in the daemon's log (trigger_retry, " +
  "poll_failed, cancel_sent), and the last report's message is the execution's message.";

function renderTimeline(e, steps, others) {
  const events = timeline(e, steps, others);
  const start = events.length ? events[0][0] : 0;
  put(document.getElementById("timeline"),
    [events.map(([, at, what, key]) => [at, key, typeof what === "string" ? what : ""]),
      zoneOf(e.task)], () =>
      events.map(([t, at, what, key]) => h("li", {"data-event": key},
        timeNode(at, e.task), " ", what, " ",
        h("span", {class: "offset"}, offset((t - start) / 1000)))));
  setText("timeline-note", KEPT);
}

// The other executions of `e`'s fire time: its earlier attempts, retries and resumes.
async function sameFireTime(e) {
  const page = await get(`/executions?task=${quote(e.task)}&limit=50`);
  return page.items.filter(a => a.id !== e.id && a.scheduled_at === e.scheduled_at)
    .sort((a, b) => a.attempt - b.attempt || a.resume_attempt - b.resume_attempt);
}

// The zone of `task`'s times: asked once (a task no longer known: the daemon's).
async function knowZone(task) {
  if (zones.tasks.has(task)) return;
  try {
    learnZones([await get("/tasks/" + quote(task))]);
  } catch (error) {
    if (error.status !== 404) throw error;
    zones.tasks.set(task, zones.daemon);
  }
}

function renderUpstream(e) {
  put(document.getElementById("upstream"), [e.trigger_kind, e.upstream || null], () =>
    e.upstream ? ["set off by ", executionLink(e.upstream)]
      : h("span", {class: "muted"}, "none: not started by another task's execution"));
  const downstream = e.downstream || [];
  put(document.getElementById("downstream"), downstream, () => downstream.length
    ? ["set off ", ...downstream.flatMap((id, i) => i ? [", ", executionLink(id)]
      : [executionLink(id)])]
    : h("span", {class: "muted"}, "none: no chained task ran after it"));
}

export async function refreshExecution(eid) {
  const [e, steps] = await Promise.all([
    get("/executions/" + quote(eid)), get(`/executions/${quote(eid)}/steps`)]);
  const [others] = await Promise.all([sameFireTime(e), knowZone(e.task)]);
  document.title = `ecron: ${e.task} ${e.id}`;
  put(document.getElementById("execution-title"), [e.id, e.task], () =>
    ["Execution ", h("code", {}, e.id), " of ", e.task]);
  renderDetails(e);
  renderActions(e);
  const ofTask = steps.items.map(s => ({...s, task: e.task}));
  syncRows(document.getElementById("steps"), ofTask, s => String(s.number), STEP_COLUMNS,
    "a one-call task: no steps");
  renderUpstream(e);
  renderTimeline(e, steps.items, others);
  put(document.getElementById("result"), [e.result, e.result_truncated], () =>
    e.result == null
      ? (e.result_truncated ? "no result kept: it was nested more than 100 levels deep" : "no result")
      : JSON.stringify(e.result, null, 2) + (e.result_truncated ? "\n(cut at 64 KiB)" : ""));
  renderChain(await resumeChain(e), e.id);
  document.getElementById("summary").textContent =
    `updated ${new Date().toLocaleTimeString()}`;
}
