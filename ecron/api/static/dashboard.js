// ecron's dashboard. It holds no data of its own: it reads and steers ecron through the REST
// API (/api/v1, docs/api.md), every 2 seconds (every second on an execution's page), with
// the API token kept in this browser's local storage when one is saved.
//
// It first asks who the token names (GET /caller) and shows only the controls that
// caller's role allows (view.js, `may`); without a valid token it asks nothing more until
// one is saved. Routes live in the fragment: #/?task=&status=&limit= (tasks, running,
// history: home.js), #/executions/<eid> (one execution: execution.js), #/tasks/<name>
// (one task: task.js) and
// #/audit?actor=&task= (the audit log, admins only: audit.js). view.js makes every
// element, from text only.

import {auditHash, auditPages, refreshAudit} from "./audit.js";
import {refreshExecution} from "./execution.js";
import {filtersHash, historyPages, homeFilters, refreshHome} from "./home.js";
import {refreshTask} from "./task.js";
import {
  TOKEN_KEY, UTC_KEY, askCaller, askDaemonZone, call, caller, may, quote, savedToken, setText,
  zones,
} from "./view.js";

const REFRESH_MS = {home: 2000, execution: 1000, audit: 2000, task: 2000};
const VIEWS = {home: refreshHome, execution: here => refreshExecution(here.eid),
  audit: refreshAudit, task: here => refreshTask(here.name)};
const loop = {busy: false, again: false, timer: 0};

// The view the fragment names; the audit log only for a caller that may read it.
function route() {
  const match = location.hash.match(/^#\/executions\/([^/?]+)/);
  if (match) return {view: "execution", eid: decodeURIComponent(match[1])};
  const task = location.hash.match(/^#\/tasks\/([^/?]+)/);
  if (task) return {view: "task", name: decodeURIComponent(task[1])};
  if (/^#\/audit(\?|$)/.test(location.hash) && may("audit")) return {view: "audit"};
  return {view: "home"};
}

// Who the page acts as, next to the token: "as ci (operator)"; nothing when the daemon
// asks for no token, or while the caller is unknown.
function showCaller() {
  setText("caller", caller.known && caller.tokenRequired
    ? `as ${caller.name} (${caller.role})` : "");
  document.getElementById("views").hidden = !may("audit");
}

// Asks the caller when it is not known; false when the token is refused (401): then the
// page shows the token prompt, no controls, and asks nothing more until a token is saved.
async function knowCaller() {
  if (caller.known) return true;
  try {
    await askCaller();
    await askDaemonZone();
  } catch (error) {
    if (error.status !== 401) throw error;
    setText("problem", error.message);
    setText("summary", `not loaded: ${error.message}`);
    return false;
  } finally {
    showCaller();
  }
  return true;
}

// One refresh at a time; one asked for meanwhile runs right after it.
async function refresh() {
  if (loop.busy) { loop.again = true; return; }
  loop.busy = true;
  clearTimeout(loop.timer);
  let here = route();
  let known = true;
  try {
    known = await knowCaller();
    here = route();
    for (const view of Object.keys(VIEWS)) {  // none while the token is refused
      document.getElementById(view).hidden = !known || here.view !== view;
    }
    if (known) {
      await VIEWS[here.view](here);
      showZones(here);
      setText("problem", "");
    }
  } catch (error) {  // said where "loading…" was, too: never left as if still coming
    setText("problem", String(error.message || error));
    setText("summary", `not loaded: ${error.message || error}`);
    if (error.status === 401 || error.status === 403) caller.known = false;  // ask again
  } finally {
    loop.busy = false;
  }
  if (loop.again) {
    loop.again = false;
    refresh();
  } else if (known) {
    loop.timer = setTimeout(refresh, REFRESH_MS[here.view]);
  }
}

// Which zone the page's times are in, said under the summary.
function showZones(here) {
  const task = here.view === "task" ? here.name : null;
  setText("zone-note", zones.utc ? "(every time is in UTC)"
    : task ? `(times are in the task's zone, ${zones.tasks.get(task) || zones.daemon})`
      : `(times are in each task's own zone; the rest in ${zones.daemon}, the daemon's)`);
}

function switchZones() {
  zones.utc = document.getElementById("utc-switch").checked;
  try { localStorage.setItem(UTC_KEY, zones.utc ? "1" : "0"); } catch { /* this page only */ }
  refresh();
}

// ---- what people do ----

function tell(text, failed) {
  const notice = document.getElementById("notice");
  notice.className = failed ? "failed" : "";
  notice.textContent = text;
}

const ACTIONS = {
  async run(name) {
    const {status, body} = await call("POST", `/tasks/${quote(name)}/run`);
    return status === 202 ? `${name}: started ${body.id}`
      : `${name} is already running (concurrency: forbid): ${body.id}`;
  },
  async pause(name) {
    await call("POST", `/tasks/${quote(name)}/pause`);
    return `${name} is paused`;
  },
  async unpause(name) {
    await call("POST", `/tasks/${quote(name)}/unpause`);
    return `${name} is unpaused`;
  },
  async cancel(eid) {
    if (!confirm(`Cancel execution ${eid}?`)) return null;
    const {body} = await call("POST", `/executions/${quote(eid)}/cancel`);
    return `${eid} is ${body.status}`;
  },
  async resume(eid) {
    const {body} = await call("POST", `/executions/${quote(eid)}/resume`);
    return `${eid} resumed as ${body.id}`;
  },
};

async function act(target) {
  const verb = target.dataset.action;
  target.disabled = true;
  try {
    const said = await ACTIONS[verb](target.dataset.target);
    if (said) tell(said, false);
  } catch (error) {
    tell(`${verb} ${target.dataset.target}: ${error.message || error}`, true);
    if (error.status === 401 || error.status === 403) caller.known = false;  // ask again
  } finally {
    target.disabled = false;
  }
  refresh();
}

function showTokenState() {
  document.getElementById("token-state").textContent =
    savedToken() ? "a token is saved in this browser" : "no token saved";
}

function saveToken(event) {
  event.preventDefault();
  const field = document.getElementById("token");
  try { localStorage.setItem(TOKEN_KEY, field.value.trim()); } catch { /* kept nowhere */ }
  field.value = "";
  showTokenState();
  tell(savedToken() ? "API token saved" : "no API token is saved", false);
  caller.known = false;
  refresh();
}

function forgetToken() {
  try { localStorage.removeItem(TOKEN_KEY); } catch { /* nothing kept */ }
  showTokenState();
  tell("API token forgotten", false);
  caller.known = false;
  refresh();
}

function show(hash) {
  if (location.hash === hash) refresh(); else location.hash = hash;
}

function wireAudit() {
  const form = document.getElementById("audit-filters");
  const chosen = () => ({actor: form.actor.value, task: form.task.value});
  form.addEventListener("submit", event => { event.preventDefault(); show(auditHash(chosen())); });
  form.addEventListener("change", () => show(auditHash(chosen())));
  document.getElementById("audit-clear").addEventListener("click", () => show(auditHash({})));
}

function wire() {
  document.addEventListener("click", event => {
    const target = event.target.closest("button[data-action]");
    if (target && ACTIONS[target.dataset.action]) act(target);
  });
  document.getElementById("token-form").addEventListener("submit", saveToken);
  const utc = document.getElementById("utc-switch");
  utc.checked = zones.utc;
  utc.addEventListener("change", switchZones);
  document.getElementById("forget-token").addEventListener("click", forgetToken);
  const form = document.getElementById("filters");
  const chosen = () => ({task: form.task.value, status: form.status.value,
    limit: form.limit.value});
  form.addEventListener("submit", event => {
    event.preventDefault();
    show(filtersHash(chosen()));
  });
  form.addEventListener("change", () => show(filtersHash(chosen())));
  document.getElementById("filter-clear").addEventListener("click", () =>
    show(filtersHash({limit: homeFilters().limit})));
  wireAudit();
  for (const pager of [historyPages, auditPages]) {
    for (const where of ["older", "newer", "newest"]) {
      document.getElementById(`${pager.prefix}-${where}`).addEventListener("click", () => {
        if (pager.turn(where)) refresh();
      });
    }
  }
  window.addEventListener("hashchange", refresh);
}

wire();
showTokenState();
refresh();
