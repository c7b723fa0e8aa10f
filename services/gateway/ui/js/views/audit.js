// The audit trail (admins only): who changed what, newest first.
import { api, query } from "../api.js";
import { h, fmtTime, pager } from "../dom.js";
import { t } from "../i18n.js";

// render shows the audit table.
export async function render(root) {
  const box = h("div", { class: "table-wrap", id: "audit" });
  const state = { token: "", stack: [] };
  root.append(h("div", { class: "page-head" }, h("h1", { text: t("Audit log") })),
    h("p", { class: "muted", text: t("Every change by a person: jobs, groups, users, tokens, logins. Values such as passwords and sources are never recorded.") }), box);
  async function load() {
    const r = await api("/audit-events" + query({ page_size: 50, page_token: state.token }));
    const events = r.events || [];
    box.replaceChildren(h("table", { class: "data", id: "audit-table" },
      h("thead", {}, h("tr", {}, [t("Time"), t("User"), t("Action"), t("Resource"), t("Detail")].map((c) => h("th", { text: c })))),
      h("tbody", {}, events.length ? events.map((e) => h("tr", {},
        h("td", { text: fmtTime(e.time) }), h("td", { text: e.username }), h("td", { class: "mono", text: e.action }),
        h("td", { class: "mono", text: e.resource }), h("td", { text: e.detail })))
        : h("tr", {}, h("td", { colspan: 5, class: "empty", text: t("Nothing recorded yet.") })))),
    pager(state, r.next_page_token, load));
  }
  await load();
}
