// Workflows: the list, the editor (the graph drawn as SVG, checked by the server while it is
// edited), a workflow's instances, and an instance's view with each node's status, its run and
// the kill, retry and mark-done operations.
import { api, latest, query } from "../api.js";
import { h, short, fmtTime, fmtDuration, toast, modal, confirmDialog, field, select, badge, debounce } from "../dom.js";
import { t } from "../i18n.js";
import { loadGroups, allAllowed, defaultGroup, groupSelect, groupName } from "../groups.js";
import { SCHEDULE_TYPES, triggerLabel } from "../enums.js";
import { scheduleFields } from "../schedule.js";
import { graphView, layout, needsLayout, CONDITIONS, condOf } from "../graph.js";

const wfStatus = (s) => short(s, "WORKFLOW_INSTANCE_STATUS_") || "RUNNING";
const nodeStatus = (s) => short(s, "WORKFLOW_NODE_STATUS_") || "WAITING";
const ms = (v) => (Number(v) > 0 ? new Date(Number(v)).toISOString() : "");
const runHref = (id) => `#/runs/${encodeURIComponent(id)}`;
const instanceHref = (id) => `#/workflows/instances/${encodeURIComponent(id)}`;
// fill replaces el's children, leaving out the null ones (replaceChildren would write "null").
const fill = (el, ...kids) => el.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));

// parseParams reads "key=value" lines into an object.
function parseParams(text) {
  const out = {};
  text.split("\n").forEach((line, i) => {
    if (!line.trim()) return;
    const eq = line.indexOf("=");
    if (eq <= 0) throw new Error(t("Parameters, line {n}: want key=value", { n: i + 1 }));
    out[line.slice(0, eq).trim()] = line.slice(eq + 1);
  });
  return out;
}
const paramsText = (p) => Object.entries(p || {}).map(([k, v]) => `${k}=${v}`).join("\n");

async function groupJobs(groupID) {
  if (!groupID) return [];
  const { jobs = [] } = await api("/jobs" + query({ group_id: groupID, page_size: 1000 }));
  return jobs;
}

// trigger asks for the instance's params and starts an instance; it opens the instance's view.
async function trigger(w, ctx) {
  const params = h("textarea", { name: "params", rows: 3, placeholder: "day=2026-11-28" });
  let inst = null;
  await modal(t("Run workflow {name} once", { name: w.name }), h("div", { class: "form-grid" },
    field(t("Parameters (key=value a line, over the workflow's)"), params)), [
    { label: t("Cancel"), value: null },
    {
      label: t("Run"), primary: true, value: "ok", onclick: async () => {
        const r = await api(`/workflows/${w.id}:trigger`, { method: "POST", body: { params: parseParams(params.value), trigger_type: "TRIGGER_TYPE_MANUAL" } });
        inst = r.instance;
      },
    },
  ]);
  if (inst) {
    toast(t("Instance {id} started.", { id: inst.id }));
    ctx.navigate("workflows/instances/" + encodeURIComponent(inst.id));
  }
}

// renderList shows the workflows of a group.
export async function renderList(root, ctx) {
  const groups = await loadGroups();
  const group = groupSelect("group_id", groups, ctx.query.group_id ?? defaultGroup(ctx, groups), allAllowed(ctx, groups));
  const body = h("div", { class: "table-wrap", id: "workflows" });
  const newLink = h("a", { class: "button primary", href: "#/workflows/new", id: "new-workflow" }, "+ " + t("New workflow"));
  const syncNew = () => { newLink.href = "#/workflows/new" + (group.value ? "?group_id=" + group.value : ""); };
  root.append(
    h("div", { class: "page-head" }, h("h1", { text: t("Workflows") }), ctx.canWrite ? newLink : null),
    h("form", { class: "filters card", onsubmit: (e) => { e.preventDefault(); load(); }, onchange: () => { syncNew(); load(); } },
      field(t("Executor group"), group)),
    body);
  syncNew();
  let token = "";
  let rows = [];

  const list = latest();
  async function load(more) {
    let r;
    try {
      r = await list("/workflows" + query({ group_id: group.value, page_size: 50, page_token: more ? token : "" }));
    } catch (e) { fill(body, h("p", { class: "error", role: "alert", text: e.message })); return; }
    rows = more ? rows.concat(r.workflows || []) : r.workflows || [];
    token = r.next_page_token || "";
    fill(body, h("table", { class: "data", id: "workflows-table" },
      h("thead", {}, h("tr", {}, [[t("ID")], [t("Name")], [t("Group"), "narrow-hide"], [t("Schedule")], [t("Nodes")], [t("Status")],
        [t("Next fire")], [t("Version"), "narrow-hide"], [t("Actions"), "actions-col"]].map(([c, cls]) => h("th", { text: c, class: cls })))),
      h("tbody", {}, rows.length ? rows.map(row) : h("tr", {}, h("td", { colspan: 9, class: "empty", text: t("No workflows.") })))),
    token ? h("div", { class: "pager" }, h("button", { type: "button", class: "small", id: "more-workflows", onclick: () => load(true) }, t("More"))) : null);
  }

  function row(w) {
    const running = w.status === "JOB_STATUS_RUNNING";
    return h("tr", { "data-workflow": w.name },
      h("td", { text: w.id }), h("td", {}, h("a", { href: `#/workflows/${w.id}` }, w.name)),
      h("td", { class: "narrow-hide", text: groupName(groups, w.group_id) }),
      h("td", {}, h("span", { class: "muted", text: short(w.schedule?.type, "SCHEDULE_TYPE_") }), " ", h("code", { class: "nowrap", text: w.schedule?.expression || "" })),
      h("td", { text: (w.nodes || []).length }),
      h("td", {}, badge(running ? t("RUNNING") : t("STOPPED"), running ? "RUNNING" : "STOPPED")),
      h("td", { class: "time", text: running ? fmtTime(w.next_fire_time) : "—" }),
      h("td", { class: "narrow-hide", text: w.version }),
      h("td", { class: "actions-col" }, h("div", { class: "actions" },
        h("a", { class: "button small", href: `#/workflows/${w.id}` }, ctx.canWrite ? t("Edit") : t("View")),
        ctx.canWrite ? h("button", { type: "button", class: "small", onclick: () => trigger(w, ctx) }, t("Run once")) : null,
        h("a", { class: "button small", href: `#/workflows/${w.id}/instances` }, t("Instances")),
        ctx.canWrite ? h("button", {
          type: "button", class: "small danger", onclick: async () => {
            if (!(await confirmDialog(t("Delete workflow {name} (#{id})? Its instances stay.", { name: w.name, id: w.id }), t("Delete")))) return;
            try { await api(`/workflows/${w.id}`, { method: "DELETE" }); toast(t("Deleted.")); load(); } catch (e) { toast(e.message, "error"); }
          },
        }, t("Delete")) : null)));
  }
  await load();
}

// badFields sorts violations' fields into the node and edge indexes they name.
function badFields(fields) {
  const bad = { nodes: new Set(), edges: new Set() };
  for (const f of fields) {
    const m = /(?:^|\.)(nodes|edges)\[(\d+)\]/.exec(f);
    if (m) bad[m[1]].add(Number(m[2]));
  }
  return bad;
}

// renderForm is the workflow editor: its settings, schedule and graph; read-only for viewers.
export async function renderForm(root, ctx) {
  const id = ctx.params[0];
  const groups = await loadGroups();
  const ro = !ctx.canWrite;
  const dis = { disabled: ro };
  const wf = id ? (await api(`/workflows/${id}`)).workflow : {
    group_id: ctx.query.group_id || groups[0]?.id || "", name: "", owner: ctx.me.username, max_concurrent_instances: 1, params: {},
    schedule: { type: "SCHEDULE_TYPE_NONE", expression: "", time_zone: "" }, misfire_strategy: "MISFIRE_STRATEGY_DO_NOTHING",
    status: "JOB_STATUS_STOPPED", nodes: [], edges: [],
  };
  wf.nodes = wf.nodes || [];
  wf.edges = wf.edges || [];
  if (needsLayout(wf.nodes)) layout(wf.nodes, wf.edges);
  let jobs = await groupJobs(wf.group_id).catch(() => []);
  const jobName = (jid) => jobs.find((j) => String(j.id) === String(jid))?.name || "#" + jid;

  const sched = scheduleFields(wf.schedule, wf.misfire_strategy, wf.status === "JOB_STATUS_RUNNING", {
    ro, types: SCHEDULE_TYPES().filter(([v]) => v !== "SCHEDULE_TYPE_FIX_DELAY"),
    hint: t("CRON: Quartz with seconds, e.g. 0 0/5 * * * ?  ·  FIX_RATE: 30s, 5m  ·  ONCE: 2026-12-01T08:00:00+08:00"),
    never: t("Never fires on its own; trigger it by hand or by API."),
  });
  const inp = {
    group_id: groupSelect("group_id", groups, wf.group_id, false, dis),
    name: h("input", { name: "name", value: wf.name, maxlength: 255, ...dis }),
    owner: h("input", { name: "owner", value: wf.owner || "", maxlength: 64, ...dis }),
    alarm_emails: h("input", { name: "alarm_emails", value: (wf.alarm_emails || []).join(", "), placeholder: "ops@example.com, …", ...dis }),
    max: h("input", { name: "max_concurrent_instances", type: "number", min: 1, max: 1000, value: wf.max_concurrent_instances || 1, ...dis }),
    params: h("textarea", { name: "params", rows: 2, placeholder: "bucket=exports", ...dis }),
  };
  inp.params.value = paramsText(wf.params);

  // The graph, what is selected in it, and the violations the server found last.
  let selected = null;
  let bad = { nodes: new Set(), edges: new Set() };
  const violationsEl = h("ul", { class: "violations", id: "wf-violations", "aria-live": "polite" });
  const formErr = h("p", { class: "error", role: "alert", id: "wf-form-error" });
  const panel = h("div", { class: "card wf-panel", id: "wf-panel" });
  const view = graphView({
    editable: !ro, label: t("Workflow graph"),
    nodeInfo: (n) => ({ sub: jobName(n.job_id) + (n.enabled === false ? " · " + t("disabled") : ""), title: `${n.id}: ${jobName(n.job_id)}` }),
    onSelect: (sel) => { selected = sel; draw(); },
    onConnect: (from, to) => addEdge(from, to, "EDGE_CONDITION_ON_SUCCESS"),
    onMoved: () => {},
  });

  const body = () => {
    const w = {
      group_id: inp.group_id.value, name: inp.name.value.trim(), owner: inp.owner.value.trim(), schedule: sched.scheduleOf(),
      alarm_emails: inp.alarm_emails.value.split(/[\s,]+/).filter(Boolean),
      misfire_strategy: sched.inputs.misfire_strategy.value, status: sched.inputs.running.checked ? "JOB_STATUS_RUNNING" : "JOB_STATUS_STOPPED",
      max_concurrent_instances: Number(inp.max.value || 1), params: parseParams(inp.params.value),
      nodes: wf.nodes.map((n) => {
        const o = { id: n.id, job_id: String(n.job_id), retry_count: Number(n.retry_count || 0), timeout_seconds: Number(n.timeout_seconds || 0), x: n.x, y: n.y };
        if (n.params !== undefined && n.params !== null && n.params !== "") o.params = n.params;
        if (n.enabled === false) o.enabled = false;
        return o;
      }),
      edges: wf.edges.map((e) => ({ from: e.from, to: e.to, condition: condOf(e) })),
    };
    if (id) { w.id = id; w.version = wf.version; }
    return w;
  };

  function showViolations(list) {
    bad = badFields(list.map((v) => v.field));
    violationsEl.replaceChildren(...(list.length
      ? list.map((v) => h("li", {
        class: "violation", "data-field": v.field,
        onclick: () => {
          const m = /(nodes|edges)\[(\d+)\]/.exec(v.field);
          if (m) { selected = { kind: m[1] === "nodes" ? "node" : "edge", index: Number(m[2]) }; draw(); }
        },
      }, h("code", { text: v.field }), " ", v.description))
      : [h("li", { class: "ok", id: "wf-valid", text: t("The workflow is valid.") })]));
    // The graph marks what is at fault; the side panel is left as it is: redrawn, it lost what
    // the user was choosing there when the answer came (the node to connect to).
    view.render(wf.nodes, wf.edges, { selected, bad });
  }

  // validate asks the server while editing; only the answer to the latest question is shown.
  let seq = 0;
  const validate = debounce(async () => {
    if (ro) return;
    const n = ++seq;
    let w;
    try { w = body(); } catch (e) { if (n === seq) showViolations([{ field: "params", description: e.message }]); return; }
    try {
      const r = await api("/workflows:validate", { method: "POST", body: w });
      if (n === seq) showViolations(r.violations || []);
    } catch (e) {
      if (n === seq) violationsEl.replaceChildren(h("li", { class: "violation", text: e.message }));
    }
  }, 300);
  const changed = () => { draw(); validate(); };

  function uniqueID(base) {
    const clean = (base || "node").replace(/[^A-Za-z0-9_-]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 56) || "node";
    let v = clean;
    for (let i = 2; wf.nodes.some((n) => n.id === v); i++) v = `${clean}-${i}`;
    return v;
  }
  function addNode(jobID) {
    const job = jobs.find((j) => String(j.id) === String(jobID));
    if (!job) return;
    // A new node goes right of the selected one (three columns at most), or below the others.
    const ref = selected?.kind === "node" ? wf.nodes[selected.index] : null;
    const right = ref && Number(ref.x) < 400;
    const x = right ? Number(ref.x) + 230 : 30;
    let y = right ? Number(ref.y) : wf.nodes.reduce((m, n) => Math.max(m, Number(n.y) + 86), 30);
    while (wf.nodes.some((n) => Math.abs(n.x - x) < 170 && Math.abs(n.y - y) < 56)) y += 86;
    wf.nodes.push({ id: uniqueID(job.name), job_id: job.id, retry_count: 0, timeout_seconds: 0, x, y });
    selected = { kind: "node", index: wf.nodes.length - 1 };
    changed();
  }
  function addEdge(from, to, condition) {
    if (wf.edges.some((e) => e.from === from && e.to === to)) { toast(t("{from} → {to} is there already.", { from, to }), "warn"); return; }
    wf.edges.push({ from, to, condition });
    selected = { kind: "edge", index: wf.edges.length - 1 };
    changed();
  }
  function removeSelected() {
    if (!selected) return;
    if (selected.kind === "node") {
      const gone = wf.nodes[selected.index].id;
      wf.nodes.splice(selected.index, 1);
      wf.edges = wf.edges.filter((e) => e.from !== gone && e.to !== gone);
    } else wf.edges.splice(selected.index, 1);
    selected = null;
    changed();
  }

  // The side panel edits what is selected: a node's settings and edges out of it, or an edge.
  function drawPanel() {
    if (!selected || (selected.kind === "node" && !wf.nodes[selected.index]) || (selected.kind === "edge" && !wf.edges[selected.index])) {
      selected = null;
      fill(panel, h("h2", { text: t("Graph") }),
        h("p", { class: "muted small", text: ro ? t("Select a node or an edge to see it.")
          : t("Add nodes from the group's jobs; drag a node to move it; drag from the dot on its right to another node to connect them; select a node or an edge to edit it.") }));
      return;
    }
    if (selected.kind === "edge") {
      const e = wf.edges[selected.index];
      const cond = select("condition", CONDITIONS(), condOf(e), { id: "edge-condition", ...dis });
      cond.addEventListener("change", () => { e.condition = cond.value; changed(); });
      fill(panel, h("h2", { text: t("Edge") }), h("p", { class: "mono", id: "edge-name", text: `${e.from} → ${e.to}` }),
        field(t("Runs {to} when {from} ends…", { from: e.from, to: e.to }), cond),
        ro ? null : h("button", { type: "button", class: "danger", id: "delete-edge", onclick: removeSelected }, t("Delete edge")));
      return;
    }
    const n = wf.nodes[selected.index];
    const nid = h("input", { name: "node.id", value: n.id, maxlength: 64, ...dis });
    const job = h("select", { name: "node.job_id", ...dis }, jobs.map((j) => h("option", { value: j.id, selected: String(j.id) === String(n.job_id) }, `#${j.id} ${j.name}`)),
      jobs.some((j) => String(j.id) === String(n.job_id)) ? null : h("option", { value: n.job_id, selected: true }, "#" + n.job_id));
    const params = h("textarea", { name: "node.params", rows: 2, placeholder: t("(the job's)"), ...dis });
    params.value = n.params || "";
    const retries = h("input", { name: "node.retry_count", type: "number", min: 0, max: 100, value: n.retry_count || 0, ...dis });
    const timeout = h("input", { name: "node.timeout_seconds", type: "number", min: 0, max: 86400, value: n.timeout_seconds || 0, ...dis });
    const enabled = h("input", { type: "checkbox", name: "node.enabled", checked: n.enabled !== false, ...dis });
    const others = wf.nodes.filter((o) => o.id !== n.id);
    const to = select("edge.to", others.map((o) => [o.id, o.id]), "", { id: "connect-to", ...dis });
    const cond = select("edge.condition", CONDITIONS(), "EDGE_CONDITION_ON_SUCCESS", { id: "connect-condition", ...dis });
    nid.addEventListener("change", () => {
      const v = nid.value.trim();
      if (v === n.id) return;
      for (const e of wf.edges) { if (e.from === n.id) e.from = v; if (e.to === n.id) e.to = v; }
      n.id = v;
      changed();
    });
    job.addEventListener("change", () => { n.job_id = job.value; changed(); });
    params.addEventListener("change", () => { n.params = params.value; validate(); });
    retries.addEventListener("change", () => { n.retry_count = Number(retries.value || 0); validate(); });
    timeout.addEventListener("change", () => { n.timeout_seconds = Number(timeout.value || 0); validate(); });
    enabled.addEventListener("change", () => { n.enabled = enabled.checked ? undefined : false; changed(); });
    fill(panel, h("h2", { text: t("Node") }), h("div", { class: "form-grid", id: "node-form" },
      field(t("Node id"), nid), field(t("Job"), job), field(t("Parameter"), params, t("Empty: the job's parameter.")),
      field(t("Retries"), retries), field(t("Timeout (s, 0 = the job's)"), timeout),
      h("label", { class: "check" }, enabled, " ", t("Enabled (a disabled node is skipped as a success)"))),
    ro || !others.length ? null : h("div", { class: "connect" }, h("h3", { text: t("Connect to") }),
      h("div", { class: "form-grid" }, field(t("Node"), to), field(t("Condition"), cond),
        h("button", { type: "button", id: "add-edge", onclick: () => addEdge(n.id, to.value, cond.value) }, t("Add edge")))),
    ro ? null : h("button", { type: "button", class: "danger", id: "delete-node", onclick: removeSelected }, t("Delete node")));
  }

  function draw() {
    view.render(wf.nodes, wf.edges, { selected, bad });
    drawPanel();
  }

  const jobPick = h("select", { name: "add_job", id: "add-job", "aria-label": t("Job"), ...dis });
  // fillJobs lists the group's jobs to add, keeping the job chosen if it is still there: the list
  // comes again whenever the group is chosen, maybe while the user picks from it.
  const fillJobs = () => {
    const keep = jobPick.value;
    jobPick.replaceChildren(...(jobs.length ? jobs.map((j) => h("option", { value: j.id }, `#${j.id} ${j.name}`))
      : [h("option", { value: "" }, t("The group has no jobs."))]));
    if (jobs.some((j) => String(j.id) === keep)) jobPick.value = keep;
  };
  fillJobs();
  let jobsAsked = 0; // only the answer for the group chosen last fills the list
  inp.group_id.addEventListener("change", async () => {
    const n = ++jobsAsked;
    const got = await groupJobs(inp.group_id.value).catch(() => []);
    if (n !== jobsAsked) return;
    jobs = got;
    fillJobs();
    changed();
  });
  view.svg.addEventListener("keydown", (e) => { if (!ro && (e.key === "Delete" || e.key === "Backspace") && selected) { e.preventDefault(); removeSelected(); } });

  const form = h("form", {
    class: "wf-form", id: "wf-form", novalidate: true,
    oninput: (e) => { if (!e.target.name?.startsWith("node.") && !e.target.name?.startsWith("edge.") && e.target.name !== "add_job") validate(); },
    onchange: (e) => { if (e.target.name?.startsWith("schedule.") || e.target.name === "status" || e.target.name === "misfire_strategy") validate(); },
    onsubmit: async (e) => {
      e.preventDefault();
      if (ro) return;
      formErr.textContent = "";
      try {
        const w = body();
        const r = id ? await api(`/workflows/${id}`, { method: "PUT", body: w }) : await api("/workflows", { method: "POST", body: w });
        toast(id ? t("Saved as version {v}.", { v: r.workflow.version }) : t("Created workflow #{id}.", { id: r.workflow.id }));
        if (id) ctx.refresh(); else ctx.navigate("workflows/" + r.workflow.id);
      } catch (ex) {
        formErr.textContent = ex.message;
        if (ex.fields) showViolations(Object.entries(ex.fields).map(([field, description]) => ({ field, description })));
      }
    },
  },
  h("section", { class: "card" }, h("h2", { text: t("Basics") }), h("div", { class: "form-grid cols" },
    field(t("Executor group"), inp.group_id), field(t("Name"), inp.name), field(t("Owner"), inp.owner),
    field(t("Max concurrent instances"), inp.max), field(t("Parameters (key=value a line)"), inp.params, t("Every node receives them in its context.")),
    field(t("Alarm emails"), inp.alarm_emails, t("Comma-separated; they hear of instances that fail.")))),
  h("section", { class: "card" }, h("h2", { text: t("Schedule") }), sched.el),
  h("section", { class: "card" },
    h("div", { class: "wf-toolbar" }, h("h2", { text: t("Graph") }), h("span", { class: "spacer" }),
      ro ? null : [jobPick, h("button", { type: "button", id: "add-node", onclick: () => addNode(jobPick.value) }, "+ " + t("Add node"))],
      h("button", { type: "button", id: "auto-layout", onclick: () => { layout(wf.nodes, wf.edges); draw(); } }, t("Arrange"))),
    h("div", { class: "wf-editor" }, h("div", { class: "wf-canvas" }, view.svg), panel),
    ro ? null : h("div", { class: "wf-check" }, h("h3", { text: t("Validation") }), violationsEl)),
  formErr,
  h("div", { class: "form-buttons" },
    ro ? null : h("button", { class: "primary", type: "submit", id: "save-workflow" }, id ? t("Save") : t("Create")),
    h("a", { class: "button", href: "#/workflows" }, ro ? t("Back") : t("Cancel"))));

  root.append(h("div", { class: "page-head" },
    h("h1", { text: id ? (ro ? t("Workflow #{id}", { id }) : t("Edit workflow #{id}", { id })) : t("New workflow") }),
    id ? h("span", { class: "muted", text: t("version {v} · updated {time}", { v: wf.version, time: fmtTime(wf.update_time) }) }) : null,
    id && ctx.canWrite ? h("button", { type: "button", id: "trigger-workflow", onclick: () => trigger(wf, ctx) }, t("Run once")) : null,
    id ? h("a", { class: "button", href: `#/workflows/${id}/instances`, id: "workflow-instances" }, t("Instances")) : null), form);
  sched.start();
  draw();
  validate();
  if (!id) inp.name.focus();
}

// renderInstances lists a workflow's instances, newest first, refreshed every 5 s.
export async function renderInstances(root, ctx) {
  const id = ctx.params[0];
  const wf = (await api(`/workflows/${id}`)).workflow;
  const body = h("div", { class: "table-wrap", id: "instances" });
  root.append(h("div", { class: "page-head" }, h("h1", { text: t("Instances of {name}", { name: wf.name }) }),
    ctx.canWrite ? h("button", { type: "button", id: "trigger-workflow", onclick: () => trigger(wf, ctx) }, t("Run once")) : null,
    h("a", { class: "button", href: `#/workflows/${id}` }, ctx.canWrite ? t("Edit") : t("View"))), body);
  async function load() {
    let r;
    try { r = await api("/workflow-instances" + query({ workflow_id: id, page_size: 100 })); } catch (e) {
      fill(body, h("p", { class: "error", role: "alert", text: e.message }));
      return;
    }
    const list = r.instances || [];
    fill(body, h("table", { class: "data", id: "instances-table" },
      h("thead", {}, h("tr", {}, [t("Instance"), t("Status"), t("Trigger type"), t("Version"), t("Scheduled"), t("Ended"), t("Duration")].map((c) => h("th", { text: c })))),
      h("tbody", {}, list.length ? list.map((i) => h("tr", { "data-instance": i.id, "data-status": wfStatus(i.status) },
        h("td", {}, h("a", { class: "mono", href: instanceHref(i.id) }, i.id)),
        h("td", {}, badge(t(wfStatus(i.status)), wfStatus(i.status))),
        h("td", { text: triggerLabel(i.trigger_type) }),
        h("td", { text: i.version }),
        h("td", { class: "time", text: fmtTime(ms(i.scheduled_unix_ms)) }),
        h("td", { class: "time", text: fmtTime(ms(i.end_unix_ms)) }),
        h("td", { text: fmtDuration(ms(i.create_unix_ms), ms(i.end_unix_ms)) })))
        : h("tr", {}, h("td", { colspan: 7, class: "empty", text: t("No instances.") })))));
  }
  await load();
  const timer = setInterval(() => { if (!document.hidden && !document.querySelector("dialog[open]")) load(); }, 5000);
  ctx.onCleanup(() => clearInterval(timer));
}

// renderInstance shows one instance: its pinned graph coloured by each node's status, the nodes
// with their runs, and the operations; refreshed every 2 s while it runs.
export async function renderInstance(root, ctx) {
  const id = ctx.params[0];
  const head = h("div", { class: "page-head" });
  const info = h("div", { class: "card run-info", id: "instance-info" });
  const canvas = h("div", { class: "wf-canvas" });
  const nodesEl = h("div", { class: "table-wrap", id: "instance-nodes" });
  root.append(head, info, h("div", { class: "card" }, h("h2", { text: t("Graph") }), canvas), nodesEl);
  let jobs = null;
  let wfNow = null;
  let timer = null;
  ctx.onCleanup(() => clearTimeout(timer));

  async function op(label, question, path) {
    if (!(await confirmDialog(question, label))) return;
    try {
      await api(path, { method: "POST", body: {} });
      toast(t("Done."));
    } catch (e) { toast(e.message, "error"); }
    load();
  }

  async function load() {
    clearTimeout(timer);
    const inst = (await api(`/workflow-instances/${encodeURIComponent(id)}`)).instance;
    const w = inst.workflow || {};
    const nodes = w.nodes || [];
    const edges = w.edges || [];
    if (needsLayout(nodes)) layout(nodes, edges);
    // The pinned graph carries no group nor name: they are the workflow's (gone if it was deleted).
    wfNow ??= await api(`/workflows/${inst.workflow_id}`).then((r) => r.workflow).catch(() => ({}));
    jobs ??= await groupJobs(wfNow.group_id).catch(() => []);
    const jobName = (jid) => jobs.find((j) => String(j.id) === String(jid))?.name || "#" + jid;
    const state = new Map((inst.nodes || []).map((s) => [s.node_id, s]));
    const st = wfStatus(inst.status);
    const running = st === "RUNNING";

    fill(head, h("h1", {}, t("Workflow instance"), " ", h("span", { class: "mono small", text: inst.id })),
      h("span", { id: "instance-status", "data-status": st }, badge(t(st), st)),
      ctx.canWrite && running ? h("button", {
        type: "button", class: "danger", id: "kill-instance",
        onclick: () => op(t("Kill"), t("Kill instance {id}? Its running nodes are killed.", { id: inst.id }), `/workflow-instances/${encodeURIComponent(inst.id)}:kill`),
      }, t("Kill")) : null,
      ctx.canWrite && (st === "FAILED" || st === "KILLED") ? h("button", {
        type: "button", id: "retry-instance",
        onclick: () => op(t("Retry"), t("Retry instance {id} from its failed nodes? Successful nodes are kept.", { id: inst.id }), `/workflow-instances/${encodeURIComponent(inst.id)}:retry`),
      }, t("Retry")) : null,
      h("a", { class: "button", href: `#/workflows/${inst.workflow_id}/instances` }, t("Instances")),
      h("a", { class: "button", href: `#/workflows/${inst.workflow_id}` }, t("Workflow")));

    const kv = (label, v) => [h("dt", { text: t(label) }), h("dd", { "data-key": label.toLowerCase().replace(/\W+/g, "-") }, v ?? "—")];
    info.replaceChildren(h("dl", { class: "kv" },
      kv("Workflow", h("a", { href: `#/workflows/${inst.workflow_id}` }, `#${inst.workflow_id} ${wfNow.name || ""}`)),
      kv("Version", String(inst.version)),
      kv("Trigger type", triggerLabel(inst.trigger_type)),
      kv("Scheduled", fmtTime(ms(inst.scheduled_unix_ms))),
      kv("Started", fmtTime(ms(inst.create_unix_ms))),
      kv("Ended", fmtTime(ms(inst.end_unix_ms))),
      kv("Duration", fmtDuration(ms(inst.create_unix_ms), ms(inst.end_unix_ms))),
      kv("Parameters", h("span", { class: "mono", text: paramsText(inst.params).replaceAll("\n", ", ") || "—" }))));

    const timing = (s) => (Number(s?.start_unix_ms) > 0 ? fmtDuration(ms(s.start_unix_ms), ms(s.end_unix_ms)) : "");
    const view = graphView({
      label: t("Workflow graph"),
      nodeInfo: (n) => {
        const s = state.get(n.id);
        const ns = nodeStatus(s?.status);
        return {
          sub: jobName(n.job_id), status: ns, label: t(ns) + (timing(s) ? " · " + timing(s) : ""),
          href: s?.trigger_id ? runHref(s.trigger_id) : null,
          title: `${n.id}: ${t(ns)}${s?.message ? " (" + s.message + ")" : ""}`,
        };
      },
    });
    view.render(nodes, edges);
    canvas.replaceChildren(view.svg);

    nodesEl.replaceChildren(h("table", { class: "data", id: "nodes-table" },
      h("thead", {}, h("tr", {}, [t("Node"), t("Job"), t("Status"), t("Attempt"), t("Started"), t("Ended"), t("Duration"), t("Run"), t("Outputs"), t("Actions")].map((c) => h("th", { text: c })))),
      h("tbody", {}, nodes.map((n) => {
        const s = state.get(n.id) || {};
        const ns = nodeStatus(s.status);
        return h("tr", { "data-node": n.id, "data-status": ns },
          h("td", {}, h("strong", { text: n.id }), s.message ? h("div", { class: "muted small", text: s.message }) : null),
          h("td", {}, h("a", { href: `#/jobs/${n.job_id}` }, jobName(n.job_id))),
          h("td", {}, badge(t(ns), ns)),
          h("td", { text: String(s.attempt || 0) }),
          h("td", { class: "time", text: fmtTime(ms(s.start_unix_ms)) }),
          h("td", { class: "time", text: fmtTime(ms(s.end_unix_ms)) }),
          h("td", { text: timing(s) || "—" }),
          h("td", {}, s.trigger_id ? h("div", { class: "actions" },
            h("a", { class: "mono run-link", href: runHref(s.trigger_id), title: s.trigger_id }, s.trigger_id.length > 18 ? s.trigger_id.slice(0, 18) + "…" : s.trigger_id),
            h("a", { class: "button small log-link", href: runHref(s.trigger_id) }, t("Log"))) : "—"),
          h("td", { class: "mono small", text: paramsText(s.outputs).replaceAll("\n", ", ") || "—" }),
          h("td", {}, ctx.canWrite && ns !== "SUCCESS" ? h("button", {
            type: "button", class: "small mark-done",
            onclick: () => op(t("Mark done"), t("Mark node {node} done by hand? Its downstream nodes go on as after a success.", { node: n.id }),
              `/workflow-instances/${encodeURIComponent(inst.id)}/nodes/${encodeURIComponent(n.id)}:mark-done`),
          }, t("Mark done")) : null));
      }))));
    if (running) timer = setTimeout(() => load().catch(() => {}), 2000);
  }
  await load();
}
