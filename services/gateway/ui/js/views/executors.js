// Executor groups (create, edit, delete; AUTO or MANUAL addresses) and the live executors, polled,
// with the runs each is running and the ones that left shown offline with when they were last seen.
import { api, query } from "../api.js";
import { h, short, fmtTime, toast, modal, confirmDialog, field, select, badge } from "../dom.js";
import { t } from "../i18n.js";

// seen remembers executors across polls (and page visits), so one that leaves shows as offline.
const seen = new Map();

// render shows the executors page.
export async function render(root, ctx) {
  const groupsBox = h("div", { class: "table-wrap", id: "groups" });
  const execBox = h("div", { class: "table-wrap", id: "executors" });
  root.append(
    h("div", { class: "page-head" }, h("h1", { text: t("Executor groups") }),
      ctx.isAdmin ? h("button", { type: "button", class: "primary", id: "new-group", onclick: () => editGroup(null, load) }, "+ " + t("New group")) : null),
    groupsBox,
    h("div", { class: "page-head" }, h("h2", { text: t("Executors") }), h("span", { class: "muted small", text: t("live; refreshed every 5 s") })),
    execBox);

  async function load() {
    const [{ groups = [] }, { executors = [] }, running] = await Promise.all([api("/executor-groups"), api("/executors"),
      api("/logs:countRunning").catch(() => null)]);
    // Runs running now per address (logsvc's RUNNING runs, limited to the caller's groups).
    const busy = new Map((running?.executors || []).map((x) => [x.executor_address, x]));
    const now = Date.now();
    const live = new Set();
    for (const e of executors) {
      const key = e.app_name + "/" + e.instance_id;
      live.add(key);
      seen.set(key, { ...e, online: true, seenAt: now });
    }
    for (const [key, e] of seen) if (!live.has(key) && e.online) seen.set(key, { ...e, online: false, last_seen_time: e.last_seen_time || new Date(e.seenAt).toISOString() });
    groupsBox.replaceChildren(h("table", { class: "data", id: "groups-table" },
      h("thead", {}, h("tr", {}, [t("ID"), t("App name"), t("Title"), t("Address type"), t("Online addresses"), t("Updated"), t("Actions")].map((c) => h("th", { text: c })))),
      h("tbody", {}, groups.length ? groups.map((g) => {
        const manual = g.address_type === "ADDRESS_TYPE_MANUAL";
        return h("tr", { "data-group": g.app_name },
          h("td", { text: g.id }), h("td", { class: "mono", text: g.app_name }), h("td", { text: g.title }),
          h("td", {}, badge(manual ? t("MANUAL") : t("AUTO"), manual ? "STOPPED" : "RUNNING")),
          h("td", {}, (g.addresses || []).length ? (g.addresses || []).map((a) => h("div", { class: "mono", text: a })) : h("span", { class: "muted", text: t("none") })),
          h("td", { text: fmtTime(g.update_time) }),
          h("td", {}, h("div", { class: "actions" },
            h("a", { class: "button small", href: `#/jobs?group_id=${g.id}` }, t("Jobs")),
            ctx.isAdmin ? h("button", { type: "button", class: "small", onclick: () => editGroup(g, load) }, t("Edit")) : null,
            ctx.isAdmin ? h("button", {
              type: "button", class: "small danger", onclick: async () => {
                if (!(await confirmDialog(t("Delete executor group {name}?", { name: g.app_name }), t("Delete")))) return;
                try { await api(`/executor-groups/${g.id}`, { method: "DELETE" }); toast(t("Deleted.")); load(); } catch (e) { toast(e.message, "error"); }
              },
            }, t("Delete")) : null)));
      }) : h("tr", {}, h("td", { colspan: 7, class: "empty", text: t("No executor groups.") })))));
    const all = [...seen.values()].sort((a, b) => (b.online - a.online) || a.app_name.localeCompare(b.app_name) || a.instance_id.localeCompare(b.instance_id));
    execBox.replaceChildren(h("table", { class: "data", id: "executors-table" },
      h("thead", {}, h("tr", {}, [t("State"), t("App name"), t("Instance"), t("Kind"), t("Address"), t("Running jobs"), t("Version"), t("Capacity"), t("Started"), t("Last seen"), t("Labels")].map((c) => h("th", { text: c })))),
      h("tbody", {}, all.length ? all.map((e) => h("tr", { "data-executor": e.instance_id },
        h("td", {}, badge(e.online ? t("ONLINE") : t("OFFLINE"), e.online ? "SUCCESS" : "FAIL")),
        h("td", { class: "mono", text: e.app_name }), h("td", { class: "mono", text: e.instance_id }),
        h("td", { class: "kind" }, kindBadge(e.kind)), h("td", { class: "mono", text: e.address }),
        h("td", { class: "running-jobs" }, runningCell(e, busy.get(e.address), groups)),
        h("td", { text: e.version || "—" }), h("td", { text: e.capacity || "—" }), h("td", { text: fmtTime(e.start_time) }),
        h("td", { text: fmtTime(e.last_seen_time) }),
        h("td", { class: "small", text: Object.entries(e.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "—" })))
        : h("tr", {}, h("td", { colspan: 11, class: "empty", text: t("No executor has registered.") })))));
  }
  await load();
  const timer = setInterval(() => { if (!document.hidden && !document.querySelector("dialog[open]")) load().catch(() => {}); }, 5000);
  ctx.onCleanup(() => clearInterval(timer));
}

// kindBadge names the protocol an executor speaks: a jobmesh agent (or SDK executor) over gRPC,
// or an unchanged XXL-JOB executor over XXL-JOB's HTTP protocol.
function kindBadge(kind) {
  return kind === "EXECUTOR_KIND_XXL_JOB"
    ? h("span", { class: "badge", title: t("An XXL-JOB executor, registered through the XXL-JOB admin API"), text: "XXL-JOB" })
    : h("span", { class: "muted", text: t("jobmesh agent") });
}

// runningCell shows how many runs an executor is running and of which jobs, linked to those runs.
function runningCell(e, busy, groups) {
  if (!e.online || !busy || Number(busy.running) === 0) return h("span", { class: "muted", text: "0" });
  const group = groups.find((g) => g.app_name === e.app_name);
  const href = "#/runs" + query({ group_id: group?.id, executor_address: e.address, status: "RUN_STATUS_RUNNING" });
  const jobs = (busy.job_ids || []).map((id) => "#" + id).join(", ");
  return h("a", { href, title: t("Runs running on this executor") }, t("{n} (jobs {jobs})", { n: busy.running, jobs }));
}

async function editGroup(g, reload) {
  const app = h("input", { name: "app_name", value: g?.app_name || "", required: true, disabled: !!g, class: "mono" });
  const title = h("input", { name: "title", value: g?.title || "" });
  const type = select("address_type", [["ADDRESS_TYPE_AUTO", t("AUTO (executors register themselves)")], ["ADDRESS_TYPE_MANUAL", t("MANUAL (fixed addresses)")]], g?.address_type || "ADDRESS_TYPE_AUTO");
  const addrs = h("textarea", { name: "manual_addresses", rows: 3, placeholder: "10.0.0.5:9999\n10.0.0.6:9999" });
  addrs.value = (g?.manual_addresses || []).join("\n");
  const token = h("input", { name: "access_token", value: g?.access_token || "", autocomplete: "off" });
  const body = h("div", { class: "form-grid" }, field(t("App name"), app, t("The name executors register under.")), field(t("Title"), title),
    field(t("Address type"), type), field(t("Manual addresses (one per line)"), addrs), field(t("Access token"), token, t("Sent to this group's executors with every fire.")));
  const sync = () => { addrs.closest(".field").hidden = type.value !== "ADDRESS_TYPE_MANUAL"; };
  type.addEventListener("change", sync);
  const pending = modal(g ? t("Edit group {name}", { name: g.app_name }) : t("New executor group"), body, [
    { label: t("Cancel"), value: null },
    {
      label: t("Save"), primary: true, value: "ok", onclick: async () => {
        const group = {
          app_name: app.value.trim(), title: title.value.trim(), address_type: type.value, access_token: token.value,
          manual_addresses: type.value === "ADDRESS_TYPE_MANUAL" ? addrs.value.split(/[\s,]+/).filter(Boolean) : [],
        };
        if (g) {
          delete group.app_name;
          await api(`/executor-groups/${g.id}`, { method: "PATCH", body: group });
        } else {
          await api("/executor-groups", { method: "POST", body: group });
        }
      },
    },
  ]);
  sync();
  if ((await pending) === "ok") { toast(t("Saved.")); reload(); }
}
