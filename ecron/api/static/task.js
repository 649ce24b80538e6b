// One task's page (#/tasks/<name>): its last 100 executions as a strip of cells of one
// fixed size coloured by status, oldest left, over a time axis (each cell a link to the
// execution's page), their durations as a chart (time axis, duration scale, p50 and p95,
// failures marked), its next fire times with what daylight saving time does to them said
// as sentences, its pool and the pool's use, its buttons, and (for a role that may) a form
// to backfill a past period. Every time on it is in the task's zone (or UTC, by the switch),
// and the page says which. The front page's tasks table draws the same strip, small, of
// each task's last 20 runs (`runStrip`). The drawings are drawings.js's.

import {durationChart, runStrip, startTime} from "./drawings.js";
import {
  button, call, counted, executionLink, get, h, learnZones, may, put, quote, setText, textOf,
  timeNode, wallParts, when, zoneOf, zoneOffset,
} from "./view.js";

// How many executions the page shows; how many fire times ahead.
const RUNS = 100;
const UPCOMING = 5;
// How many of a backfill preview's fire times are listed.
const PREVIEWED = 5;
const MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
  "September", "October", "November", "December"];

// "02:30" (with its seconds when it has some) of "2027-03-28T02:30:00".
function clockOf(text) {
  const [hh, mm, ss] = text.split(":");
  return ss && Number(ss) ? `${hh}:${mm}:${ss}` : `${hh}:${mm}`;
}

// A `dst` note of /upcoming ({at, wall, change}) as a sentence, as ecron/wall.py's
// `dst_note` says it: "02:30 does not exist on 28 March: runs at 03:30 CEST".
export function dstSentence(note, task) {
  const [date, clock] = String(note.wall).split("T");
  const [, month, day] = date.split("-").map(Number);
  const wall = clockOf(clock || "00:00:00");
  const on = `${day} ${MONTHS[month - 1]}`;
  let runs = "no run that day";
  if (note.at) {
    const at = wallParts(new Date(note.at), zoneOf(task));
    runs = `runs at ${clockOf(at.time)} ${at.zone}`;
  }
  return note.change === "repeated" ? `${wall} happens twice on ${on}: ${runs}`
    : `${wall} does not exist on ${on}: ${runs}`;
}

function renderUpcoming(next, task) {
  const notes = Array.isArray(next.dst) ? next.dst : [];
  put(document.getElementById("task-upcoming"), [next.items, next.paused, notes, zoneOf(task)],
    () => [
      next.paused ? h("p", {class: "muted"},
        "paused: none of these runs until the task is unpaused") : null,
      next.items.length ? h("ol", {class: "upcoming"}, next.items.map(at => h("li", {},
        timeNode(at, task))))
        : h("p", {class: "muted"}, "no fire time ahead (a manual, chained or disabled task, " +
          "or a schedule with none left)"),
      notes.length ? [h("p", {class: "muted"}, "Daylight saving time:"),
        h("ul", {class: "dst-notes"}, notes.map(note => h("li", {class: "dst-note",
          "data-change": note.change}, dstSentence(note, task))))] : null]);
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
    h("dt", {}, "held back until"), h("dd", {}, timeNode(pool.paused_until, null)),
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
  const zone = zoneOf(t.name);
  put(document.getElementById("task-details"), [t.schedule_text, t.next_fire_at, state,
    t.consecutive_failures, t.concurrency, t.mode, last && [last.id, last.status], t.timezone],
  () => [
    h("dt", {}, "schedule"), h("dd", {}, t.schedule_text),
    h("dt", {}, "time zone"), h("dd", {class: "zone"}, t.timezone,
      zone === t.timezone ? " (every time on this page is in it)"
        : ` (times on this page are in ${zone}: the UTC switch is on)`),
    h("dt", {}, "next fire"), h("dd", {}, timeNode(t.next_fire_at, t.name)),
    h("dt", {}, "state"), h("dd", {}, state),
    h("dt", {}, "failures in a row"), h("dd", {}, String(t.consecutive_failures)),
    h("dt", {}, "concurrency, mode"), h("dd", {}, `${t.concurrency}, ${t.mode}`),
    h("dt", {}, "last execution"), h("dd", {}, last
      ? [h("span", {class: "status " + last.status}, last.status), " ", executionLink(last.id)]
      : "–"),
    h("dt", {}, "history"), h("dd", {}, h("a", {href: "#/?task=" + quote(t.name)},
      "its executions, with filters and pages"))]);
}

// A datetime-local input's value, a wall time in `zone` ("2027-10-30T03:00"), as the
// instant it names there, in RFC 3339 UTC ("2027-10-30T01:00:00.000Z"). What cannot be read
// is sent as typed, for the API to name the field.
export function zonedTime(value, zone) {
  const wall = Date.parse(`${value}Z`);  // the wall time's fields, as if in UTC
  if (!value || Number.isNaN(wall)) return value;
  let at = wall - zoneOffset(wall, zone);
  at = wall - zoneOffset(at, zone);  // the offset at the instant, not at the guess
  return new Date(at).toISOString();
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

// POST /tasks/NAME/backfill for the form's period (wall times of the task's zone); what
// the API answered, as text nodes.
async function backfill(name, form, dryRun) {
  const zone = zoneOf(name);
  const period = {from: zonedTime(form.elements.from.value, zone),
    to: zonedTime(form.elements.to.value, zone)};
  const path = `/tasks/${quote(name)}/backfill`;
  if (!dryRun && !confirm(`Backfill ${name} from ${when(period.from, name)} to ` +
    `${when(period.to, name)}? Each of its fire times without an execution runs.`)) return null;
  const {body} = await call("POST", path, dryRun ? {...period, dry_run: true} : period);
  const found = `${counted(body.count, "fire time")}, ${body.already_run} already run`;
  if (!dryRun) {
    return h("p", {}, `${found}: ${counted(body.executions.length, "execution")} created`);
  }
  const first = body.fire_times.slice(0, PREVIEWED);
  return [h("p", {}, found, body.count > first.length ? ` (the first ${first.length}):` : ""),
    first.length ? h("ol", {class: "upcoming backfill-times"},
      first.map(at => h("li", {}, timeNode(at, name)))) : null];
}

// The form (from, to, preview, backfill) for a caller whose role may backfill; nothing
// otherwise. Drawn again only when the task or the role changes: what is typed stays.
function renderBackfill(t) {
  const section = backfillSection();
  section.hidden = !may("backfill");
  put(document.getElementById("task-backfill"), [t.name, zoneOf(t.name)], () => {
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
      h("span", {class: "muted"}, `(wall times in ${zoneOf(t.name)})`));
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
  learnZones([t]);
  document.title = `ecron: task ${t.name}`;
  renderHead(t);
  const oldest = [...runs.items].reverse();
  const shape = [oldest.map(e => [e.id, e.status, e.triggered_at, e.finished_at]),
    zoneOf(t.name)];
  const [first, last] = [oldest[0], oldest[oldest.length - 1]];
  setText("task-strip-zone", first ? `(${oldest.length}, oldest left: ` +
    `${when(startTime(first), t.name)} to ${when(startTime(last), t.name)}; times in ` +
    `${zoneOf(t.name)})` : "(up to 100, oldest left)");
  put(document.getElementById("task-strip"), shape, () => oldest.length
    ? runStrip(oldest, "big", `the last executions of ${t.name}`)
    : h("p", {class: "muted"}, "no executions yet"));
  put(document.getElementById("task-chart"), shape, () => oldest.length
    ? durationChart(oldest, t.name) : h("p", {class: "muted"}, "no executions yet"));
  renderUpcoming(next, t.name);
  renderBackfill(t);
  renderPool(pools.items.find(p => p.tasks.includes(t.name)));
  setText("summary", `${counted(oldest.length, "execution")} shown; ` +
    `updated ${new Date().toLocaleTimeString()}`);
}

// The syncRows column of the front page's tasks table: the task's last runs (`t.recent`,
// oldest first) as a small strip.
export const recentColumn = t => [t.recent.map(e => [e.id, e.status]), () => t.recent.length
  ? runStrip(t.recent, "small", `the last runs of ${t.name}`) : h("span", {class: "muted"}, "–")];
