// The GLUE editor: a job's script with syntax highlighting, its remark, the kept versions, a diff
// of any version against the editor, and restore.
import { api } from "../api.js";
import { h, fmtTime, toast, confirmDialog, field, select } from "../dom.js";
import { t } from "../i18n.js";
import { glueOptions, isScript } from "../enums.js";
import { codeEditor, langOf } from "../highlight.js";
import { diffLines } from "../diff.js";

// render shows the editor of job ctx.params[0].
export async function render(root, ctx) {
  const id = ctx.params[0];
  let job = (await api(`/jobs/${id}`)).job;
  const ro = !ctx.canWrite;
  const editor = codeEditor({ value: job.glue_source || "", lang: langOf(job.glue_type), readOnly: ro, label: t("Source") });
  const type = select("glue_type", glueOptions(job.glue_type, (v) => isScript(v) && (v !== "GLUE_TYPE_GLUE_GROOVY" || job.glue_type === v)), job.glue_type, { disabled: ro, onchange: () => editor.setLang(langOf(type.value)) });
  const remark = h("input", { name: "glue_remark", placeholder: t("What changed (saved with the version)"), maxlength: 128, disabled: ro });
  const err = h("p", { class: "error", role: "alert" });
  const versionsBox = h("div", { class: "versions", id: "glue-versions" });
  const diffBox = h("div", { class: "diff-box", id: "glue-diff" });
  const head = h("span", { class: "muted" });

  const showHead = () => { head.textContent = t("version {v} · source updated {time}", { v: job.version, time: fmtTime(job.glue_updated_time) }); };

  async function save() {
    err.textContent = "";
    if (!remark.value.trim()) { err.textContent = t("Write a remark for this version."); remark.focus(); return; }
    try {
      const r = await api(`/jobs/${id}`, { method: "PATCH", body: { version: job.version, glue_type: type.value, glue_source: editor.value, glue_remark: remark.value.trim() } });
      job = r.job;
      remark.value = "";
      showHead();
      toast(t("Saved as a new GLUE version."));
      for (const w of r.warnings || []) toast(w, "warn");
      await loadVersions();
    } catch (e) {
      err.textContent = e.message;
    }
  }

  async function loadVersions() {
    const { versions = [] } = await api(`/jobs/${id}/glue-versions`);
    versionsBox.replaceChildren(h("h2", { text: t("Versions") }),
      versions.length ? h("ul", { class: "version-list" }, versions.map((v, i) => h("li", { "data-version": v.version },
        h("div", {}, h("strong", { text: "v" + v.version }), i === 0 ? h("span", { class: "badge SUCCESS", text: t("current") }) : null,
          " ", h("span", { class: "muted small", text: fmtTime(v.create_time) })),
        h("div", { class: "remark", text: v.glue_remark || "—" }),
        h("div", { class: "actions" },
          h("button", { type: "button", class: "small", onclick: () => showDiff(v) }, t("Diff")),
          h("button", { type: "button", class: "small", onclick: () => { editor.value = v.glue_source || ""; toast(t("Loaded v{v} into the editor; save to keep it.", { v: v.version })); } }, t("Load")),
          !ro && i > 0 ? h("button", { type: "button", class: "small", onclick: () => restore(v) }, t("Restore")) : null))))
        : h("p", { class: "muted", text: t("No saved versions.") }));
  }

  function showDiff(v) {
    const lines = diffLines(v.glue_source || "", editor.value);
    const changed = lines.filter((l) => l.op !== " ").length;
    diffBox.replaceChildren(
      h("div", { class: "diff-head" }, h("strong", { text: t("v{v} → editor", { v: v.version }) }), " ",
        h("span", { class: "muted", text: changed ? t("{n} lines differ", { n: changed }) : t("identical") }),
        h("button", { type: "button", class: "small", onclick: () => diffBox.replaceChildren() }, t("Close"))),
      h("pre", { class: "diff" }, lines.map((l) => h("div", { class: "d" + (l.op === "+" ? "add" : l.op === "-" ? "del" : "same") },
        h("span", { class: "ln", text: l.a || "" }), h("span", { class: "ln", text: l.b || "" }), h("span", { class: "op", text: l.op }), l.text))));
  }

  async function restore(v) {
    if (!(await confirmDialog(t("Make v{v} current again? It is saved as a new version.", { v: v.version }), t("Restore")))) return;
    try {
      const r = await api(`/jobs/${id}/glue-versions/${v.version}:restore`, { method: "POST", body: {} });
      job = r.job || (await api(`/jobs/${id}`)).job;
      editor.value = job.glue_source || "";
      type.value = job.glue_type;
      editor.setLang(langOf(job.glue_type));
      showHead();
      toast(t("Restored v{v}.", { v: v.version }));
      await loadVersions();
    } catch (e) { toast(e.message, "error"); }
  }

  root.append(
    h("div", { class: "page-head" }, h("h1", {}, t("GLUE editor"), " · ", h("a", { href: `#/jobs/${id}` }, job.name)), head),
    h("div", { class: "glue-layout" },
      h("div", { class: "card" },
        h("div", { class: "glue-toolbar" }, field(t("Run mode"), type), field(t("Remark"), remark),
          ro ? null : h("button", { type: "button", class: "primary", id: "save-glue", onclick: save }, t("Save"))),
        err, editor.el, diffBox),
      h("div", { class: "card" }, versionsBox)));
  editor.textarea.addEventListener("keydown", (e) => { if ((e.ctrlKey || e.metaKey) && e.key === "s") { e.preventDefault(); if (!ro) save(); } });
  showHead();
  await loadVersions();
}
