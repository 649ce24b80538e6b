// The home view: the last 24 hours (one row per task, one bar per run), tasks, running
// executions, and the history with its filters and pages. The filters live in the
// fragment, #/?task=&status=&limit=, the API's own query. Each time of a task is in its
// zone, a time without a task in the daemon's (view.js, `when`); today's without a date.

import {dayTimeline} from "./drawings.js";
import {
  Pager, RESUMABLE, STATUSES, barColumn, button, counted, duration, etaText, executionLink,
  get, h, learnZones, put, quote, stalledBadge, statusNode, stepsInline, syncRows, textOf,
  timeNode, tookText, zoneOf,
} from "./view.js";
import {recentColumn} from "./task.js";

// Where the history stands (its buttons: #page-older, #page-newer, #page-newest).
export const historyPages = new Pager("page");

const TASK_COLUMNS = [
  t => [t.name, () => h("a", {href: "#/tasks/" + quote(t.name)}, h("code", {}, t.name))],
  t => [t.schedule_text, () => t.schedule_text],
  t => [[t.next_fire_at, zoneOf(t.name)], () => timeNode(t.next_fire_at, t.name, false)],
  t => [[t.paused, t.paused_reason, t.enabled], () => t.paused
    ? [h("span", {class: "status PENDING"}, "paused"), " ",
      h("span", {class: "muted paused-reason"}, textOf(t.paused_reason))]
    : t.enabled ? "active" : "disabled"],
  t => {
    const last = t.last_execution;
    return [last && [last.id, last.status, last.reason], () => last
      ? [statusNode(last), " ", executionLink(last.id)] : "–"];
  },
  recentColumn,
  t => [t.paused, () => [button("run now", "run", t.name),
    t.paused ? button("unpause", "unpause", t.name) : button("pause", "pause", t.name)]],
];

// A pool's use: running of its max_running (a bar when it has one), waiting, pace, Retry-After.
const POOL_COLUMNS = [
  p => [p.name, () => h("code", {}, p.name)],
  p => [[p.running, p.max_running], () => p.max_running == null ? String(p.running)
    : [h("meter", {min: 0, max: p.max_running, value: p.running,
      "aria-label": `${p.name}: ${p.running} of ${p.max_running} running`}),
    ` ${p.running}/${p.max_running}`]],
  p => [p.waiting, () => String(p.waiting)],
  p => [p.max_per_second, () => p.max_per_second == null ? "–" : `${p.max_per_second}/s`],
  p => [p.paused_until, () => timeNode(p.paused_until, null, false)],
  p => [p.tasks.join(), () => textOf(p.tasks.join(", "))],
];

const RUNNING_COLUMNS = [
  e => [[e.id, e.steps.map(s => s.status)], () => [executionLink(e.id), stepsInline(e)]],
  e => [e.task, () => e.task],
  e => [[e.status, e.reason, e.stalled], () => [statusNode(e), " ", stalledBadge(e)]],
  barColumn(e => `progress of ${e.id}`),
  e => { const text = etaText(e); return [text, () => h("span", {class: "eta"}, text)]; },
  e => [e.message, () => h("span", {class: "message"}, textOf(e.message))],
  e => [e.id, () => button("cancel", "cancel", e.id)],
];

const HISTORY_COLUMNS = [
  e => [[e.id, e.steps.map(s => s.status)], () => [executionLink(e.id), stepsInline(e)]],
  e => [e.task, () => e.task],
  e => [[e.status, e.reason], () => statusNode(e)],
  e => [[e.trigger_kind, e.attempt], () => e.attempt > 1
    ? `${e.trigger_kind}, attempt ${e.attempt}` : e.trigger_kind],
  e => [[e.scheduled_at, zoneOf(e.task)], () => timeNode(e.scheduled_at, e.task, false)],
  e => [[e.finished_at, zoneOf(e.task)], () => timeNode(e.finished_at, e.task, false)],
  e => {
    const took = duration(e);
    return [took, () => h("span", {class: "took"}, took == null ? "–" : tookText(took))];
  },
  e => [e.message, () => h("span", {class: "message"}, textOf(e.message))],
  e => {
    const resumable = RESUMABLE.has(e.status) && !e.resumed_by;
    return [[resumable, e.resumed_by], () => resumable ? button("resume", "resume", e.id)
      : e.resumed_by ? ["resumed by ", executionLink(e.resumed_by)] : null];
  },
];


// The tasks' last runs, for their strips: one page of the newest executions of every task.
const RECENT_PAGE = 500;
const RECENT_RUNS = 20;

// Each task's last RECENT_RUNS runs among `newest` (newest first), oldest first.
function recentRuns(tasks, newest) {
  const runs = new Map(tasks.map(t => [t.name, []]));
  for (const e of newest) {
    const of = runs.get(e.task);
    if (of && of.length < RECENT_RUNS) of.push(e);
  }
  return tasks.map(t => ({...t, recent: runs.get(t.name).reverse()}));
}

const PAGE_SIZES = ["10", "50", "200"];
const DEFAULT_PAGE_SIZE = "50";

// The front page's last 24 hours: a row per task (at most DAY_ROWS), a bar per run of the
// newest RECENT_PAGE that ran in them; drawn again when a run moves or a minute passes.
const DAY_ROWS = 40;
const DAY_MS = 86400000;

function renderDay(tasks, newest) {
  const now = Date.now();
  const names = tasks.slice(0, DAY_ROWS).map(t => t.name);
  const shown = new Set(names);
  const runs = newest.filter(e => shown.has(e.task) && e.triggered_at &&
    (!e.finished_at || Date.parse(e.finished_at) >= now - DAY_MS));
  const cut = newest.length >= RECENT_PAGE &&
    Date.parse(newest[newest.length - 1].created_at) > now - DAY_MS;
  const zone = zoneOf(null);
  const more = tasks.length > names.length ? `, the first ${names.length} tasks` : "";
  document.getElementById("day-note").textContent = `(times in ${zone}${more}` +
    (cut ? `; only the newest ${RECENT_PAGE} runs` : "") + ")";
  const shape = [names, runs.map(e => [e.id, e.status, e.triggered_at, e.finished_at]),
    Math.floor(now / 60000), zone];
  put(document.getElementById("day"), shape, () => names.length
    ? dayTimeline(names, runs, now, zone) : h("p", {class: "muted"}, "no tasks"));
}

// The history's filters, from the fragment: #/?task=&status=&limit= (the API's query).
export function homeFilters() {
  const query = new URLSearchParams(location.hash.replace(/^#\/?\??/, ""));
  const limit = query.get("limit") || "";
  return {task: query.get("task") || "", status: (query.get("status") || "").toUpperCase(),
    limit: /^[1-9][0-9]{0,2}$/.test(limit) ? limit : DEFAULT_PAGE_SIZE};
}

function historyPath(filters) {
  const query = new URLSearchParams({limit: filters.limit});
  if (filters.task) query.set("task", filters.task);
  if (filters.status) query.set("status", filters.status);
  if (historyPages.before) query.set("before", historyPages.before);
  return "/executions?" + query;
}

function fillSelect(id, values, chosen, anyLabel) {
  const select = document.getElementById(id);
  const all = [...new Set([...values, chosen].filter(Boolean))];
  put(select, all, () => [anyLabel ? h("option", {value: ""}, anyLabel) : null,
    all.map(value => h("option", {value}, value))]);
  select.value = chosen;
}

function fillFilters(tasks, filters) {
  fillSelect("filter-task", tasks.map(t => t.name).sort(), filters.task, "all tasks");
  fillSelect("filter-status", STATUSES, filters.status, "any status");
  const sizes = [...new Set([...PAGE_SIZES, filters.limit])].sort((a, b) => a - b);
  fillSelect("filter-limit", sizes, filters.limit, null);
}

export async function refreshHome() {
  document.title = "ecron";
  const filters = homeFilters();
  historyPages.filter(JSON.stringify(filters));
  const [tasks, pools, running, pending, history, recent] = await Promise.all([
    get("/tasks"),
    get("/pools"),
    get("/executions?status=RUNNING&limit=200"),
    get("/executions?status=PENDING&limit=200"),
    get(historyPath(filters)),
    get(`/executions?limit=${RECENT_PAGE}`),
  ]);
  const active = [...running.items, ...pending.items];
  learnZones(tasks.items);
  renderDay(tasks.items, recent.items);
  fillFilters(tasks.items, filters);
  syncRows(document.getElementById("tasks"), recentRuns(tasks.items, recent.items), t => t.name,
    TASK_COLUMNS, "no tasks");
  document.getElementById("pools-section").hidden = !pools.items.length;
  syncRows(document.getElementById("pools"), pools.items, p => p.name, POOL_COLUMNS, "no pools");
  syncRows(document.getElementById("running"), active, e => e.id, RUNNING_COLUMNS,
    "nothing running");
  const what = [filters.task && `task ${filters.task}`, filters.status].filter(Boolean);
  syncRows(document.getElementById("history"), history.items, e => e.id, HISTORY_COLUMNS,
    what.length ? `no executions of ${what.join(", ")} here` : "no executions here");
  historyPages.show(history.next);
  document.getElementById("summary").textContent = `${counted(tasks.items.length, "task")}, ` +
    `${counted(active.length, "execution")} active; updated ${new Date().toLocaleTimeString()}`;
}

// The fragment that shows the history with these filters (from its first page).
export function filtersHash(filters) {
  const query = new URLSearchParams();
  if (filters.task) query.set("task", filters.task);
  if (filters.status) query.set("status", filters.status);
  if (filters.limit && filters.limit !== DEFAULT_PAGE_SIZE) query.set("limit", filters.limit);
  return "#/" + (query.toString() ? "?" + query : "");
}
