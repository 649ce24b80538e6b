// ecron's dashboard. It holds no data of its own: it reads and steers ecron through the REST
// API (/api/v1, docs/api.md), every 2 seconds (every second on an execution's page), with
// the API token kept in this browser's local storage when one is saved.
//
// Routes live in the fragment: #/?task=&status=&limit= (tasks, running, history: home.js)
// and #/executions/<eid> (one execution: execution.js). view.js makes every element, from
// text only.

import {refreshExecution} from "./execution.js";
import {filtersHash, homeFilters, refreshHome, turnPage} from "./home.js";
import {TOKEN_KEY, call, quote, savedToken, setText} from "./view.js";

const REFRESH_MS = {home: 2000, execution: 1000};
const loop = {busy: false, again: false, timer: 0};

function route() {
  const match = location.hash.match(/^#\/executions\/([^/?]+)/);
  return match ? {view: "execution", eid: decodeURIComponent(match[1])} : {view: "home"};
}

// One refresh at a time; one asked for meanwhile runs right after it.
async function refresh() {
  if (loop.busy) { loop.again = true; return; }
  loop.busy = true;
  clearTimeout(loop.timer);
  const here = route();
  document.getElementById("home").hidden = here.view !== "home";
  document.getElementById("execution").hidden = here.view !== "execution";
  try {
    await (here.view === "home" ? refreshHome() : refreshExecution(here.eid));
    setText("problem", "");
  } catch (error) {
    setText("problem", String(error.message || error));
  } finally {
    loop.busy = false;
  }
  if (loop.again) {
    loop.again = false;
    refresh();
  } else {
    loop.timer = setTimeout(refresh, REFRESH_MS[here.view]);
  }
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
  refresh();
}

function forgetToken() {
  try { localStorage.removeItem(TOKEN_KEY); } catch { /* nothing kept */ }
  showTokenState();
  tell("API token forgotten", false);
  refresh();
}

function showHistory(filters) {
  const hash = filtersHash(filters);
  if (location.hash === hash) refresh(); else location.hash = hash;
}

function wire() {
  document.addEventListener("click", event => {
    const target = event.target.closest("button[data-action]");
    if (target && ACTIONS[target.dataset.action]) act(target);
  });
  document.getElementById("token-form").addEventListener("submit", saveToken);
  document.getElementById("forget-token").addEventListener("click", forgetToken);
  const form = document.getElementById("filters");
  const chosen = () => ({task: form.task.value, status: form.status.value,
    limit: form.limit.value});
  form.addEventListener("submit", event => { event.preventDefault(); showHistory(chosen()); });
  form.addEventListener("change", () => showHistory(chosen()));
  document.getElementById("filter-clear").addEventListener("click", () =>
    showHistory({limit: homeFilters().limit}));
  for (const where of ["older", "newer", "newest"]) {
    document.getElementById("page-" + where).addEventListener("click", () => {
      if (turnPage(where)) refresh();
    });
  }
  window.addEventListener("hashchange", refresh);
}

wire();
showTokenState();
refresh();
