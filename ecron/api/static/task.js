// One task's page (#/tasks/<name>): its last 100 executions as a strip of cells coloured by
// status (oldest left, each a link to the execution's page), their durations as a chart,
// its next fire times, its pool and the pool's use, its buttons, and (for a role that may)
// a form to backfill a past period. The front page's
// tasks table draws the same strip, small, of each task's last 20 runs (`runStrip`).
//
// The drawings are SVG elements made with createElementNS (`svg`), from text and numbers
// only, like view.js's `h`; colours come from dashboard.css (classes by status).

import {
  button, call, counted, executionLink, get, h, may, put, quote, setText, textOf, timeNode, when,
} from "./view.js";

const SVG_NS = "http://www.w3.org/2000/svg";
// How many executions the page shows; how many fire times ahead.
const RUNS = 100;
const UPCOMING = 5;
// How many of a backfill preview's fire times are listed.
const PREVIEWED = 5;
// The strips' sizes: the page's (`big`) and the tasks table's (`small`), in pixels.
const STRIP = {big: {width: 9, gap: 2, height: 22}, small: {width: 5, gap: 1, height: 12}};
const CHART = {height: 160, pad: 14, label: 64};

// An SVG element: attributes set with setAttribute, children appended as nodes or text.
export function svg(tag, attributes, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attributes || {})) {
    if (value != null) node.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child != null) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// Seconds from the first trigger call to the end: null unless both are known.
export function duration(e) {
  if (!e.triggered_at || !e.finished_at) return null;
  return (Date.parse(e.finished_at) - Date.parse(e.triggered_at)) / 1000;
}

export function secondsText(s) {
  return s < 120 ? `${s.toFixed(s < 10 ? 2 : 1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min`
    : `${(s / 3600).toFixed(1)} h`;
}

function about(e) {
  const took = duration(e);
  return `${e.status} · ${when(e.triggered_at || e.created_at || e.scheduled_at)} · ` +
    (took == null ? (e.finished_at ? "never triggered" : "not finished") : secondsText(took));
}

// Executions (oldest first) as a row of cells coloured by status, each a link to its page
// with a tooltip (<title>): status, when, how long.
export function runStrip(runs, size = "big", label = "recent executions") {
  const {width, gap, height} = STRIP[size];
  const wide = Math.max(1, runs.length * (width + gap) - gap);
  return svg("svg", {class: `runs ${size}`, width: wide, height, viewBox: `0 0 ${wide} ${height}`,
    role: "list", "aria-label": `${label}: ${counted(runs.length, "execution")}, oldest first`},
  runs.map((e, i) => svg("a", {href: "#/executions/" + quote(e.id), role: "listitem",
    "data-eid": e.id, "data-status": e.status, "aria-label": `${e.id}: ${about(e)}`},
  svg("rect", {class: `cell ${e.status}`, x: i * (width + gap), y: 0, width, height, rx: 1.5},
    svg("title", {}, `${e.id}\n${about(e)}`)))));
}

// The durations of `runs` (oldest first) as points on a line, under the strip's cells: a
// point for each execution with a duration, carrying data-eid and data-seconds.
function durationChart(runs) {
  const {width, gap} = STRIP.big;
  const {height, pad, label} = CHART;
  const points = runs.map((e, i) => [e, i, duration(e)]).filter(([, , s]) => s != null);
  const most = Math.max(0.001, ...points.map(([, , s]) => s));
  const wide = label + Math.max(1, runs.length) * (width + gap);
  const x = i => label + i * (width + gap) + width / 2;
  const y = s => height - pad - (s / most) * (height - 2 * pad);
  const at = points.map(([e, i, s]) => [e, s, x(i).toFixed(1), y(s).toFixed(1)]);
  return svg("svg", {class: "durations", width: wide, height, viewBox: `0 0 ${wide} ${height}`,
    role: "img", "aria-label": points.length
      ? `durations of ${counted(points.length, "finished execution")}, longest ` +
        secondsText(most) : "no finished execution"},
  svg("line", {class: "axis", x1: label, x2: wide, y1: y(most), y2: y(most)}),
  svg("line", {class: "axis", x1: label, x2: wide, y1: y(0), y2: y(0)}),
  svg("text", {x: 0, y: y(most) + 4}, secondsText(most)),
  svg("text", {x: 0, y: y(0) + 4}, "0 s"),
  svg("polyline", {class: "line", points: at.map(([, , px, py]) => `${px},${py}`).join(" ")}),
  at.map(([e, s, px, py]) => svg("circle", {class: `point ${e.status}`, cx: px, cy: py, r: 3,
    "data-eid": e.id, "data-seconds": s.toFixed(3)},
  svg("title", {}, `${e.id}\n${about(e)}`))));
}

// A `dst` note of /upcoming, whatever its shape: text, or an object with a note and a time.
function dstNote(note) {
  if (note == null || typeof note !== "object") return textOf(note);
  const text = note.note || note.text || note.message || note.reason || JSON.stringify(note);
  return note.at ? [timeNode(note.at), " ", String(text)] : String(text);
}

function renderUpcoming(next) {
  const notes = Array.isArray(next.dst) ? next.dst : [];
  put(document.getElementById("task-upcoming"), [next.items, next.paused, notes], () => [
    next.paused ? h("p", {class: "muted"},
      "paused: none of these runs until the task is unpaused") : null,
    next.items.length ? h("ol", {class: "upcoming"}, next.items.map(at => h("li", {},
      timeNode(at))))
      : h("p", {class: "muted"}, "no fire time ahead (a manual, chained or disabled task, " +
        "or a schedule with none left)"),
    notes.length ? h("ul", {class: "dst-notes"}, notes.map(note => h("li", {},
      dstNote(note)))) : null]);
}

function renderPool(pool) {
  document.getElementById("task-pool-section").hidden = !pool;
  if (!pool) return;
  const use = pool.max_running == null ? `${pool.running} running (no limit)`
    : `${pool.running} of ${pool.max_running} running`;
  put(document.getElementById("task-pool"), pool, () => [
    h("dt", {}, "pool"), h("dd", {}, h("code", {}, pool.name)),
    h("dt", {}, "running"), h("dd", {}, pool.max_running == null ? null
      : [h("meter", {min: 0, max: pool.max_running, value: pool.running,
        "aria-label": `${pool.name}: ${use}`}), " "], use),
    h("dt", {}, "waiting"), h("dd", {}, String(pool.waiting)),
    h("dt", {}, "pace"), h("dd", {}, pool.max_per_second == null ? "–"
      : `${pool.max_per_second}/s`),
    h("dt", {}, "held back until"), h("dd", {}, timeNode(pool.paused_until)),
    h("dt", {}, "its tasks"), h("dd", {}, pool.tasks.join(", "))]);
}

function renderHead(t) {
  put(document.getElementById("task-title"), t.name, () => ["Task ", h("code", {}, t.name)]);
  put(document.getElementById("task-actions"), [t.name, t.paused], () => [
    button("run now", "run", t.name),
    t.paused ? button("unpause", "unpause", t.name) : button("pause", "pause", t.name)]);
  const state = t.paused ? `paused (${textOf(t.paused_reason)})`
    : t.enabled ? "active" : "disabled";
  const last = t.last_execution;
  put(document.getElementById("task-details"), [t.schedule_text, t.next_fire_at, state,
    t.consecutive_failures, t.concurrency, t.mode, last && [last.id, last.status]], () => [
    h("dt", {}, "schedule"), h("dd", {}, t.schedule_text),
    h("dt", {}, "next fire"), h("dd", {}, timeNode(t.next_fire_at)),
    h("dt", {}, "state"), h("dd", {}, state),
    h("dt", {}, "failures in a row"), h("dd", {}, String(t.consecutive_failures)),
    h("dt", {}, "concurrency, mode"), h("dd", {}, `${t.concurrency}, ${t.mode}`),
    h("dt", {}, "last execution"), h("dd", {}, last
      ? [h("span", {class: "status " + last.status}, last.status), " ", executionLink(last.id)]
      : "–"),
    h("dt", {}, "history"), h("dd", {}, h("a", {href: "#/?task=" + quote(t.name)},
      "its executions, with filters and pages"))]);
}

// A datetime-local input's value (a wall time in the browser's time zone) as RFC 3339
// with that zone's offset then: "2027-10-30T03:00" → "2027-10-30T03:00:00+02:00". What the
// browser cannot read is sent as typed, for the API to name the field.
export function localTime(value) {
  const moment = new Date(value);
  if (!value || Number.isNaN(moment.getTime())) return value;
  const pad = n => String(Math.trunc(Math.abs(n))).padStart(2, "0");
  const offset = -moment.getTimezoneOffset();
  const sign = offset < 0 ? "-" : "+";
  return `${moment.getFullYear()}-${pad(moment.getMonth() + 1)}-${pad(moment.getDate())}T` +
    `${pad(moment.getHours())}:${pad(moment.getMinutes())}:${pad(moment.getSeconds())}` +
    `${sign}${pad(offset / 60)}:${pad(offset % 60)}`;
}

// The backfill section, made once after the fire times' (index.html has none of its own).
function backfillSection() {
  let section = document.getElementById("task-backfill-section");
  if (!section) {
    section = h("section", {id: "task-backfill-section", "aria-labelledby": "task-backfill-title"},
      h("h3", {id: "task-backfill-title"}, "Backfill ",
        h("span", {class: "muted"}, "(run the fire times of a past period)")),
      h("div", {id: "task-backfill"}));
    document.getElementById("task-upcoming").closest("section").after(section);
  }
  return section;
}

// POST /tasks/NAME/backfill for the form's period; what the API answered, as text nodes.
async function backfill(name, form, dryRun) {
  const period = {from: localTime(form.elements.from.value), to: localTime(form.elements.to.value)};
  const path = `/tasks/${quote(name)}/backfill`;
  if (!dryRun && !confirm(`Backfill ${name} from ${period.from} to ${period.to}? ` +
    "Each of its fire times without an execution runs.")) return null;
  const {body} = await call("POST", path, dryRun ? {...period, dry_run: true} : period);
  const found = `${counted(body.count, "fire time")}, ${body.already_run} already run`;
  if (!dryRun) {
    return h("p", {}, `${found}: ${counted(body.executions.length, "execution")} created`);
  }
  const first = body.fire_times.slice(0, PREVIEWED);
  return [h("p", {}, found, body.count > first.length ? ` (the first ${first.length}):` : ""),
    first.length ? h("ol", {class: "upcoming backfill-times"},
      first.map(at => h("li", {}, timeNode(at)))) : null];
}

// The form (from, to, preview, backfill) for a caller whose role may backfill; nothing
// otherwise. Drawn again only when the task or the role changes: what is typed stays.
function renderBackfill(t) {
  const section = backfillSection();
  section.hidden = !may("backfill");
  put(document.getElementById("task-backfill"), t.name, () => {
    if (!may("backfill")) return null;
    const result = h("div", {class: "backfill-result", role: "status", "aria-live": "polite"});
    const field = (key, label) => h("label", {}, label, " ",
      h("input", {type: "datetime-local", name: key, step: 1, required: true}));
    const act = (label, dryRun) => {
      const node = h("button", {type: "button", "data-backfill": dryRun ? "preview" : "run",
        "aria-label": `${label} ${t.name}`}, label);
      node.addEventListener("click", async () => {
        node.disabled = true;
        try {
          const shown = await backfill(t.name, node.form, dryRun);
          if (shown) result.replaceChildren(...[shown].flat().filter(n => n != null));
          result.classList.remove("error");
        } catch (error) {
          result.replaceChildren(String(error.message || error));
          result.classList.add("error");
        } finally {
          node.disabled = false;
        }
      });
      return node;
    };
    const form = h("form", {class: "backfill", "aria-label": `backfill ${t.name}`},
      field("from", "from"), field("to", "to"), act("preview", true), act("backfill", false),
      h("span", {class: "muted"}, "(your browser's local time)"));
    form.addEventListener("submit", event => event.preventDefault());
    return [form, result];
  });
}

export async function refreshTask(name) {
  const [t, runs, next, pools] = await Promise.all([
    get("/tasks/" + quote(name)),
    get(`/executions?task=${quote(name)}&limit=${RUNS}`),
    get(`/tasks/${quote(name)}/upcoming?count=${UPCOMING}`),
    get("/pools"),
  ]);
  document.title = `ecron: task ${t.name}`;
  renderHead(t);
  const oldest = [...runs.items].reverse();
  const shape = oldest.map(e => [e.id, e.status, e.triggered_at, e.finished_at]);
  put(document.getElementById("task-strip"), shape, () => oldest.length
    ? runStrip(oldest, "big", `the last executions of ${t.name}`)
    : h("p", {class: "muted"}, "no executions yet"));
  put(document.getElementById("task-chart"), shape, () => durationChart(oldest));
  renderUpcoming(next);
  renderBackfill(t);
  renderPool(pools.items.find(p => p.tasks.includes(t.name)));
  setText("summary", `${counted(oldest.length, "execution")} shown; ` +
    `updated ${new Date().toLocaleTimeString()}`);
}

// The syncRows column of the front page's tasks table: the task's last runs (`t.recent`,
// oldest first) as a small strip.
export const recentColumn = t => [t.recent.map(e => [e.id, e.status]), () => t.recent.length
  ? runStrip(t.recent, "small", `the last runs of ${t.name}`) : h("span", {class: "muted"}, "–")];
