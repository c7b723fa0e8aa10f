// Jobs: the list with filters and pages, the create/edit form with a live preview of the next fire
// times, and the row actions (run once, start/stop, copy, delete).
import { api, latest, query } from "../api.js";
import { h, short, fmtTime, toast, modal, confirmDialog, field, select, badge, pager } from "../dom.js";
import { t } from "../i18n.js";
import { loadGroups, allAllowed, defaultGroup, groupSelect, groupName } from "../groups.js";
import { glueOptions, groovyFor, ROUTES, BLOCKS, BACKOFFS, JOB_STATUSES, isScript } from "../enums.js";
import { codeEditor, langOf, TEMPLATES } from "../highlight.js";
import { zone } from "../tz.js";
import { scheduleFields } from "../schedule.js";
import { fieldKey } from "../errors.js";

// renderList shows the job table.
export async function renderList(root, ctx) {
  const groups = await loadGroups();
  const q = ctx.query;
  const f = {
    group: groupSelect("group_id", groups, q.group_id ?? defaultGroup(ctx, groups), allAllowed(ctx, groups)),
    status: select("status", JOB_STATUSES(), q.status || ""),
    name: h("input", { name: "name", value: q.name || "", placeholder: t("contains…") }),
    handler: h("input", { name: "handler", value: q.handler || "", placeholder: t("contains…") }),
    author: h("input", { name: "author", value: q.author || "", placeholder: t("contains…") }),
    size: select("page_size", [["10", "10"], ["20", "20"], ["50", "50"], ["100", "100"]], q.page_size || "20"),
  };
  const state = { page: 1 };
  const body = h("div", { class: "table-wrap", id: "jobs" });
  root.append(
    h("div", { class: "page-head" }, h("h1", { text: t("Jobs") }),
      ctx.canWrite ? h("a", { class: "button primary", href: "#/jobs/new" + (f.group.value ? "?group_id=" + f.group.value : ""), id: "new-job" }, "+ " + t("New job")) : null),
    h("form", {
      class: "filters card", onsubmit: (e) => { e.preventDefault(); state.page = 1; load(); },
      onchange: () => { state.page = 1; load(); },
    },
    field(t("Executor group"), f.group), field(t("Status"), f.status), field(t("Name"), f.name),
    field(t("Handler"), f.handler), field(t("Author"), f.author), field(t("Page size"), f.size),
    h("button", { class: "primary", type: "submit" }, t("Search"))),
    body);

  const list = latest();
  async function load() {
    const size = Number(f.size.value);
    const r = await list("/jobs" + query({
      group_id: f.group.value, status: f.status.value, name: f.name.value, handler: f.handler.value, author: f.author.value,
      page_size: size, skip: (state.page - 1) * size,
    })).catch((e) => { body.replaceChildren(h("p", { class: "error", role: "alert", text: e.message })); return null; });
    if (!r) return;
    const jobs = r.jobs || [];
    const total = Number(r.total_size || 0);
    // A page emptied by deletes moves to the last page there is.
    const lastPage = Math.max(1, Math.ceil(total / size));
    if (!jobs.length && state.page > lastPage) { state.page = lastPage; return load(); }
    const table = h("table", { class: "data", id: "jobs-table" },
      // Group, run mode and author give way first on a narrow screen (app.css); actions stay.
      h("thead", {}, h("tr", {}, [[t("ID")], [t("Name")], [t("Group"), "narrow-hide"], [t("Schedule")], [t("Run mode"), "narrow-hide"],
        [t("Author"), "narrow-hide"], [t("Status")], [t("Next fire")], [t("Actions"), "actions-col"]].map(([c, cls]) => h("th", { text: c, class: cls })))),
      h("tbody", {}, jobs.length ? jobs.map((j) => row(j)) : h("tr", {}, h("td", { colspan: 9, class: "empty", text: t("No jobs.") }))));
    body.replaceChildren(table, pager({ page: state.page, size, total, more: !!r.next_page_token, summary: t("{n} jobs", { n: total }) },
      (n) => { state.page = n; load(); }));
  }

  function row(j) {
    const running = j.status === "JOB_STATUS_RUNNING";
    const glue = short(j.glue_type, "GLUE_TYPE_");
    const actions = h("div", { class: "actions" },
      h("a", { class: "button small", href: `#/jobs/${j.id}` }, ctx.canWrite ? t("Edit") : t("View")),
      isScript(j.glue_type) ? h("a", { class: "button small", href: `#/jobs/${j.id}/glue` }, "GLUE") : null,
      ctx.canWrite ? h("button", { type: "button", class: "small", onclick: () => runOnce(j, groups) }, t("Run once")) : null,
      ctx.canWrite ? h("button", {
        type: "button", class: "small", onclick: async () => {
          try { await api(`/jobs/${j.id}:${running ? "stop" : "start"}`, { method: "POST", body: {} }); toast(running ? t("Stopped.") : t("Started.")); load(); } catch (e) { toast(e.message, "error"); }
        },
      }, running ? t("Stop") : t("Start")) : null,
      h("a", { class: "button small", href: `#/runs?job_id=${j.id}&group_id=${j.group_id}` }, t("Runs")),
      ctx.canWrite ? more(
        h("button", { type: "button", class: "small", onclick: () => copyJob(j, load) }, t("Copy")),
        h("button", {
        type: "button", class: "small danger", onclick: async () => {
          if (!(await confirmDialog(t("Delete job {name} (#{id})? Its runs stay in the log.", { name: j.name, id: j.id }), t("Delete")))) return;
          try { await api(`/jobs/${j.id}`, { method: "DELETE" }); toast(t("Deleted.")); load(); } catch (e) { toast(e.message, "error"); }
        },
      }, t("Delete"))) : null);
    return h("tr", { "data-job": j.name },
      h("td", { text: j.id }), h("td", {}, h("a", { href: `#/jobs/${j.id}` }, j.name)),
      h("td", { class: "narrow-hide", text: groupName(groups, j.group_id) }),
      h("td", {}, h("span", { class: "muted", text: short(j.schedule?.type, "SCHEDULE_TYPE_") }), " ", h("code", { class: "nowrap", text: j.schedule?.expression || "" })),
      h("td", { class: "narrow-hide", text: glue === "BEAN" ? `BEAN: ${j.handler}` : `GLUE(${glue.replace("GLUE_", "")})` }),
      h("td", { class: "narrow-hide", text: j.author || "" }),
      h("td", {}, badge(running ? t("RUNNING") : t("STOPPED"), running ? "RUNNING" : "STOPPED")),
      h("td", { class: "time", text: running ? fmtTime(j.next_fire_time) : "—" }),
      h("td", { class: "actions-col" }, actions));
  }
  await load();
}

// more folds rarely used actions into a small menu that closes when one is picked.
function more(...items) {
  const d = h("details", { class: "more" }, h("summary", { class: "button small", title: t("More"), "aria-label": t("More") }, "⋯"),
    h("div", { class: "menu", onclick: () => { d.open = false; } }, items));
  return d;
}

// runOnce asks for a parameter and an address override and fires the job. The override may only
// name the job's group's executors (online, or its manual addresses): the scheduler refuses others.
async function runOnce(j, groups) {
  const g = groups.find((x) => String(x.id) === String(j.group_id));
  const params = h("textarea", { name: "params", rows: 3 });
  params.value = j.params || "";
  const own = [...new Set([...(g?.addresses || []), ...(g?.manual_addresses || [])])];
  const addrs = own.map((a) => h("label", { class: "check" }, h("input", { type: "checkbox", name: "address", value: a }), " ", a));
  const v = await modal(t("Run {name} once", { name: j.name }), h("div", { class: "form-grid" },
    field(t("Parameter (for this run only)"), params),
    field(t("Executors (none ticked: route as usual)"), addrs.length ? h("div", { class: "checks" }, addrs) : h("span", { class: "muted", text: t("No executor online.") }))), [
    { label: t("Cancel"), value: null },
    {
      label: t("Run"), primary: true, value: "ok", onclick: async () => {
        const addresses = addrs.map((l) => l.querySelector("input")).filter((i) => i.checked).map((i) => i.value);
        const r = await api(`/jobs/${j.id}:trigger`, { method: "POST", body: { params: params.value, addresses } });
        runOnce.last = r.trigger_ids || [];
      },
    },
  ]);
  if (v === "ok") {
    const ids = runOnce.last || [];
    toast(t("Triggered: {ids}", { ids: ids.join(", ") }));
  }
}

async function copyJob(j, reload) {
  const name = h("input", { name: "name", value: `${j.name} (copy)` });
  const v = await modal(t("Copy job {name}", { name: j.name }), h("div", { class: "form-grid" }, field(t("Name of the copy"), name),
    h("p", { class: "muted", text: t("The copy is stopped until you start it.") })), [
    { label: t("Cancel"), value: null },
    { label: t("Copy"), primary: true, value: "ok", onclick: () => api(`/jobs/${j.id}:copy`, { method: "POST", body: { name: name.value } }) },
  ]);
  if (v === "ok") { toast(t("Copied.")); reload(); }
}

// renderForm is the create/edit page of one job; read-only for viewers.
export async function renderForm(root, ctx) {
  const id = ctx.params[0];
  const groups = await loadGroups();
  // A new job is scheduled in the zone the console shows times in (tz.js), so its preview and
  // its cron read alike.
  const viewZone = zone();
  const job = id ? (await api(`/jobs/${id}`)).job : {
    group_id: ctx.query.group_id || groups[0]?.id || "", name: "", author: ctx.me.username, alarm_emails: [],
    schedule: { type: "SCHEDULE_TYPE_CRON", expression: "0/30 * * * * ?", time_zone: viewZone === "UTC" ? "" : viewZone },
    glue_type: "GLUE_TYPE_GLUE_SHELL", glue_source: TEMPLATES.GLUE_TYPE_GLUE_SHELL, glue_remark: "", handler: "", params: "",
    route_strategy: "ROUTE_STRATEGY_FIRST", misfire_strategy: "MISFIRE_STRATEGY_DO_NOTHING", block_strategy: "BLOCK_STRATEGY_SERIAL_EXECUTION",
    timeout_seconds: 0, retry_count: 0, retry_backoff: "RETRY_BACKOFF_NONE", retry_interval_ms: 0, child_job_ids: [], status: "JOB_STATUS_STOPPED",
  };
  const ro = !ctx.canWrite;
  const dis = { disabled: ro };
  const en = (v, def) => (v && !v.endsWith("_UNSPECIFIED") ? v : def);
  const groupOf = (gid) => groups.find((g) => String(g.id) === String(gid));
  const sched = scheduleFields(job.schedule, job.misfire_strategy, job.status === "JOB_STATUS_RUNNING", {
    ro, hint: t("CRON: Quartz with seconds, e.g. 0 0/5 * * * ?  ·  FIX_RATE/FIX_DELAY: 30s, 5m  ·  ONCE: 2026-12-01T08:00:00+08:00"),
    never: t("Never fires on its own; run it by hand, by API or as a child job."),
  });
  const inp = {
    ...sched.inputs,
    group_id: groupSelect("group_id", groups, job.group_id, false, dis),
    name: h("input", { name: "name", value: job.name, required: true, maxlength: 255, ...dis }),
    author: h("input", { name: "author", value: job.author || "", maxlength: 64, ...dis }),
    alarm_emails: h("input", { name: "alarm_emails", value: (job.alarm_emails || []).join(", "), placeholder: "ops@example.com, …", ...dis }),
    glue_type: select("glue_type", glueOptions(job.glue_type, groovyFor(groupOf(job.group_id))), en(job.glue_type, "GLUE_TYPE_BEAN"), dis),
    handler: h("input", { name: "handler", value: job.handler || "", placeholder: "command, http, …", ...dis }),
    params: h("textarea", { name: "params", rows: 2, ...dis }),
    child_job_ids: h("input", { name: "child_job_ids", value: (job.child_job_ids || []).join(", "), placeholder: "12, 13", ...dis }),
    route_strategy: select("route_strategy", ROUTES(), en(job.route_strategy, "ROUTE_STRATEGY_FIRST"), dis),
    block_strategy: select("block_strategy", BLOCKS(), en(job.block_strategy, "BLOCK_STRATEGY_SERIAL_EXECUTION"), dis),
    timeout_seconds: h("input", { name: "timeout_seconds", type: "number", min: 0, max: 86400, value: job.timeout_seconds || 0, ...dis }),
    retry_count: h("input", { name: "retry_count", type: "number", min: 0, max: 100, value: job.retry_count || 0, ...dis }),
    retry_backoff: select("retry_backoff", BACKOFFS(), en(job.retry_backoff, "RETRY_BACKOFF_NONE"), dis),
    retry_interval_ms: h("input", { name: "retry_interval_ms", type: "number", min: 0, max: 3600000, value: job.retry_interval_ms || 0, ...dis }),
    glue_remark: h("input", { name: "glue_remark", value: job.glue_remark || "", maxlength: 128, ...dis }),
  };
  inp.params.value = job.params || "";
  const editor = !id ? codeEditor({ value: job.glue_source || "", lang: langOf(job.glue_type), readOnly: ro, label: t("Source") }) : null;
  const formErr = h("p", { class: "error", role: "alert", id: "job-form-error" });

  const glueRows = h("div", { class: "glue-rows" });
  const syncGlue = () => {
    const script = isScript(inp.glue_type.value);
    inp.handler.closest(".field").hidden = script;
    glueRows.hidden = !script;
    if (editor) {
      editor.setLang(langOf(inp.glue_type.value));
      const isTemplate = !editor.value.trim() || Object.values(TEMPLATES).includes(editor.value);
      if (script && isTemplate) editor.value = TEMPLATES[inp.glue_type.value] || "";
    }
  };
  const ids = (s) => s.split(/[\s,]+/).filter(Boolean);

  const form = h("form", {
    class: "job-form", id: "job-form", novalidate: true,
    onchange: (e) => {
      if (e.target === inp.group_id) {
        // GLUE_GROOVY is offered only for a group with XXL-JOB executors.
        const keep = inp.glue_type.value;
        inp.glue_type.replaceChildren(...glueOptions(job.glue_type, groovyFor(groupOf(inp.group_id.value)))
          .map(([v, l]) => h("option", { value: v, selected: v === keep }, l)));
        syncGlue();
      }
      if (e.target === inp.glue_type) syncGlue();
    },
    onsubmit: async (e) => {
      e.preventDefault();
      if (ro) return;
      formErr.textContent = "";
      for (const el of form.querySelectorAll(".invalid")) el.classList.remove("invalid");
      for (const el of form.querySelectorAll(".field-error")) el.remove();
      const body = {
        group_id: inp.group_id.value, name: inp.name.value.trim(), author: inp.author.value.trim(),
        alarm_emails: ids(inp.alarm_emails.value), schedule: sched.scheduleOf(),
        glue_type: inp.glue_type.value, handler: isScript(inp.glue_type.value) ? "" : inp.handler.value.trim(), params: inp.params.value,
        child_job_ids: ids(inp.child_job_ids.value), route_strategy: inp.route_strategy.value, misfire_strategy: inp.misfire_strategy.value,
        block_strategy: inp.block_strategy.value, timeout_seconds: Number(inp.timeout_seconds.value || 0),
        retry_count: Number(inp.retry_count.value || 0), retry_backoff: inp.retry_backoff.value, retry_interval_ms: inp.retry_interval_ms.value || "0",
        status: inp.running.checked ? "JOB_STATUS_RUNNING" : "JOB_STATUS_STOPPED",
      };
      try {
        if (id) {
          const r = await api(`/jobs/${id}`, { method: "PATCH", body: { ...body, version: job.version } });
          toast(t("Saved."));
          for (const w of r.warnings || []) toast(w, "warn");
        } else {
          if (isScript(body.glue_type)) { body.glue_source = editor.value; body.glue_remark = inp.glue_remark.value || t("first version"); }
          const r = await api("/jobs", { method: "POST", body });
          toast(t("Created job #{id}.", { id: r.job.id }));
          for (const w of r.warnings || []) toast(w, "warn");
        }
        ctx.navigate("jobs", { group_id: body.group_id });
      } catch (ex) {
        formErr.textContent = ex.message;
        // Each field the server names is marked, with why under it in the user's language.
        for (const [name, why] of Object.entries(ex.fields || {})) {
          const key = fieldKey(name);
          const el = form.querySelector(`[name="${CSS.escape(key)}"]`) || form.querySelector(`[name="${CSS.escape(key.split(".")[0])}"]`);
          if (!el) continue;
          el.classList.add("invalid");
          el.closest(".field")?.append(h("small", { class: "field-error", "data-field": key, text: why }));
        }
      }
    },
  },
  h("section", { class: "card" }, h("h2", { text: t("Basics") }), h("div", { class: "form-grid cols" },
    field(t("Executor group"), inp.group_id), field(t("Name"), inp.name), field(t("Author"), inp.author),
    field(t("Alarm emails"), inp.alarm_emails, t("Comma-separated; they hear of failures.")))),
  h("section", { class: "card" }, h("h2", { text: t("Schedule") }), sched.el),
  h("section", { class: "card" }, h("h2", { text: t("Task") }), h("div", { class: "form-grid cols" },
    field(t("Run mode"), inp.glue_type), field(t("Handler"), inp.handler), field(t("Parameter"), inp.params),
    field(t("Child jobs"), inp.child_job_ids, t("Job ids run after a success.")))
  , glueRows),
  h("section", { class: "card" }, h("h2", { text: t("Advanced") }), h("div", { class: "form-grid cols" },
    field(t("Routing"), inp.route_strategy), field(t("Block strategy"), inp.block_strategy),
    field(t("Timeout (s, 0 = none)"), inp.timeout_seconds), field(t("Retries"), inp.retry_count),
    field(t("Retry backoff"), inp.retry_backoff), field(t("Retry interval (ms)"), inp.retry_interval_ms))),
  formErr,
  h("div", { class: "form-buttons" },
    ro ? null : h("button", { class: "primary", type: "submit", id: "save-job" }, id ? t("Save") : t("Create")),
    h("a", { class: "button", href: "#/jobs" }, ro ? t("Back") : t("Cancel")),
    id && isScript(job.glue_type) ? h("a", { class: "button", href: `#/jobs/${id}/glue` }, t("Open GLUE editor")) : null,
    id ? h("a", { class: "button", href: `#/runs?job_id=${id}&group_id=${job.group_id}` }, t("Runs")) : null));
  if (editor) glueRows.append(field(t("Source"), editor.el), field(t("Remark of this version"), inp.glue_remark));
  else if (id && isScript(job.glue_type)) glueRows.append(h("p", { class: "muted", text: t("The source is edited in the GLUE editor, with its versions.") }));

  root.append(h("div", { class: "page-head" }, h("h1", { text: id ? (ro ? t("Job #{id}", { id }) : t("Edit job #{id}", { id })) : t("New job") }),
    id ? h("span", { class: "muted", text: t("version {v} · updated {time}", { v: job.version, time: fmtTime(job.update_time) }) }) : null), form);
  syncGlue();
  sched.start();
  if (!id) inp.name.focus();
}
