// jobmesh web UI: plain JavaScript over the REST API, no build step and no external assets.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const short = (s, prefix) => (s || "").replace(prefix, "");
const time = (ts) => (ts ? new Date(ts).toLocaleString() : "");

async function api(path, opts = {}) {
  const res = await fetch("/api/v1" + path, {
    headers: { "Content-Type": "application/json" },
    ...opts,
    body: opts.body ? JSON.stringify(opts.body) : undefined,
  });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body.message || res.statusText);
  return body;
}

function rows(tbody, items, cells) {
  tbody.replaceChildren(...items.map((it) => {
    const tr = document.createElement("tr");
    for (const c of cells(it)) {
      const td = document.createElement("td");
      if (c instanceof Node) td.append(c); else td.textContent = c ?? "";
      tr.append(td);
    }
    return tr;
  }));
}

function button(label, onclick) {
  const b = document.createElement("button");
  b.textContent = label;
  b.onclick = onclick;
  return b;
}

async function loadJobs() {
  const { jobs = [] } = await api("/jobs?page_size=200");
  rows($("#jobs tbody"), jobs, (j) => [
    j.id, j.name,
    `${short(j.schedule?.type, "SCHEDULE_TYPE_")} ${j.schedule?.expression || ""}`,
    short(j.glue_type, "GLUE_TYPE_") === "BEAN" ? j.handler : short(j.glue_type, "GLUE_TYPE_"),
    short(j.status, "JOB_STATUS_"), time(j.next_fire_time),
    (() => {
      const span = document.createElement("span");
      const running = j.status === "JOB_STATUS_RUNNING";
      span.append(
        button(running ? "Stop" : "Start", async () => { await api(`/jobs/${j.id}:${running ? "stop" : "start"}`, { method: "POST", body: {} }); loadJobs(); }),
        button("Run once", async () => { await api(`/jobs/${j.id}:trigger`, { method: "POST", body: {} }); }),
        button("Runs", () => { location.hash = "runs"; $("#run-filter [name=job_id]").value = j.id; loadRuns(); }),
      );
      return span;
    })(),
  ]);
}

async function loadRuns() {
  const jobID = $("#run-filter [name=job_id]").value;
  const { runs = [] } = await api("/logs?page_size=100" + (jobID ? `&job_id=${jobID}` : ""));
  rows($("#runs tbody"), runs, (r) => {
    const st = document.createElement("span");
    st.textContent = short(r.status, "RUN_STATUS_");
    st.className = st.textContent;
    return [r.id, r.job_id, short(r.trigger_type, "TRIGGER_TYPE_"), time(r.scheduled_time), r.executor_address,
      short(r.trigger_outcome, "TRIGGER_OUTCOME_"), st, button("Output", () => showLines(r.id))];
  });
}

async function showLines(id) {
  const { lines = [] } = await api(`/logs/${encodeURIComponent(id)}/lines`);
  $("#lines").textContent = lines.map((l) => l.text).join("\n") || "(no output)";
}

async function loadExecutors() {
  const [{ groups = [] }, { executors = [] }] = await Promise.all([api("/executor-groups"), api("/executors")]);
  rows($("#groups tbody"), groups, (g) => [g.id, g.app_name, g.title, short(g.address_type, "ADDRESS_TYPE_"), (g.addresses || []).join(", ")]);
  rows($("#execs tbody"), executors, (e) => [e.app_name, e.instance_id, e.address, e.version, time(e.last_seen_time)]);
}

function jobFromForm(f) {
  const type = f.glue_type.value;
  return {
    name: f.name.value, group_id: f.group_id.value,
    schedule: { type: "SCHEDULE_TYPE_" + f.type.value, expression: f.expression.value, time_zone: f.time_zone.value },
    glue_type: "GLUE_TYPE_" + type, handler: f.handler.value, params: f.params.value,
    glue_source: type === "BEAN" ? "" : f.glue_source.value,
    status: f.running.checked ? "JOB_STATUS_RUNNING" : "JOB_STATUS_STOPPED",
  };
}

async function preview() {
  const f = $("#new-job");
  try {
    const { fire_times = [] } = await api("/schedules:preview", { method: "POST", body: { schedule: jobFromForm(f).schedule, count: 5 } });
    $("#preview").textContent = fire_times.map(time).join(" · ");
  } catch (e) {
    $("#preview").textContent = e.message;
  }
}

$("#new-job").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  $("#new-job-error").textContent = "";
  try {
    await api("/jobs", { method: "POST", body: jobFromForm(ev.target) });
    loadJobs();
  } catch (e) {
    $("#new-job-error").textContent = e.message;
  }
});
$("#new-job").addEventListener("input", preview);
$("#run-filter").addEventListener("submit", (ev) => { ev.preventDefault(); loadRuns(); });

const views = { jobs: loadJobs, runs: loadRuns, executors: loadExecutors };
async function route() {
  const view = views[location.hash.slice(1)] ? location.hash.slice(1) : "jobs";
  for (const s of document.querySelectorAll("main > section")) s.hidden = s.id !== view;
  try {
    await views[view]();
    const st = await api("/scheduler/status");
    $("#status").textContent = `leader ${st.leader_id || "?"} · epoch ${st.epoch} · ring ${st.ring_size}`;
  } catch (e) {
    $("#status").textContent = e.message;
  }
}
window.addEventListener("hashchange", route);
route();
preview();
