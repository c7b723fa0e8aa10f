// Small DOM helpers: element building, dialogs, toasts and formatting. No framework.
import { t } from "./i18n.js";

// h builds an element. attrs: class, text, html-free attributes, on<event> handlers, dataset via
// data-*. Children may be strings, nodes, arrays, or null/false (skipped).
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = v;
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "value") el.value = v;
    else if (k === "style") el.style.cssText = v; // CSSOM, which the console's CSP (no inline styles) allows
    else if (k === "checked" || k === "disabled" || k === "selected" || k === "hidden" || k === "required" || k === "readOnly" || k === "multiple") el[k] = !!v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

// $ finds one element.
export const $ = (sel, root = document) => root.querySelector(sel);
// $$ finds every element.
export const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

// short strips an enum's prefix: short("JOB_STATUS_RUNNING", "JOB_STATUS_") is "RUNNING".
export const short = (v, prefix) => (v || "").startsWith(prefix) ? v.slice(prefix.length) : (v || "");

// fmtTime shows a timestamp in the browser's time zone, or "—".
export function fmtTime(ts) {
  if (!ts) return "—";
  const d = new Date(ts);
  if (isNaN(d) || d.getTime() <= 0) return "—";
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// fmtDuration shows the time between two timestamps.
export function fmtDuration(from, to) {
  if (!from) return "—";
  const a = new Date(from).getTime();
  const b = to ? new Date(to).getTime() : Date.now();
  if (!(a > 0) || !(b > 0)) return "—";
  const ms = Math.max(0, b - a);
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const m = Math.floor(ms / 60000);
  return m < 60 ? `${m} min ${Math.round((ms % 60000) / 1000)} s` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

// toast shows a short message at the bottom of the page.
export function toast(msg, kind = "info") {
  let box = $("#toasts");
  if (!box) { box = h("div", { id: "toasts", role: "status", "aria-live": "polite" }); document.body.append(box); }
  const el = h("div", { class: `toast ${kind}`, text: msg });
  box.append(el);
  setTimeout(() => el.remove(), kind === "error" ? 8000 : 4000);
}

// modal opens a dialog with a title, a body and buttons; it resolves with the value of the button
// pressed (or null when dismissed). A button's onclick may return false to keep the dialog open,
// or a promise: the dialog waits for it and shows its error, if any, inside.
export function modal(title, body, buttons = [{ label: t("Close"), value: null }]) {
  return new Promise((resolve) => {
    const err = h("p", { class: "error dialog-error", role: "alert" });
    const dlg = h("dialog", { class: "dialog", "aria-label": title });
    const close = (v) => { dlg.close(); dlg.remove(); resolve(v); };
    const btns = buttons.map((b) => h("button", {
      type: "button", class: b.class || (b.primary ? "primary" : ""),
      onclick: async () => {
        err.textContent = "";
        if (b.onclick) {
          try {
            const r = await b.onclick();
            if (r === false) return;
          } catch (e) { err.textContent = e.message; return; }
        }
        close(b.value);
      },
    }, b.label));
    dlg.append(h("form", { method: "dialog", onsubmit: (e) => { e.preventDefault(); const p = buttons.findIndex((b) => b.primary); if (p >= 0) btns[p].click(); } },
      h("h3", { text: title }), body, err, h("div", { class: "dialog-buttons" }, btns)));
    dlg.addEventListener("cancel", (e) => { e.preventDefault(); close(null); });
    document.body.append(dlg);
    dlg.showModal();
    const first = dlg.querySelector("input, textarea, select");
    if (first) first.focus();
  });
}

// confirmDialog asks a yes/no question.
export async function confirmDialog(msg, okLabel = t("OK")) {
  const v = await modal(t("Please confirm"), h("p", { text: msg }), [
    { label: t("Cancel"), value: false },
    { label: okLabel, value: true, primary: true, class: "primary danger" },
  ]);
  return v === true;
}

// field wraps an input with its label.
export function field(label, input, hint) {
  return h("label", { class: "field" }, h("span", { class: "label", text: label }), input, hint ? h("small", { class: "hint", text: hint }) : null);
}

// select builds a <select> from [value, label] pairs.
export function select(name, options, value, attrs = {}) {
  return h("select", { name, ...attrs }, options.map(([v, l]) => h("option", { value: v, selected: String(v) === String(value) }, l)));
}

// badge shows an enum value as a coloured label.
export function badge(value, cls) {
  return h("span", { class: `badge ${cls || value}`, text: value });
}

// debounce delays fn until calls stop for ms.
export function debounce(fn, ms) {
  let timer;
  return (...args) => { clearTimeout(timer); timer = setTimeout(() => fn(...args), ms); };
}

// forbidden is what a page shows when the API answers 403.
export function forbidden(detail) {
  return h("div", { class: "card forbidden", role: "alert" },
    h("h2", { text: t("No permission") }),
    h("p", { text: t("Your account may not see or change this.") }),
    detail ? h("p", { class: "muted small", text: detail }) : null);
}

// pager shows previous/next buttons over cursor pages. state: {tokens: [], token}; load(token)
// reloads with a page token.
export function pager(state, next, load, extra) {
  const prev = state.stack.length > 0;
  return h("div", { class: "pager" },
    h("button", { type: "button", disabled: !prev, onclick: () => { state.token = state.stack.pop() || ""; load(); } }, "‹ " + t("Previous")),
    h("span", { class: "muted", text: t("Page {n}", { n: state.stack.length + 1 }) + (extra ? " · " + extra : "") }),
    h("button", { type: "button", disabled: !next, onclick: () => { state.stack.push(state.token); state.token = next; load(); } }, t("Next") + " ›"));
}
