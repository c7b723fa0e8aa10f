// The API reference: the gateway's OpenAPI document (/api/openapi.json) drawn as a list of
// operations by tag, each with its parameters, request body, example and responses, and the
// schemas they use. Read-only; nothing is loaded from outside the gateway.
import { h, $$ } from "../dom.js";
import { t } from "../i18n.js";
import { zh } from "../zh.js";

// This page's strings in Chinese (kept with the page; zh.js holds the rest).
Object.assign(zh, {
  "API reference": "API 参考",
  "The REST API the console itself uses. Every operation but the anonymous ones needs Authorization: Bearer <token>: a session token from logging in, or an API token.":
    "控制台自己使用的 REST API。除匿名操作外，每个操作都需要 Authorization: Bearer <token>：登录得到的会话令牌，或 API 令牌。",
  "Download openapi.json": "下载 openapi.json",
  "Filter operations": "筛选操作",
  "no token": "无需令牌",
  "Parameters": "参数",
  "Request body": "请求体",
  "Example": "示例",
  "Responses": "响应",
  "Schemas": "数据结构",
  "Name": "名称",
  "In": "位置",
  "Type": "类型",
  "Description": "说明",
  "Status": "状态码",
  "required": "必填",
  "read-only": "只读",
  "No operation matches.": "没有匹配的操作。",
});

const METHODS = ["get", "post", "put", "patch", "delete"];

// firstSentence is a description's first sentence, on one line.
const firstSentence = (s) => s.split("\n\n")[0].replace(/\s+/g, " ").split(/(?<=\.) /)[0];

// render fetches the document and draws it.
export async function render(root) {
  const res = await fetch("/api/openapi.json");
  if (!res.ok) throw new Error(`GET /api/openapi.json: HTTP ${res.status}`);
  const doc = await res.json();
  const ref = (r) => r.replace(/^#\//, "").split("/").reduce((o, k) => (o || {})[k], doc);
  const deref = (o) => (o && o.$ref ? ref(o.$ref) : o);
  const refName = (r) => r.split("/").pop();

  // typeOf names a schema's type; a named schema links to its entry under Schemas.
  function typeOf(s) {
    if (!s) return "";
    if (s.$ref) {
      const name = refName(s.$ref);
      return h("a", { href: "", class: "mono", "data-schema": name, onclick: (e) => { e.preventDefault(); openSchema(name); } }, name);
    }
    if (s.type === "array") return h("span", {}, typeOf(s.items), "[]");
    if (s.enum) return h("span", { class: "mono", title: s.enum.join(", ") }, "enum");
    return h("span", { class: "mono" }, s.type || "object", s.format ? ` (${s.format})` : "");
  }

  function fieldsTable(schema) {
    const s = deref(schema) || {};
    const props = Object.entries(s.properties || {});
    if (!props.length) return h("p", { class: "muted small" }, typeOf(schema));
    const req = new Set(s.required || []);
    return h("table", { class: "data apiref-fields" },
      h("thead", {}, h("tr", {}, [t("Name"), t("Type"), t("Description")].map((c) => h("th", { text: c })))),
      h("tbody", {}, props.map(([name, p]) => h("tr", {},
        h("td", { class: "mono nowrap" }, name, req.has(name) ? h("span", { class: "badge", text: t("required") }) : null,
          p.readOnly ? h("span", { class: "badge", text: t("read-only") }) : null),
        h("td", { class: "nowrap" }, typeOf(p)),
        h("td", { class: "apiref-text", text: (p.description || deref(p)?.description || "") + (p.enum ? "\n" + p.enum.join(" · ") : "") })))));
  }

  function operation(path, method, op) {
    const params = (op.parameters || []).map(deref);
    const body = deref(op.requestBody);
    const json = body && body.content && body.content["application/json"];
    const anonymous = Array.isArray(op.security) && op.security.length === 0;
    return h("details", { class: "card apiref-op", "data-op": op.operationId, "data-search": `${method} ${path} ${op.summary || ""} ${op.operationId}`.toLowerCase() },
      h("summary", {},
        h("span", { class: `apiref-method ${method}`, text: method.toUpperCase() }),
        h("code", { class: "apiref-path", text: path }),
        h("span", { class: "apiref-summary", text: op.summary || "" }),
        anonymous ? h("span", { class: "badge OK", text: t("no token") }) : null),
      op.description ? h("p", { class: "apiref-text", text: op.description }) : null,
      h("p", { class: "muted small mono", text: op.operationId }),
      params.length ? [h("h3", { text: t("Parameters") }), h("table", { class: "data" },
        h("thead", {}, h("tr", {}, [t("Name"), t("In"), t("Type"), t("Description")].map((c) => h("th", { text: c })))),
        h("tbody", {}, params.map((p) => h("tr", {},
          h("td", { class: "mono nowrap" }, p.name, p.required ? h("span", { class: "badge", text: t("required") }) : null),
          h("td", { text: p.in }), h("td", { class: "nowrap" }, typeOf(p.schema)),
          h("td", { class: "apiref-text", text: p.description || "" })))))] : null,
      json ? [h("h3", { text: t("Request body") }), fieldsTable(json.schema),
        json.example !== undefined ? [h("h3", { text: t("Example") }), h("pre", { class: "apiref-example", text: JSON.stringify(json.example, null, 2) })] : null] : null,
      h("h3", { text: t("Responses") }),
      h("table", { class: "data" },
        h("thead", {}, h("tr", {}, [t("Status"), t("Type"), t("Description")].map((c) => h("th", { text: c })))),
        h("tbody", {}, Object.entries(op.responses || {}).map(([code, r]) => {
          const resp = deref(r) || {};
          const mt = Object.values(resp.content || {})[0];
          return h("tr", { "data-status": code },
            h("td", { class: "mono" }, code), h("td", { class: "nowrap" }, mt ? typeOf(mt.schema) : ""),
            h("td", { class: "apiref-text", text: resp.description || "" }));
        }))));
  }

  const byTag = new Map((doc.tags || []).map((tg) => [tg.name, { tag: tg, ops: [] }]));
  for (const [path, item] of Object.entries(doc.paths || {})) {
    for (const m of METHODS) {
      const op = item[m];
      if (!op) continue;
      const tag = (op.tags || ["other"])[0];
      if (!byTag.has(tag)) byTag.set(tag, { tag: { name: tag }, ops: [] });
      byTag.get(tag).ops.push(operation(path, m, op));
    }
  }

  const schemas = Object.entries((doc.components || {}).schemas || {}).sort(([a], [b]) => a.localeCompare(b));
  const schemaBox = h("div", { id: "apiref-schemas" }, schemas.map(([name, s]) => h("details", { class: "card apiref-schema", id: "schema-" + name, "data-schema-entry": name },
    h("summary", {}, h("code", { text: name }), s.description ? h("span", { class: "apiref-summary", text: firstSentence(s.description) }) : null),
    s.description ? h("p", { class: "apiref-text", text: s.description }) : null,
    s.enum ? h("p", { class: "mono small", text: s.enum.join(" · ") }) : fieldsTable(s))));
  function openSchema(name) {
    const el = document.getElementById("schema-" + name);
    if (!el) return;
    el.open = true;
    el.scrollIntoView({ block: "start" });
  }

  const empty = h("p", { class: "empty", hidden: true, text: t("No operation matches.") });
  const filter = h("input", {
    type: "search", id: "apiref-filter", placeholder: t("Filter operations"), "aria-label": t("Filter operations"),
    oninput: () => {
      const q = filter.value.trim().toLowerCase();
      let shown = 0;
      for (const el of $$(".apiref-op", root)) {
        el.hidden = q !== "" && !el.dataset.search.includes(q);
        if (!el.hidden) shown++;
      }
      for (const sec of $$(".apiref-tag", root)) sec.hidden = !sec.querySelector(".apiref-op:not([hidden])");
      empty.hidden = shown > 0;
    },
  });
  const info = doc.info || {};
  root.append(h("div", { class: "apiref" },
    h("link", { rel: "stylesheet", href: "apiref.css" }),
    h("div", { class: "page-head" }, h("h1", { text: t("API reference") }),
      h("span", { class: "badge", id: "apiref-version", text: `${info.title || ""} ${info.version || ""}`.trim() }),
      h("span", { class: "spacer" }), filter,
      h("a", { class: "button", href: "/api/openapi.json", download: "openapi.json", text: t("Download openapi.json") })),
    h("p", { class: "muted", text: t("The REST API the console itself uses. Every operation but the anonymous ones needs Authorization: Bearer <token>: a session token from logging in, or an API token.") }),
    info.description ? h("details", { class: "card" }, h("summary", { text: info.title || "" }), h("p", { class: "apiref-text", text: info.description })) : null,
    [...byTag.values()].filter((g) => g.ops.length).map((g) => h("section", { class: "apiref-tag", "data-tag": g.tag.name },
      h("h2", { text: g.tag.name }), g.tag.description ? h("p", { class: "muted", text: g.tag.description }) : null, g.ops)),
    empty,
    h("h2", { text: t("Schemas") }), schemaBox));
}
