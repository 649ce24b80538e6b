// The pieces the dashboard's views are built of: the API call, and elements made from text.
//
// Every value that comes from the API goes into the page as text (textContent, or an
// attribute set with setAttribute), never parsed as HTML: a message holding <script> shows
// as those characters.

export const API = "/api/v1";
export const TOKEN_KEY = "ecron-token";
export const STATUSES = ["SCHEDULED", "PENDING", "RUNNING", "SUCCESS", "FAILED", "TIMED_OUT",
  "CANCELLED", "SKIPPED"];
export const ACTIVE = new Set(["PENDING", "RUNNING"]);
export const RESUMABLE = new Set(["FAILED", "TIMED_OUT", "CANCELLED"]);
export const FINAL = new Set(["SUCCESS", "FAILED", "TIMED_OUT", "CANCELLED", "SKIPPED"]);

// ---- the API ----

export class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

export function savedToken() {
  try { return localStorage.getItem(TOKEN_KEY) || ""; } catch { return ""; }
}

// `body`: what a POST sends, as JSON ({} when left out).
export async function call(method, path, body = {}) {
  const token = savedToken();
  const headers = {Accept: "application/json"};
  if (token) headers.Authorization = "Bearer " + token;
  const asked = {method, headers, cache: "no-store"};
  if (method !== "GET") {  // what changes something goes as JSON (a daemon without a token asks it)
    headers["Content-Type"] = "application/json";
    asked.body = JSON.stringify(body);
  }
  let answer;
  try {
    answer = await fetch(API + path, asked);
  } catch (error) {
    throw new ApiError(0, `ecron does not answer (${method} ${API}${path}): ${error.message}`);
  }
  let got = null;
  try { got = await answer.json(); } catch { got = null; }
  if (answer.status === 401) {
    throw new ApiError(401, token
      ? "401 Unauthorized: the API answered that the saved API token is wrong. " +
        "Enter the right one under “API token” and press Save token."
      : "401 Unauthorized: this ecron wants an API token. " +
        "Enter it under “API token” and press Save token.");
  }
  if (!answer.ok) {
    const why = (got && got.error) || answer.statusText;
    throw new ApiError(answer.status, `${method} ${API}${path}: ${answer.status} ${why}`);
  }
  return {status: answer.status, body: got};
}

export const get = path => call("GET", path).then(answer => answer.body);
export const quote = encodeURIComponent;

// ---- who is asking, and what that role may do ----

// The roles, each allowed what the ones before it are (the server's rule, RANK in
// ecron/config/callers.py, applied by needed_role in ecron/api/access.py).
const ROLES = ["viewer", "operator", "admin"];
// What a control needs: reading the audit log needs an admin; every other action changes
// something (a POST), which needs an operator.
const NEEDS = {audit: "admin"};

// The caller GET /caller names: unknown (`role` null) until asked, or after a 401.
export const caller = {known: false, name: "", role: null, tokenRequired: false};

// Whether the caller (of `role`) may do `action` ("run", "pause", "cancel", "audit", ...).
// The one place the dashboard decides which controls to show; the API decides anew.
export function may(action, role = caller.role) {
  const rank = ROLES.indexOf(role);
  return rank >= 0 && rank >= ROLES.indexOf(NEEDS[action] || "operator");
}

// Asks who the saved token names; a 401 (no token, or a wrong one) leaves the caller
// unknown, and is thrown on.
export async function askCaller() {
  Object.assign(caller, {known: false, name: "", role: null, tokenRequired: true});
  const who = await get("/caller");
  Object.assign(caller, {known: true, name: who.name, role: who.role,
    tokenRequired: who.token_required});
}

// ---- building the page, as text ----

export function h(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value == null || value === false) continue;
    if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child != null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Fills `node` with what `build` makes, unless it already shows the same `signature`:
// what did not change is left alone (focus and a button about to be clicked survive).
// What is shown depends on the caller's role too (its buttons): a new role redraws.
export function put(node, signature, build) {
  const sig = JSON.stringify([caller.role, zones.utc, zones.daemon, signature]);
  if (node.dataset.sig === sig) return;
  node.dataset.sig = sig;
  node.replaceChildren(...[build()].flat(Infinity).filter(child => child != null));
}

// Changes a live region only when its text changes (a screen reader says each change).
export function setText(id, text) {
  const node = document.getElementById(id);
  if (node.textContent !== text) node.textContent = text;
}

export function counted(number, thing) {
  return `${number} ${thing}${number === 1 ? "" : "s"}`;
}

export function textOf(value) { return value == null || value === "" ? "–" : String(value); }

// ---- times, as people read them ----
//
// DESIGN.md, "What people read" (ecron/wall.py is its home in Python): a time of a task is a
// wall time in the task's own zone, any other in the daemon's `timezone` (GET /about), to
// the second, with the zone's abbreviation (CET) or, where it has none, its offset
// (+08:00); the UTC switch shows every one in UTC. The API keeps RFC 3339 UTC: each <time>
// carries it in its datetime and title.

export const UTC_KEY = "ecron-utc";
// The zones: the daemon's, each task's (learnt from what the API answers), and the switch.
export const zones = {daemon: "UTC", tasks: new Map(), utc: false};

try { zones.utc = localStorage.getItem(UTC_KEY) === "1"; } catch { /* UTC off */ }

// The zone a time of `task` is shown in (the daemon's for a time with no task, or of a
// task not known here); UTC while the switch is on.
export function zoneOf(task) {
  if (zones.utc) return "UTC";
  return (task && zones.tasks.get(task)) || zones.daemon;
}

// Notes each task snapshot's zone; the daemon's is asked once (a daemon too old to say: UTC).
export function learnZones(tasks) {
  for (const t of tasks) zones.tasks.set(t.name, t.timezone || "UTC");
}

export async function askDaemonZone() {
  try { zones.daemon = (await get("/about")).timezone || "UTC"; } catch { zones.daemon = "UTC"; }
}

const formats = new Map();
function format(zone, locale, options) {
  const key = [zone, locale, JSON.stringify(options)].join("|");
  if (!formats.has(key)) {
    formats.set(key, new Intl.DateTimeFormat(locale, {timeZone: zone, ...options}));
  }
  return formats.get(key);
}

function part(parts, type) { return (parts.find(p => p.type === type) || {}).value || ""; }

// The zone at `date` as people know it: an abbreviation where the browser has one (CEST,
// GMT, EST), else the offset (+08:00).
export function zoneLabel(date, zone) {
  for (const locale of ["en-GB", "en-US"]) {
    const name = part(format(zone, locale, {timeZoneName: "short"}).formatToParts(date),
      "timeZoneName");
    if (/^[A-Z]{2,6}$/.test(name)) return name;
  }
  const offset = part(format(zone, "en-GB", {timeZoneName: "longOffset"}).formatToParts(date),
    "timeZoneName").replace(/^GMT/, "");
  return offset || "+00:00";
}

// The wall time of `date` in `zone`: {date: "2026-12-04", time: "02:30:00", zone: "CET"}.
export function wallParts(date, zone) {
  const parts = format(zone, "en-CA", {year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23"}).formatToParts(date);
  return {date: `${part(parts, "year")}-${part(parts, "month")}-${part(parts, "day")}`,
    time: `${part(parts, "hour")}:${part(parts, "minute")}:${part(parts, "second")}`,
    zone: zoneLabel(date, zone)};
}

// How far the wall clock of `zone` is ahead of UTC at `ms`, in milliseconds.
export function zoneOffset(ms, zone) {
  const at = wallParts(new Date(ms), zone);
  return Date.parse(`${at.date}T${at.time}Z`) - Math.floor(ms / 1000) * 1000;
}

// "2026-12-04 02:30:00 CST": an API time (RFC 3339) as a wall time of `task`'s zone;
// `dated` false leaves out the date when it is today's there.
export function when(iso, task, dated = true) {
  if (!iso) return "–";
  const zone = zoneOf(task);
  const at = wallParts(new Date(iso), zone);
  const today = wallParts(new Date(), zone).date;
  return `${dated || at.date !== today ? at.date + " " : ""}${at.time} ${at.zone}`;
}

export function timeNode(iso, task, dated = true) {
  return iso ? h("time", {datetime: iso, title: `${iso} (UTC)`}, when(iso, task, dated)) : "–";
}

// How long a run took, "0.4 s", "42 s", "3 min 5 s", "2 h 10 min": rounded half up in the
// same steps as ecron/wall.py's `took`, so the CLI and the page say the same.
export function tookText(seconds) {
  const tenths = Math.floor(Math.max(seconds, 0) * 10 + 0.5);
  if (tenths < 100) return `${Math.floor(tenths / 10)}.${tenths % 10} s`;
  const whole = Math.floor(seconds + 0.5);
  if (whole < 60) return `${whole} s`;
  if (whole < 3600) {
    return whole % 60 ? `${Math.floor(whole / 60)} min ${whole % 60} s` : `${whole / 60} min`;
  }
  const hours = Math.floor(whole / 3600), minutes = Math.floor(whole % 3600 / 60);
  return minutes ? `${hours} h ${minutes} min` : `${hours} h`;
}

// Seconds from the first trigger call to the end: null unless both are known.
export function duration(e) {
  if (!e.triggered_at || !e.finished_at) return null;
  return (Date.parse(e.finished_at) - Date.parse(e.triggered_at)) / 1000;
}

export function executionLink(id) {
  return h("a", {href: "#/executions/" + quote(id), class: "id"}, id);
}

export function statusNode(item) {
  return h("span", {},
    h("span", {class: "status " + item.status}, item.status),
    item.reason ? h("span", {class: "muted"}, ` (${item.reason})`) : null);
}

// A badge while the snapshot says the execution is stalled (RUNNING, its progress unmoved
// for its task's expect.progress_within); nothing otherwise. Text only.
export function stalledBadge(item) {
  if (!item.stalled) return null;
  const since = item.progress_at || item.triggered_at;
  return h("span", {class: "stalled", title: since ? `progress unmoved since ${since}` : null},
    "stalled");
}

export function percent(progress) {
  return Math.max(0, Math.min(100, Number(progress) || 0));
}

export function bar(label) {
  return h("div", {class: "bar", role: "progressbar", "aria-label": label,
    "aria-valuemin": 0, "aria-valuemax": 100, "aria-valuenow": 0},
  h("span", {class: "fill"}), h("span", {class: "pct", "aria-hidden": "true"}, "0%"));
}

export function setBar(node, progress) {
  const p = percent(progress);
  const shown = `${p.toFixed(0)}%`;
  node.setAttribute("aria-valuenow", String(p));
  node.setAttribute("aria-valuetext", shown);
  node.querySelector(".fill").style.width = `${p}%`; // CSSOM: allowed by the style CSP
  node.querySelector(".pct").textContent = shown;
}

// The API's `eta` (the estimated end, RFC 3339) as time left from now.
export function etaText(item) {
  if (!ACTIVE.has(item.status)) return "–";
  if (!item.eta) return "no estimate yet";
  const left = (Date.parse(item.eta) - Date.now()) / 1000;
  if (!(left > 0)) return "any moment now";
  if (left < 60) return `about ${Math.max(1, Math.round(left))} s left`;
  if (left < 5400) return `about ${Math.round(left / 60)} min left`;
  return `about ${(left / 3600).toFixed(1)} h left`;
}

// A button for `action` on `target`; none when the caller's role may not do it.
export function button(label, action, target, name) {
  if (!may(action)) return null;
  return h("button", {type: "button", "data-action": action, "data-target": target,
    "aria-label": `${label} ${name || target}`}, label);
}

// ---- lists read a page at a time ----

// Where a paged list stands: the `before` cursors of the pages above the one shown and the
// answer's `next`. Its controls are the buttons `<prefix>-older`, `-newer`, `-newest` and
// the text `<prefix>-number`.
export class Pager {
  constructor(prefix) { Object.assign(this, {prefix, cursors: [], next: null, key: ""}); }

  // Back to the first page when the filters (`key`) changed.
  filter(key) {
    if (key !== this.key) { this.key = key; this.cursors = []; }
  }

  get before() { return this.cursors[this.cursors.length - 1] || null; }

  show(next) {
    this.next = next;
    const control = what => document.getElementById(`${this.prefix}-${what}`);
    control("older").disabled = !next;
    control("newer").disabled = !this.cursors.length;
    control("newest").disabled = !this.cursors.length;
    control("number").textContent = `page ${this.cursors.length + 1}`;
  }

  // Moves a page older, newer, or back to the newest; false if it cannot.
  turn(where) {
    if (where === "older") {
      if (!this.next) return false;
      this.cursors = [...this.cursors, this.next];
    } else if (where === "newer") {
      this.cursors = this.cursors.slice(0, -1);
    } else {
      this.cursors = [];
    }
    return true;
  }
}

// ---- tables whose rows are kept from one refresh to the next ----

// `columns`: per column, item => [signature, build, after]; `after(cell)` runs every time.
export function syncRows(table, items, keyOf, columns, empty) {
  const body = table.tBodies[0];
  const old = new Map([...body.rows].filter(r => r.dataset.key).map(r => [r.dataset.key, r]));
  const rows = items.map(item => {
    const key = keyOf(item);
    const row = old.get(key) || h("tr", {"data-key": key}, columns.map(() => h("td")));
    columns.forEach((column, index) => {
      const [signature, build, after] = column(item);
      put(row.cells[index], signature, build);
      if (after) after(row.cells[index]);
    });
    return row;
  });
  if (!rows.length) {
    rows.push(h("tr", {}, h("td", {colspan: columns.length, class: "muted"}, empty)));
  }
  const same = rows.length === body.rows.length && rows.every((row, i) => row === body.rows[i]);
  if (!same) body.replaceChildren(...rows);
}

// A column holding a progress bar, kept from one refresh to the next and moved in place.
export const barColumn = label => item => {
  const name = label(item);
  return [["bar", name], () => bar(name), cell => setBar(cell.firstChild, item.progress)];
};

export function stepsInline(item) {
  if (!item.steps || !item.steps.length) return null;
  return h("div", {class: "steps-inline muted"}, item.steps.map((step, i) => [
    i ? " · " : "", `${step.number}. ${step.name} `,
    h("span", {class: step.status}, step.status)]));
}
