// Users (admins only): create, change role, executor groups and password, delete.
import { api } from "../api.js";
import { h, short, fmtTime, toast, modal, confirmDialog, field, select, badge } from "../dom.js";
import { t } from "../i18n.js";
import { loadGroups, groupName } from "../groups.js";

const ROLES = () => [["ROLE_ADMIN", t("admin")], ["ROLE_OPERATOR", t("operator")], ["ROLE_VIEWER", t("viewer")]];

// render shows the user table.
export async function render(root, ctx) {
  const groups = await loadGroups();
  const box = h("div", { class: "table-wrap", id: "users" });
  root.append(h("div", { class: "page-head" }, h("h1", { text: t("Users") }),
    h("button", { type: "button", class: "primary", id: "new-user", onclick: () => edit(null) }, "+ " + t("New user"))),
  h("p", { class: "muted", text: t("Admins act on every executor group; operators and viewers only on the groups listed. Viewers only read.") }), box);

  async function load() {
    const { users = [] } = await api("/users");
    box.replaceChildren(h("table", { class: "data", id: "users-table" },
      h("thead", {}, h("tr", {}, [t("ID"), t("User name"), t("Role"), t("Executor groups"), t("Created"), t("Actions")].map((c) => h("th", { text: c })))),
      h("tbody", {}, users.map((u) => h("tr", { "data-user": u.username },
        h("td", { text: u.id }), h("td", { text: u.username }),
        h("td", {}, badge(t(short(u.role, "ROLE_").toLowerCase()), short(u.role, "ROLE_"))),
        h("td", { text: u.role === "ROLE_ADMIN" ? t("all") : (u.group_ids || []).map((g) => groupName(groups, g)).join(", ") || t("none") }),
        h("td", { text: fmtTime(u.create_time) }),
        h("td", {}, h("div", { class: "actions" },
          h("button", { type: "button", class: "small", onclick: () => edit(u) }, t("Edit")),
          u.username !== ctx.me.username ? h("button", {
            type: "button", class: "small danger", onclick: async () => {
              if (!(await confirmDialog(t("Delete user {name}?", { name: u.username }), t("Delete")))) return;
              try { await api(`/users/${u.id}`, { method: "DELETE" }); toast(t("Deleted.")); load(); } catch (e) { toast(e.message, "error"); }
            },
          }, t("Delete")) : null)))))));
  }

  async function edit(u) {
    const name = h("input", { name: "username", value: u?.username || "", disabled: !!u, autocomplete: "off" });
    const role = select("role", ROLES(), u?.role || "ROLE_VIEWER");
    const pass = h("input", { name: "password", type: "password", autocomplete: "new-password", placeholder: u ? t("leave empty to keep") : t("8 characters or more") });
    const checks = groups.map((g) => h("label", { class: "check" }, h("input", { type: "checkbox", name: "group_ids", value: g.id, checked: (u?.group_ids || []).map(String).includes(String(g.id)) }), " ", `${g.title || g.app_name} (${g.app_name})`));
    const groupField = field(t("Executor groups"), h("div", { class: "checks" }, checks.length ? checks : t("No executor groups.")));
    const sync = () => { groupField.hidden = role.value === "ROLE_ADMIN"; };
    role.addEventListener("change", sync);
    const pending = modal(u ? t("Edit user {name}", { name: u.username }) : t("New user"), h("div", { class: "form-grid" },
      field(t("User name"), name), field(t("Role"), role), field(u ? t("New password") : t("Password"), pass), groupField), [
      { label: t("Cancel"), value: null },
      {
        label: t("Save"), primary: true, value: "ok", onclick: async () => {
          const user = { username: name.value.trim(), role: role.value, group_ids: role.value === "ROLE_ADMIN" ? [] : checks.map((l) => l.querySelector("input")).filter((i) => i.checked).map((i) => i.value) };
          if (u) await api(`/users/${u.id}`, { method: "PATCH", body: { user: { ...user, id: u.id }, password: pass.value } });
          else await api("/users", { method: "POST", body: { user, password: pass.value } });
        },
      },
    ]);
    sync();
    if ((await pending) === "ok") { toast(t("Saved.")); load(); }
  }
  await load();
}
