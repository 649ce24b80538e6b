// The dashboard's pictures, in SVG made with createElementNS (`svg`), from text and numbers
// only, like view.js's `h`; colours come from dashboard.css (classes by status). No library,
// nothing from the internet: the page's CSP allows scripts and styles from this daemon only.
//
// - `runStrip`: runs as a row of cells of one fixed size, oldest left (6 runs are 6 cells, 100
//   are 100), with a time axis under the big one.
// - `durationChart`: each run's duration at its time (time axis, duration scale), the p50 and
//   p95 of the runs shown as lines, failures marked with a cross.
// - `dayTimeline`: the front page's last 24 hours, one row per task, one bar per run from its
//   trigger to its end, coloured by status.
// Every cell, point and bar has a tooltip (<title>): its time, status and duration.

import {
  counted, duration, quote, tookText, wallParts, when, zoneOf, zoneOffset,
} from "./view.js";

const SVG_NS = "http://www.w3.org/2000/svg";
const MINUTE = 60000, HOUR = 3600000, DAY = 86400000;

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

// What a run's tooltip says: its id, status, when it started (in its task's zone) and how
// long it took.
export function about(e) {
  const took = duration(e);
  const at = e.triggered_at || e.created_at || e.scheduled_at;
  const how = took != null ? `took ${tookText(took)}`
    : e.finished_at ? "never triggered" : "not finished";
  return `${e.status}${e.reason ? ` (${e.reason})` : ""} · ${when(at, e.task)} · ${how}`;
}

// The moment a run is drawn at (RFC 3339): its first trigger call, else when it was made
// or due.
export function startTime(e) { return e.triggered_at || e.created_at || e.scheduled_at; }

function startOf(e) { return Date.parse(startTime(e)); }

// ---- the strip of runs ----

// The cells' size, in pixels, whatever the number of runs: the task page's (`big`), the tasks
// table's (`small`).
export const CELL = {big: {width: 9, gap: 2, height: 24}, small: {width: 5, gap: 1, height: 12}};
const AXIS = 20;  // under the big strip: its time axis
const LABEL_ROOM = 80;  // pixels at least between two labels of the axis

// A short label of a moment for an axis: "14:05" (or "14:05:30", `seconds`), with its date
// ("12-03 14:05") when it is not that of the label before it.
function axisLabel(ms, zone, before, seconds = false) {
  const at = wallParts(new Date(ms), zone);
  const clock = seconds ? at.time : at.time.slice(0, 5);
  return {text: before && before.date === at.date ? clock : `${at.date.slice(5)} ${clock}`,
    date: at.date};
}

// Which cells of a strip get a tick, `pitch` pixels apart: the first, then one every
// LABEL_ROOM pixels or more, and the last when it has room of its own.
function labelled(count, pitch) {
  const every = Math.max(1, Math.ceil(LABEL_ROOM / pitch));
  const chosen = [];
  for (let i = 0; i < count; i += every) chosen.push(i);
  const last = count - 1;
  if (last > 0 && chosen[chosen.length - 1] !== last) {
    if ((last - chosen[chosen.length - 1]) * pitch >= 64) chosen.push(last);
  }
  return chosen;
}

// The time axis under a big strip: a tick under each labelled cell, with its run's start.
function stripTicks(runs, pitch, height, wide) {
  let before = wallParts(new Date(startOf(runs[0])), zoneOf(runs[0].task));  // its date: said above
  const seconds = runs.length > 1 && startOf(runs[runs.length - 1]) - startOf(runs[0]) < HOUR;
  return labelled(runs.length, pitch).map(i => {
    const e = runs[i];
    const x = i * pitch + (pitch - CELL.big.gap) / 2;
    const mark = axisLabel(startOf(e), zoneOf(e.task), before, seconds);
    before = mark;
    const anchor = x < 30 ? "start" : x > wide - 30 ? "end" : "middle";
    return svg("g", {class: "tick"},
      svg("line", {x1: x, x2: x, y1: height + 1, y2: height + 5}),
      svg("text", {x: Math.min(Math.max(x - (anchor === "start" ? 6 : 0), 0), wide),
        y: height + 16, "text-anchor": anchor}, mark.text));
  });
}

// Runs (oldest first) as a row of cells coloured by status, each a link to its page with a
// tooltip; the big strip has a time axis: ticks under some cells, each labelled with its
// run's start, in the task's zone.
export function runStrip(runs, size = "big", label = "recent executions") {
  const {width, gap, height} = CELL[size];
  const cells = Math.max(1, runs.length * (width + gap) - gap);
  const axis = size === "big";
  const wide = axis ? Math.max(cells, 2 * LABEL_ROOM) : cells;
  const tall = axis ? height + AXIS : height;
  const ticks = axis ? stripTicks(runs, width + gap, height, wide) : [];
  return svg("svg", {class: `runs ${size}`, width: wide, height: tall,
    viewBox: `0 0 ${wide} ${tall}`, role: "list",
    "aria-label": `${label}: ${counted(runs.length, "execution")}, oldest first`},
  runs.map((e, i) => svg("a", {href: "#/executions/" + quote(e.id), role: "listitem",
    "data-eid": e.id, "data-status": e.status, "aria-label": `${e.id}: ${about(e)}`},
  svg("rect", {class: `cell ${e.status}`, x: i * (width + gap), y: 0, width, height, rx: 2},
    svg("title", {}, `${e.id}\n${about(e)}`)))),
  axis ? svg("g", {class: "axis x-axis", "aria-hidden": "true"}, ticks) : null);
}

// ---- scales ----

// Nice steps for a duration scale, in seconds, and for a time axis, in milliseconds.
const SECONDS = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900,
  1800, 3600, 7200, 10800, 21600, 43200, 86400];
// (each at most 2.5 times the one before: an axis gets 2 ticks at least)
const SPANS = [1000, 2000, 5000, 10000, 15000, 30000, MINUTE, 2 * MINUTE, 5 * MINUTE,
  10 * MINUTE, 15 * MINUTE, 30 * MINUTE, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, DAY,
  2 * DAY, 4 * DAY, 7 * DAY, 14 * DAY, 30 * DAY];

// The smallest of `steps` that cuts `span` into at most `most` parts.
function stepFor(span, steps, most) {
  return steps.find(step => span / step <= most) || steps[steps.length - 1];
}

// Ticks of a time axis over [from, to]: their moments, on whole steps of the zone's clock.
function timeTicks(from, to, zone, most) {
  const step = stepFor(to - from, SPANS, most);
  const shift = step >= HOUR ? zoneOffset(from, zone) : 0;  // on whole hours of that clock
  const first = Math.ceil((from + shift) / step) * step - shift;
  const ticks = [];
  for (let t = first; t <= to; t += step) ticks.push(t);
  return ticks;
}

// The p-th percentile (0..1) of `values`, by nearest rank; null for none.
export function percentile(values, p) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)];
}

// ---- the durations chart ----

export const CHART = {width: 1000, height: 240, left: 70, right: 116, top: 12, bottom: 38};

// The durations of `runs` (oldest first): one point per run with a duration at its start, on
// a time axis (the task's zone) and a duration scale; the p50 and p95 of those durations as
// lines; failed and timed-out runs marked with a cross. Points carry data-eid and
// data-seconds; the svg its p50 and p95 (data-p50, data-p95, seconds).
export function durationChart(runs, task) {
  const {width, height, left, right, top, bottom} = CHART;
  const points = runs.map(e => [e, duration(e)]).filter(([, s]) => s != null);
  const seconds = points.map(([, s]) => s);
  const [p50, p95] = [percentile(seconds, 0.5), percentile(seconds, 0.95)];
  const zone = zoneOf(task);
  const times = points.map(([e]) => startOf(e));
  let [from, to] = times.length ? [Math.min(...times), Math.max(...times)] : [0, 1];
  const pad = Math.max(1000, (to - from) * 0.04);
  [from, to] = [from - pad, to + pad];
  const most = Math.max(0.001, ...seconds);
  const step = stepFor(most, SECONDS, 5);
  const top_ = Math.ceil(most / step) * step;
  const plotW = width - left - right, plotH = height - top - bottom;
  const x = t => left + (t - from) / (to - from) * plotW;
  const y = s => top + plotH - s / top_ * plotH;
  const yTicks = [];
  for (let s = 0; s <= top_ + step / 2; s += step) yTicks.push(s);
  let before = null;
  const exact = stepFor(to - from, SPANS, 6) < MINUTE;  // ticks less than a minute apart
  const xTicks = timeTicks(from, to, zone, 6).map(t => {
    const mark = axisLabel(t, zone, before, exact);
    before = mark;
    return svg("g", {class: "tick"},
      svg("line", {class: "grid", x1: x(t), x2: x(t), y1: top, y2: top + plotH}),
      svg("text", {x: x(t), y: top + plotH + 14, "text-anchor": "middle"}, mark.text));
  });
  // the two labels apart when their lines are close: p95 above, p50 below
  const apart = p50 == null ? 0 : Math.max(0, 12 - (y(p50) - y(p95))) / 2;
  const line = (value, name, nudge) => value == null ? null : svg("g", {class: `stat ${name}`},
    svg("line", {x1: left, x2: left + plotW, y1: y(value), y2: y(value)}),
    svg("text", {x: left + plotW + 6, y: y(value) + 4 + nudge}, `${name} ${tookText(value)}`));
  const cross = (cx, cy) => svg("path", {class: "failed-mark",
    d: `M${cx - 5},${cy - 5}L${cx + 5},${cy + 5}M${cx - 5},${cy + 5}L${cx + 5},${cy - 5}`});
  const label = points.length
    ? `durations of ${counted(points.length, "finished execution")}: p50 ${tookText(p50)}, ` +
      `p95 ${tookText(p95)}, longest ${tookText(most)}` : "no finished execution";
  return svg("svg", {class: "durations", width, height, viewBox: `0 0 ${width} ${height}`,
    role: "img", "aria-label": label, "data-p50": p50, "data-p95": p95},
  svg("g", {class: "axis y-axis"}, yTicks.map(s => svg("g", {class: "tick"},
    svg("line", {class: "grid", x1: left, x2: left + plotW, y1: y(s), y2: y(s)}),
    svg("text", {x: left - 6, y: y(s) + 4, "text-anchor": "end"},
      !s ? "0 s" : step < 0.1 ? `${Math.round(s * 1000)} ms` : tookText(s)))),
  svg("text", {class: "title", x: 12, y: top + plotH / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${top + plotH / 2})`}, "duration")),
  svg("g", {class: "axis x-axis"}, xTicks,
    svg("text", {class: "title", x: left + plotW / 2, y: height - 4, "text-anchor": "middle"},
      `first trigger call (${wallParts(new Date(to), zone).zone})`)),
  line(p50, "p50", apart), line(p95, "p95", -apart),
  points.map(([e, s]) => {
    const [cx, cy] = [x(startOf(e)), y(s)];
    const failed = e.status === "FAILED" || e.status === "TIMED_OUT";
    return [svg("circle", {class: `point ${e.status}`, cx: cx.toFixed(1), cy: cy.toFixed(1),
      r: failed ? 4.5 : 3.5, "data-eid": e.id, "data-seconds": s.toFixed(3)},
    svg("title", {}, `${e.id}\n${about(e)}`)), failed ? cross(cx, cy) : null];
  }));
}

// ---- the last 24 hours ----

export const DAY_VIEW = {width: 1000, label: 170, right: 16, row: 18, bar: 11, axis: 24};

// The last 24 hours up to `now` (ms): one row per task of `tasks` (names), one bar per run
// of `runs` from its first trigger call to its end (or now, while it runs), coloured by
// status, in the daemon's zone (`zone`); each bar a link with a tooltip. The svg says its
// scale: data-from and data-to (ms) are the plot's ends, data-x and data-width its place.
export function dayTimeline(tasks, runs, now, zone) {
  const {width, label, right, row, bar, axis} = DAY_VIEW;
  const from = now - DAY;
  const plotW = width - label - right;
  const x = t => label + (Math.max(t, from) - from) / DAY * plotW;
  const height = axis + tasks.length * row + 4;
  let before = null;
  const ticks = timeTicks(from, now, zone, 8).map(t => {
    const mark = axisLabel(t, zone, before);
    before = mark;
    return svg("g", {class: "tick"},
      svg("line", {class: "grid", x1: x(t), x2: x(t), y1: axis - 4, y2: height}),
      svg("text", {x: x(t), y: axis - 8, "text-anchor": "middle"}, mark.text));
  });
  const rows = tasks.map((name, i) => {
    const y = axis + i * row;
    const mine = runs.filter(e => e.task === name);
    return svg("g", {class: "row", "data-task": name},
      svg("a", {href: "#/tasks/" + quote(name)},
        svg("text", {class: "name", x: label - 8, y: y + row / 2 + 4, "text-anchor": "end"},
          name.length > 24 ? name.slice(0, 23) + "…" : name)),
      svg("line", {class: "lane", x1: label, x2: label + plotW, y1: y + row / 2,
        y2: y + row / 2}),
      mine.map(e => {
        const start = Date.parse(e.triggered_at);
        const end = e.finished_at ? Date.parse(e.finished_at) : now;
        const [x1, x2] = [x(start), x(Math.min(end, now))];
        return svg("a", {href: "#/executions/" + quote(e.id), "data-eid": e.id},
          svg("rect", {class: `run ${e.status}`, x: x1.toFixed(2), y: y + (row - bar) / 2,
            width: Math.max(0, x2 - x1).toFixed(2), height: bar, rx: 1.5},
          svg("title", {}, `${e.task} ${e.id}\n${about(e)}` +
            (e.finished_at ? "" : " (still running)"))));
      }));
  });
  return svg("svg", {class: "day", width, height, viewBox: `0 0 ${width} ${height}`,
    role: "img", "data-from": from, "data-to": now, "data-x": label, "data-width": plotW,
    "aria-label": `the last 24 hours: ${counted(runs.length, "run")} of ` +
      `${counted(tasks.length, "task")}, times in ${zone}`},
  svg("g", {class: "axis x-axis"}, ticks),
  svg("line", {class: "now", x1: label + plotW, x2: label + plotW, y1: axis - 4, y2: height}),
  rows);  // the runs over the line of now: one just started still shows
}
