// Executor groups as the pages use them: for filters, for the job form and for names in tables.
import { api } from "./api.js";
import { h } from "./dom.js";
import { t } from "./i18n.js";

// loadGroups lists the executor groups the caller may see (the API trims them to the caller's).
export async function loadGroups() {
  const { groups = [] } = await api("/executor-groups");
  return groups;
}

// allAllowed says whether a list may go unfiltered by group: admins see every group, and the API
// fills in the group of a caller who has exactly one; a caller with several must pick one.
export const allAllowed = (ctx, groups) => ctx.isAdmin || groups.length <= 1;

// defaultGroup is the group filter a list starts with.
export const defaultGroup = (ctx, groups) => (allAllowed(ctx, groups) ? "" : String(groups[0]?.id || ""));

// groupSelect builds a group <select>; withAll adds "All groups".
export function groupSelect(name, groups, value, withAll, attrs = {}) {
  const opts = [];
  if (withAll) opts.push(h("option", { value: "" }, t("All groups")));
  for (const g of groups) opts.push(h("option", { value: g.id, selected: String(g.id) === String(value) }, `${g.title || g.app_name} (${g.app_name})`));
  return h("select", { name, ...attrs }, opts);
}

// groupName names a group by id.
export function groupName(groups, id) {
  const g = groups.find((x) => String(x.id) === String(id));
  return g ? g.title || g.app_name : "#" + id;
}
