// Small DOM helpers: element building, dialogs, toasts and formatting. No framework.
import { t } from "./i18n.js";
import { formatTime } from "./tz.js";

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

// fmtTime shows a timestamp in the zone the user chose (tz.js), with the zone's offset, or "—".
export const fmtTime = formatTime;

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

// pager shows the pages of a list the API pages by skip: previous and next, the page numbers
// around the current one with the first and the last, a box to jump to a page, and a summary.
// p: {page, size, total, capped, more, summary}: capped says more items match than total (the
// count stopped), more that a page follows this one. go(n) shows page n.
export function pager(p, go) {
  const counted = Math.max(1, Math.ceil((Number(p.total) || 0) / p.size));
  const last = p.capped ? Math.max(counted, p.page + (p.more ? 1 : 0)) : Math.max(counted, p.page);
  const nums = new Set([1, last]);
  for (let n = p.page - 2; n <= p.page + 2; n++) if (n >= 1 && n <= last) nums.add(n);
  const items = [];
  let prev = 0;
  for (const n of [...nums].sort((a, b) => a - b)) {
    if (n > prev + 1) items.push(h("span", { class: "gap muted", text: "…" }));
    items.push(h("button", {
      type: "button", class: "page-num small" + (n === p.page ? " current" : ""), "data-page": n,
      "aria-current": n === p.page ? "page" : null, "aria-label": t("Page {n}", { n }),
      onclick: () => { if (n !== p.page) go(n); },
    }, String(n)));
    prev = n;
  }
  if (p.capped) items.push(h("span", { class: "gap muted", text: "…" }));
  const jump = h("input", { type: "number", name: "page", min: 1, max: p.capped ? null : last, value: p.page, class: "page-input", "aria-label": t("Go to page") });
  const jumpTo = () => {
    const n = Math.floor(Number(jump.value));
    if (!(n >= 1)) { jump.value = p.page; return; }
    go(p.capped ? n : Math.min(n, last));
  };
  jump.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); jumpTo(); } });
  const of = p.capped ? `${last}+` : String(last);
  return h("div", { class: "pager", role: "navigation", "aria-label": t("Pages") },
    h("span", { class: "muted pager-summary", text: (p.summary ? p.summary + " · " : "") + t("Page {n} of {m}", { n: p.page, m: of }) }),
    h("span", { class: "spacer" }),
    h("button", { type: "button", class: "small", "data-page": "prev", disabled: p.page <= 1, onclick: () => go(p.page - 1) }, "‹ " + t("Previous")),
    h("span", { class: "page-nums" }, items),
    h("button", { type: "button", class: "small", "data-page": "next", disabled: !p.more, onclick: () => go(p.page + 1) }, t("Next") + " ›"),
    h("label", { class: "page-jump" }, t("Go to page"), " ", jump,
      h("button", { type: "button", class: "small", "data-page": "go", onclick: jumpTo }, t("Go"))));
}
