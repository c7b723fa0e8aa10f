// API tokens for automation: create (the secret is shown once), list, revoke. Everyone manages
// their own; admins see and revoke all.
import { api } from "../api.js";
import { h, fmtTime, toast, modal, confirmDialog, field } from "../dom.js";
import { t } from "../i18n.js";

// render shows the token table.
export async function render(root, ctx) {
  const box = h("div", { class: "table-wrap", id: "tokens" });
  root.append(h("div", { class: "page-head" }, h("h1", { text: t("API tokens") }),
    h("button", { type: "button", class: "primary", id: "new-token", onclick: create }, "+ " + t("New token"))),
  h("p", { class: "muted", text: t("A token acts as the user who created it. Send it as \"Authorization: Bearer <token>\" over REST or gRPC.") }), box);

  async function load() {
    const { tokens = [] } = await api("/api-tokens");
    box.replaceChildren(h("table", { class: "data", id: "tokens-table" },
      h("thead", {}, h("tr", {}, [t("ID"), t("Name"), t("User id"), t("Created"), t("Expires"), t("Last used"), t("Actions")].map((c) => h("th", { text: c })))),
      h("tbody", {}, tokens.length ? tokens.map((k) => h("tr", { "data-token": k.name },
        h("td", { text: k.id }), h("td", { text: k.name }), h("td", { text: k.user_id }), h("td", { text: fmtTime(k.create_time) }),
        h("td", { text: k.expire_time ? fmtTime(k.expire_time) : t("never") }), h("td", { text: fmtTime(k.last_used_time) }),
        h("td", {}, h("button", {
          type: "button", class: "small danger", onclick: async () => {
            if (!(await confirmDialog(t("Revoke token {name}? Whatever uses it stops working at once.", { name: k.name }), t("Revoke")))) return;
            try { await api(`/api-tokens/${k.id}`, { method: "DELETE" }); toast(t("Revoked.")); load(); } catch (e) { toast(e.message, "error"); }
          },
        }, t("Revoke")))))
        : h("tr", {}, h("td", { colspan: 7, class: "empty", text: t("No API tokens.") })))));
  }

  async function create() {
    const name = h("input", { name: "name", placeholder: "ci-deploy" });
    const days = h("input", { name: "days", type: "number", min: 0, value: 90 });
    let secret = "";
    const v = await modal(t("New API token"), h("div", { class: "form-grid" }, field(t("Name"), name), field(t("Expires after (days, 0 = never)"), days)), [
      { label: t("Cancel"), value: null },
      {
        label: t("Create"), primary: true, value: "ok", onclick: async () => {
          const token = { name: name.value.trim() };
          if (Number(days.value) > 0) token.expire_time = new Date(Date.now() + Number(days.value) * 864e5).toISOString();
          secret = (await api("/api-tokens", { method: "POST", body: { token } })).secret;
        },
      },
    ]);
    if (v !== "ok") return;
    const out = h("input", { readOnly: true, value: secret, class: "mono wide", id: "token-secret" });
    await modal(t("Token created"), h("div", { class: "form-grid" }, h("p", { text: t("Copy the token now: it is not shown again.") }), out,
      h("button", { type: "button", onclick: () => { out.select(); navigator.clipboard?.writeText(secret).then(() => toast(t("Copied."))).catch(() => document.execCommand("copy")); } }, t("Copy to clipboard"))));
    load();
  }
  await load();
}
