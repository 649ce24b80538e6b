// The audit log (#/audit?actor=&task=): who did what through the API, and what each load
// of the config changed, newest first, a page at a time. Admins only: dashboard.js routes
// here only a caller that may("audit"), so no one else ever asks GET /audit.

import {Pager, get, h, syncRows, textOf, timeNode} from "./view.js";

// Where the log stands (its buttons: #audit-page-older, -newer, -newest).
export const auditPages = new Pager("audit-page");
const PAGE_SIZE = 50;
const FILTERS = ["actor", "task"];

// The log's filters, from the fragment: #/audit?actor=&task= (the API's query).
export function auditFilters() {
  const query = new URLSearchParams(location.hash.replace(/^#\/audit\??/, ""));
  return Object.fromEntries(FILTERS.map(key => [key, query.get(key) || ""]));
}

// The fragment that shows the log with these filters (from its first page).
export function auditHash(filters) {
  const query = new URLSearchParams();
  for (const key of FILTERS) if (filters[key]) query.set(key, filters[key].trim());
  return "#/audit" + (query.toString() ? "?" + query : "");
}

function auditPath(filters) {
  const query = new URLSearchParams({limit: String(PAGE_SIZE)});
  for (const key of FILTERS) if (filters[key]) query.set(key, filters[key]);
  if (auditPages.before) query.set("before", auditPages.before);
  return "/audit?" + query;
}

// A config change's fields (`detail.fields`: [{field, old, new}]), each as text.
function changedFields(detail) {
  const fields = detail && Array.isArray(detail.fields) ? detail.fields : [];
  if (!fields.length) return null;
  const shown = value => value === undefined ? "–" : JSON.stringify(value);
  return h("ul", {class: "fields"}, fields.map(change => h("li", {},
    h("code", {}, textOf(change && change.field)),
    change && ("old" in change || "new" in change)
      ? `: ${shown(change.old)} → ${shown(change.new)}` : null)));
}

const AUDIT_COLUMNS = [
  a => [a.at, () => timeNode(a.at)],
  a => [a.actor, () => h("code", {}, a.actor)],
  a => [a.action, () => h("span", {class: "action"}, a.action)],
  a => [[a.target, a.detail], () => [h("code", {}, a.target), changedFields(a.detail)]],
  a => [a.status, () => textOf(a.status)],
  // refusals of one address counted into one entry: how many it stands for
  a => [[a.remote, a.count], () => a.count > 1
    ? `${textOf(a.remote)} (${a.count} requests)` : textOf(a.remote)],
];

function fillForm(filters) {
  const form = document.getElementById("audit-filters");
  for (const key of FILTERS) {
    if (document.activeElement !== form[key]) form[key].value = filters[key];
  }
}

export async function refreshAudit() {
  document.title = "ecron: audit log";
  const filters = auditFilters();
  auditPages.filter(JSON.stringify(filters));
  const page = await get(auditPath(filters));
  fillForm(filters);
  const what = FILTERS.filter(key => filters[key]).map(key => `${key} ${filters[key]}`);
  syncRows(document.getElementById("audit-log"), page.items, a => String(a.id), AUDIT_COLUMNS,
    what.length ? `no entries of ${what.join(", ")} here` : "no entries here");
  auditPages.show(page.next);
  document.getElementById("summary").textContent =
    `audit log; updated ${new Date().toLocaleTimeString()}`;
}
