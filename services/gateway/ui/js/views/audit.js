// The audit trail (admins only): who changed what, newest first, filtered by user, action, object
// and time on the server, with page numbers.
import { api, latest, query } from "../api.js";
import { h, fmtTime, field, select, pager } from "../dom.js";
import { t } from "../i18n.js";
import { fromInput } from "../tz.js";

// ACTIONS are the calls the audit trail records (the audited methods of the gateway's policy),
// by their stored name, with what a person reads.
const ACTIONS = [
  ["/jobmesh.auth.v1.AuthService/Login", "Log in"],
  ["/jobmesh.auth.v1.AuthService/ChangePassword", "Change password"],
  ["/jobmesh.auth.v1.AuthService/CreateUser", "Create user"],
  ["/jobmesh.auth.v1.AuthService/UpdateUser", "Update user"],
  ["/jobmesh.auth.v1.AuthService/DeleteUser", "Delete user"],
  ["/jobmesh.auth.v1.AuthService/CreateApiToken", "Create API token"],
  ["/jobmesh.auth.v1.AuthService/RevokeApiToken", "Revoke API token"],
  ["/jobmesh.scheduler.v1.JobService/CreateJob", "Create job"],
  ["/jobmesh.scheduler.v1.JobService/UpdateJob", "Update job"],
  ["/jobmesh.scheduler.v1.JobService/DeleteJob", "Delete job"],
  ["/jobmesh.scheduler.v1.JobService/StartJob", "Start job"],
  ["/jobmesh.scheduler.v1.JobService/StopJob", "Stop job"],
  ["/jobmesh.scheduler.v1.JobService/TriggerJob", "Run job once"],
  ["/jobmesh.scheduler.v1.JobService/CopyJob", "Copy job"],
  ["/jobmesh.scheduler.v1.JobService/RestoreGlueVersion", "Restore GLUE version"],
  ["/jobmesh.registry.v1.RegistryService/CreateExecutorGroup", "Create executor group"],
  ["/jobmesh.registry.v1.RegistryService/UpdateExecutorGroup", "Update executor group"],
  ["/jobmesh.registry.v1.RegistryService/DeleteExecutorGroup", "Delete executor group"],
  ["/jobmesh.logs.v1.LogService/KillRun", "Kill run"],
  ["/jobmesh.logs.v1.LogService/ClearRuns", "Clear runs"],
];
const LABELS = new Map(ACTIONS);

// actionLabel names an action for a person: a known one in the user's language, any other by its
// method's words ("/pkg.Service/PauseAllJobs" reads "Pause all jobs").
export function actionLabel(action) {
  const known = LABELS.get(action);
  if (known) return t(known);
  const method = String(action || "").replace(/^.*\//, "");
  const words = method.replace(/([a-z0-9])([A-Z])/g, "$1 $2").toLowerCase();
  return words ? words[0].toUpperCase() + words.slice(1) : String(action || "");
}

// render shows the audit table with its filters.
export async function render(root, ctx) {
  const q = ctx.query;
  const f = {
    user: h("input", { name: "username", value: q.username || "", placeholder: t("contains…") }),
    action: select("action", [["", t("All")], ...ACTIONS.map(([v, l]) => [v, t(l)])], q.action || ""),
    resource: h("input", { name: "resource", value: q.resource || "", placeholder: "jobs/42" }),
    from: h("input", { type: "datetime-local", name: "start_time" }),
    to: h("input", { type: "datetime-local", name: "end_time" }),
  };
  const size = 50;
  const state = { page: 1 };
  const box = h("div", { class: "table-wrap", id: "audit" });
  const reset = () => { state.page = 1; load(); };
  root.append(h("div", { class: "page-head" }, h("h1", { text: t("Audit log") })),
    h("p", { class: "muted", text: t("Every change by a person: jobs, groups, users, tokens, logins. Values such as passwords and sources are never recorded.") }),
    h("form", {
      class: "filters card", id: "audit-filters",
      onsubmit: (e) => { e.preventDefault(); reset(); },
      onchange: reset,
    },
    field(t("User"), f.user), field(t("Action"), f.action), field(t("Object"), f.resource),
    field(t("From"), f.from), field(t("To"), f.to),
    h("button", { class: "primary", type: "submit" }, t("Search"))),
    box);

  const filtered = () => Object.values(f).some((el) => el.value);
  const list = latest();
  async function load() {
    let r;
    try {
      r = await list("/audit-events" + query({
        username: f.user.value.trim(), action: f.action.value, resource: f.resource.value.trim(),
        start_time: fromInput(f.from.value)?.toISOString(), end_time: fromInput(f.to.value)?.toISOString(),
        page_size: size, skip: (state.page - 1) * size,
      }));
    } catch (e) { box.replaceChildren(h("p", { class: "error", role: "alert", text: e.message })); return; }
    const events = r.events || [];
    const total = Number(r.total_size || 0);
    const lastPage = Math.max(1, Math.ceil(total / size));
    if (!events.length && state.page > lastPage) { state.page = lastPage; return load(); }
    box.replaceChildren(h("table", { class: "data", id: "audit-table" },
      h("thead", {}, h("tr", {}, [t("Time"), t("User"), t("Action"), t("Object"), t("Detail")].map((c) => h("th", { text: c })))),
      h("tbody", {}, events.length ? events.map((e) => h("tr", { "data-action": e.action },
        h("td", { class: "time", text: fmtTime(e.time) }), h("td", { text: e.username }),
        h("td", { class: "action", title: e.action, text: actionLabel(e.action) }),
        h("td", { class: "mono object", text: e.resource }), h("td", { text: e.detail })))
        : h("tr", {}, h("td", { colspan: 5, class: "empty", text: filtered() ? t("No events match.") : t("Nothing recorded yet.") })))),
    pager({ page: state.page, size, total, more: !!r.next_page_token, summary: t("{n} events", { n: total }) },
      (n) => { state.page = n; load(); }));
  }
  await load();
}
