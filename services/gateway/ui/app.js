// jobmesh web UI: plain JavaScript modules over the REST API (/api/v1). No build step, no assets
// from outside the binary. This module is the shell: login, the navigation, the router and the
// user menu; each page lives in js/views/.
import { api, session, ApiError } from "./js/api.js";
import { h, $, modal, field, toast, forbidden } from "./js/dom.js";
import { t, lang, setLang, LANGS } from "./js/i18n.js";
import { zoneSetting, setZoneSetting, zoneNames, browserZone } from "./js/tz.js";
import * as dashboard from "./js/views/dashboard.js";
import * as jobs from "./js/views/jobs.js";
import * as glue from "./js/views/glue.js";
import * as workflows from "./js/views/workflows.js";
import * as runs from "./js/views/runs.js";
import * as executors from "./js/views/executors.js";
import * as users from "./js/views/users.js";
import * as tokens from "./js/views/tokens.js";
import * as audit from "./js/views/audit.js";
import * as apiref from "./js/views/apiref.js";

const app = document.getElementById("app");
let me = null; // the logged-in user
let cleanups = [];

const NAV = [
  ["dashboard", "Dashboard"],
  ["jobs", "Jobs"],
  ["workflows", "Workflows"],
  ["runs", "Runs"],
  ["executors", "Executors"],
  ["users", "Users", "admin"],
  ["tokens", "API tokens"],
  ["audit", "Audit log", "admin"],
  ["api", "API reference"],
];

const ROUTES = [
  [/^dashboard$/, dashboard.render],
  [/^jobs$/, jobs.renderList],
  [/^jobs\/new$/, jobs.renderForm],
  [/^jobs\/(\d+)$/, jobs.renderForm],
  [/^jobs\/(\d+)\/glue$/, glue.render],
  [/^workflows$/, workflows.renderList],
  [/^workflows\/new$/, workflows.renderForm],
  [/^workflows\/(\d+)$/, workflows.renderForm],
  [/^workflows\/(\d+)\/instances$/, workflows.renderInstances],
  [/^workflows\/instances\/(.+)$/, workflows.renderInstance],
  [/^runs$/, runs.renderList],
  [/^runs\/(.+)$/, runs.renderDetail],
  [/^executors$/, executors.render],
  [/^users$/, users.render, "admin"],
  [/^tokens$/, tokens.render],
  [/^audit$/, audit.render, "admin"],
  [/^api$/, apiref.render],
];

const isAdmin = () => me && me.role === "ROLE_ADMIN";
const canWrite = () => me && (me.role === "ROLE_ADMIN" || me.role === "ROLE_OPERATOR");

// zoneSwitch picks the time zone every page shows times in (tz.js): the browser's, UTC, or any
// IANA zone; kept in this browser.
function zoneSwitch(onChange) {
  const cur = zoneSetting();
  return h("select", {
    class: "zone", "aria-label": t("Time zone"), title: t("Time zone of the times shown"), id: "tz-switch",
    onchange: (e) => { setZoneSetting(e.target.value); onChange(); },
  }, h("option", { value: "", selected: cur === "" }, t("Browser time ({zone})", { zone: browserZone() })),
  zoneNames().map((z) => h("option", { value: z, selected: z === cur }, z)));
}

function langSwitch(onChange) {
  return h("select", {
    class: "lang", "aria-label": "Language / 语言", id: "lang-switch",
    onchange: (e) => { setLang(e.target.value); onChange(); },
  }, LANGS.map(([v, l]) => h("option", { value: v, selected: v === lang() }, l)));
}

function renderLogin(message) {
  stopView();
  document.title = "jobmesh · " + t("Log in");
  const user = h("input", { name: "username", autocomplete: "username", required: true, autofocus: true });
  const pass = h("input", { name: "password", type: "password", autocomplete: "current-password", required: true });
  const err = h("p", { class: "error", role: "alert", text: message || "" });
  const btn = h("button", { class: "primary", type: "submit" }, t("Log in"));
  app.replaceChildren(h("div", { class: "login-page" },
    h("form", {
      class: "login card", id: "login-form",
      onsubmit: async (e) => {
        e.preventDefault();
        err.textContent = "";
        btn.disabled = true;
        try {
          const r = await api("/auth/login", { method: "POST", body: { username: user.value, password: pass.value } });
          session.token = r.token;
          me = r.user;
          if (!location.hash || location.hash === "#/" || location.hash === "#") location.hash = "#/dashboard";
          renderShell();
        } catch (ex) {
          err.textContent = ex.message; // worded by its reason: LOGIN_FAILED, LOGIN_THROTTLED, …
        } finally { btn.disabled = false; }
      },
    },
    h("div", { class: "login-head" }, h("span", { class: "logo", text: "jobmesh" }), langSwitch(() => renderLogin())),
    h("p", { class: "muted", text: t("Distributed job scheduler") }),
    field(t("User name"), user), field(t("Password"), pass), err, btn)));
}

function renderShell() {
  const nav = h("nav", { class: "side", "aria-label": t("Main") },
    NAV.filter(([, , need]) => need !== "admin" || isAdmin())
      .map(([id, label]) => h("a", { href: "#/" + id, "data-nav": id }, t(label))));
  const roleName = t(({ ROLE_ADMIN: "admin", ROLE_OPERATOR: "operator", ROLE_VIEWER: "viewer" })[me.role] || "user");
  const top = h("header", { class: "top" },
    h("a", { class: "logo", href: "#/dashboard", text: "jobmesh" }),
    h("span", { id: "sched-status", class: "muted small" }),
    h("span", { class: "spacer" }),
    zoneSwitch(() => renderShell()),
    langSwitch(() => renderShell()),
    h("span", { class: "who", id: "who" }, me.username, " ", h("span", { class: "badge role", text: roleName })),
    h("button", { type: "button", id: "change-password", onclick: changePassword }, t("Change password")),
    h("button", { type: "button", id: "logout", onclick: logout }, t("Log out")));
  app.replaceChildren(top, h("div", { class: "layout" }, nav, h("main", { id: "view" })));
  route();
  api("/scheduler/status").then((st) => {
    const el = $("#sched-status");
    if (!el) return;
    const replicas = (st.replicas || []).length;
    const partitions = st.partition_count || (st.partitions || []).length;
    const led = (st.partitions || []).filter((p) => p.leader_id).length;
    el.textContent = t("{replicas} schedulers · {led}/{partitions} partitions led", { replicas, led, partitions });
    el.title = (st.partitions || []).map((p) => `${p.partition}: ${p.leader_id || "-"}`).join("\n");
  }).catch(() => {});
}

async function changePassword() {
  const oldp = h("input", { type: "password", name: "old_password", autocomplete: "current-password" });
  const newp = h("input", { type: "password", name: "new_password", autocomplete: "new-password" });
  const again = h("input", { type: "password", name: "new_password_again", autocomplete: "new-password" });
  await modal(t("Change password"), h("div", { class: "form-grid" },
    field(t("Current password"), oldp), field(t("New password"), newp), field(t("New password again"), again)), [
    { label: t("Cancel"), value: null },
    {
      label: t("Save"), primary: true, onclick: async () => {
        if (newp.value !== again.value) throw new Error(t("The new passwords differ."));
        await api("/auth/password", { method: "POST", body: { old_password: oldp.value, new_password: newp.value } });
        toast(t("Password changed."));
      },
    },
  ]);
}

async function logout() {
  try { await api("/auth/logout", { method: "POST", body: {} }); } catch { /* the token may be gone already */ }
  session.token = "";
  me = null;
  location.hash = "";
  renderLogin();
}

function stopView() {
  for (const c of cleanups) { try { c(); } catch { /* ignore */ } }
  cleanups = [];
}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  return { path: path || "dashboard", query: Object.fromEntries(new URLSearchParams(qs || "")) };
}

// navigate moves to a page; query goes into the hash so a reload or a shared link keeps filters.
export function navigate(path, queryObj) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(queryObj || {})) if (v !== undefined && v !== null && v !== "") q.set(k, v);
  const s = q.toString();
  location.hash = "#/" + path + (s ? "?" + s : "");
}

let routeSeq = 0;

async function route() {
  if (!me) return;
  stopView();
  const main = $("#view");
  if (!main) return;
  // Each visit renders into its own container, so a slower earlier visit that finishes late
  // fills a detached element instead of the page.
  const seq = ++routeSeq;
  const view = h("div", { class: "view", "data-seq": seq });
  main.replaceChildren(view);
  const { path, query } = parseHash();
  for (const a of document.querySelectorAll("nav.side a")) a.classList.toggle("active", path === a.dataset.nav || path.startsWith(a.dataset.nav + "/"));
  let found = null;
  for (const [re, fn, need] of ROUTES) {
    const m = path.match(re);
    if (m) { found = { fn, need, params: m.slice(1).map(decodeURIComponent) }; break; }
  }
  if (!found) { view.append(h("p", { class: "empty", text: t("No such page.") })); return; }
  if (found.need === "admin" && !isAdmin()) { view.append(forbidden()); return; }
  const ctx = {
    me, isAdmin: isAdmin(), canWrite: canWrite(), params: found.params, query, navigate,
    onCleanup: (fn) => cleanups.push(fn),
    refresh: () => route(),
  };
  try {
    await found.fn(view, ctx);
  } catch (e) {
    if (seq !== routeSeq) return;
    view.replaceChildren(e instanceof ApiError && e.status === 403 ? forbidden(e.message) : h("p", { class: "error", role: "alert", text: e.message }));
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("jobmesh:unauthenticated", () => {
  if (me) { me = null; session.token = ""; renderLogin(t("Your session has ended; please log in again.")); }
});

async function boot() {
  if (!session.token) { renderLogin(); return; }
  try {
    me = (await api("/auth/me")).user;
    renderShell();
  } catch {
    session.token = "";
    renderLogin();
  }
}
boot();
