// One execution's page (#/executions/<eid>): its snapshot, steps, resume chain, upstream,
// a timeline of its times, and its result.

import {
  ACTIVE, FINAL, RESUMABLE, bar, barColumn, button, etaText, executionLink, get, h, percent,
  put, quote, setBar, setText, stalledBadge, statusNode, syncRows, textOf, timeNode, when,
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
    show(field, label, e[field], () => timeNode(e[field]));
  }
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
  s => [s.started_at, () => timeNode(s.started_at)],
  s => [s.finished_at, () => timeNode(s.finished_at)],
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

// What happened to the execution, in order (ties keep this order: steps before its end).
function timeline(e, steps) {
  const events = [[e.scheduled_at, "fire time"], [e.created_at, "recorded"],
    [e.triggered_at, "first trigger call sent"]];
  for (const s of steps) {
    events.push([s.started_at, `step ${s.number} (${s.name}) started`]);
    events.push([s.finished_at, `step ${s.number} (${s.name}) ended ${s.status}`]);
  }
  events.push([e.last_report_at, "last report applied"]);
  if (e.finished_at) {
    events.push([e.finished_at, `ended ${e.status}` + (e.reason ? ` (${e.reason})` : "")]);
  } else {
    events.push([e.deadline, "deadline"], [e.eta, "estimated end (ETA)"]);
  }
  const known = events.filter(([at]) => at).map(([at, what]) => [Date.parse(at), at, what]);
  return known.sort((a, b) => a[0] - b[0]);
}

function offset(seconds) {
  const sign = seconds < 0 ? "−" : "+";
  const s = Math.abs(seconds);
  return sign + (s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min`
    : `${(s / 3600).toFixed(1)} h`);
}

function renderTimeline(e, steps) {
  const events = timeline(e, steps);
  const start = events.length ? events[0][0] : 0;
  put(document.getElementById("timeline"), events.map(([, at, what]) => [at, what]), () =>
    events.map(([t, at, what]) => h("li", {},
      h("time", {datetime: at, title: at}, when(at)), " ", what, " ",
      h("span", {class: "offset"}, offset((t - start) / 1000)))));
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
  document.title = `ecron: ${e.task} ${e.id}`;
  put(document.getElementById("execution-title"), [e.id, e.task], () =>
    ["Execution ", h("code", {}, e.id), " of ", e.task]);
  renderDetails(e);
  renderActions(e);
  syncRows(document.getElementById("steps"), steps.items, s => String(s.number), STEP_COLUMNS,
    "a one-call task: no steps");
  renderUpstream(e);
  renderTimeline(e, steps.items);
  put(document.getElementById("result"), [e.result, e.result_truncated], () =>
    e.result == null
      ? (e.result_truncated ? "no result kept: it was nested more than 100 levels deep" : "no result")
      : JSON.stringify(e.result, null, 2) + (e.result_truncated ? "\n(cut at 64 KiB)" : ""));
  renderChain(await resumeChain(e), e.id);
  document.getElementById("summary").textContent =
    `updated ${new Date().toLocaleTimeString()}`;
}
