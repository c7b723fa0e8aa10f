// Runs: the log list with filters, a run's detail with its live output (the NDJSON tail stream),
// kill, and clearing old runs.
import { api, latest, query, stream, uiConfig, traceURL } from "../api.js";
import { h, short, fmtTime, fmtDuration, toast, modal, confirmDialog, field, select, badge, pager } from "../dom.js";
import { t } from "../i18n.js";
import { loadGroups, allAllowed, defaultGroup, groupSelect, groupName } from "../groups.js";
import { RUN_STATUSES, TRIGGER_TYPES, triggerLabel } from "../enums.js";
import { fromInput, toInput } from "../tz.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const status = (r) => short(r.status, "RUN_STATUS_") || "PENDING";

// outcomeBadge says whether the fire reached an executor: OK, FAILED, UNKNOWN (sent, never
// answered: the run stays running until it is decided), SKIPPED (not sent: a misfire its job's
// strategy skipped), or nothing before the trigger record.
function outcomeBadge(o) {
  switch (o) {
    case "TRIGGER_OUTCOME_OK": return badge(t("OK"), "SUCCESS");
    case "TRIGGER_OUTCOME_FAILED": return badge(t("FAILED"), "FAIL");
    case "TRIGGER_OUTCOME_UNKNOWN":
      return h("span", { title: t("Sent; no answer came. The executor's report decides, or the lost-run sweep when none comes.") }, badge(t("UNKNOWN"), "PENDING"));
    case "TRIGGER_OUTCOME_SKIPPED":
      return h("span", { title: t("Not sent: a misfire its job's misfire strategy skipped (the trigger message says how late).") }, badge(t("SKIPPED"), "SKIPPED"));
    default: return h("span", { class: "muted", text: "…" });
  }
}

async function jobNames(groupID) {
  try {
    const { jobs = [] } = await api("/jobs" + query({ group_id: groupID, page_size: 1000 }));
    return jobs;
  } catch { return []; }
}

// renderList shows runs, newest first.
export async function renderList(root, ctx) {
  const groups = await loadGroups();
  const q = ctx.query;
  const f = {
    group: groupSelect("group_id", groups, q.group_id ?? defaultGroup(ctx, groups), allAllowed(ctx, groups)),
    job: h("select", { name: "job_id" }),
    status: select("status", RUN_STATUSES(), q.status || ""),
    trigger: select("trigger_type", TRIGGER_TYPES(), q.trigger_type || ""),
    from: h("input", { type: "datetime-local", name: "start_time", value: q.from || "" }),
    to: h("input", { type: "datetime-local", name: "end_time", value: q.to || "" }),
    addr: h("input", { name: "executor_address", value: q.executor_address || "", placeholder: "host:port" }),
    auto: h("input", { type: "checkbox", name: "auto", checked: q.auto !== "0", id: "auto-refresh" }),
  };
  let jobs = [];
  const fillJobs = async (keep) => {
    jobs = await jobNames(f.group.value);
    f.job.replaceChildren(h("option", { value: "" }, t("All jobs")), ...jobs.map((j) => h("option", { value: j.id, selected: String(j.id) === String(keep) }, `#${j.id} ${j.name}`)));
    if (keep && !jobs.some((j) => String(j.id) === String(keep))) f.job.append(h("option", { value: keep, selected: true }, "#" + keep));
  };
  await fillJobs(q.job_id || "");
  const state = { page: 1 };
  const size = 20;
  const body = h("div", { class: "table-wrap", id: "runs" });
  const reset = () => { state.page = 1; load(); };
  root.append(
    h("div", { class: "page-head" }, h("h1", { text: t("Runs") }),
      h("label", { class: "check" }, f.auto, " ", t("Refresh every 5 s")),
      ctx.canWrite ? h("button", { type: "button", id: "clear-runs", onclick: () => clearRuns(f, jobs, groups, reset) }, t("Clear runs…")) : null),
    h("form", {
      class: "filters card", onsubmit: (e) => { e.preventDefault(); reset(); },
      onchange: async (e) => { if (e.target === f.auto) return; if (e.target === f.group) await fillJobs(""); reset(); },
    },
    field(t("Executor group"), f.group), field(t("Job"), f.job), field(t("Status"), f.status), field(t("Trigger type"), f.trigger),
    field(t("From"), f.from), field(t("To"), f.to), field(t("Executor"), f.addr),
    h("button", { class: "primary", type: "submit" }, t("Search"))),
    body);

  const list = latest();
  async function load() {
    let r;
    try {
      r = await list("/logs" + query({
        group_id: f.group.value, job_id: f.job.value, status: f.status.value, trigger_type: f.trigger.value,
        start_time: fromInput(f.from.value)?.toISOString(), end_time: fromInput(f.to.value)?.toISOString(),
        executor_address: f.addr.value.trim(), page_size: size, skip: (state.page - 1) * size,
      }));
    } catch (e) { body.replaceChildren(h("p", { class: "error", role: "alert", text: e.message })); return; }
    const runs = r.runs || [];
    // A page emptied meanwhile (runs cleared) moves to the last page there is.
    const lastPage = Math.max(1, Math.ceil(Number(r.total_size || 0) / size));
    if (!runs.length && state.page > lastPage) { state.page = lastPage; return load(); }
    const name = (id) => jobs.find((j) => String(j.id) === String(id))?.name || "#" + id;
    body.replaceChildren(h("table", { class: "data", id: "runs-table" },
      h("thead", {}, h("tr", {}, [t("Run"), t("Job"), t("Trigger type"), t("Scheduled"), t("Executor"), t("Trigger"), t("Status"), t("Duration"), t("Actions")].map((c) => h("th", { text: c })))),
      h("tbody", {}, runs.length ? runs.map((r) => h("tr", { "data-run": r.id, "data-status": status(r) },
        h("td", {}, h("a", { href: `#/runs/${encodeURIComponent(r.id)}`, class: "mono", title: r.id }, r.id.length > 18 ? r.id.slice(0, 18) + "…" : r.id)),
        h("td", {}, h("a", { href: `#/jobs/${r.job_id}` }, name(r.job_id))),
        h("td", { text: triggerLabel(r.trigger_type) + (r.attempt ? ` (${t("retry")} ${r.attempt})` : "") }),
        h("td", { class: "time", text: fmtTime(r.scheduled_time) }),
        h("td", { class: "mono", text: r.executor_address || "—" }),
        h("td", {}, outcomeBadge(r.trigger_outcome)),
        h("td", {}, badge(t(status(r)), status(r))),
        h("td", { text: fmtDuration(r.start_time, r.end_time) }),
        h("td", {}, h("div", { class: "actions" },
          h("a", { class: "button small", href: `#/runs/${encodeURIComponent(r.id)}` }, t("Log")),
          ctx.canWrite && status(r) === "RUNNING" ? h("button", { type: "button", class: "small danger", onclick: () => kill(r.id, load) }, t("Kill")) : null))))
        : h("tr", {}, h("td", { colspan: 9, class: "empty", text: t("No runs.") })))),
    pager({
      page: state.page, size, total: Number(r.total_size || 0), capped: !!r.total_size_capped, more: !!r.next_page_token,
      summary: t(r.total_size_capped ? "{n}+ runs" : "{n} runs", { n: Number(r.total_size || 0) }),
    }, (n) => { state.page = n; load(); }));
  }
  await load();
  const timer = setInterval(() => { if (f.auto.checked && !document.hidden && !document.querySelector("dialog[open]")) load(); }, 5000);
  ctx.onCleanup(() => clearInterval(timer));
}

async function kill(id, after) {
  if (!(await confirmDialog(t("Kill run {id}?", { id }), t("Kill")))) return;
  try {
    const r = await api(`/logs/${encodeURIComponent(id)}:kill`, { method: "POST", body: {} });
    if (r.killed) toast(t("Kill sent."));
    else toast(t("Not killed: {msg}", { msg: r.message || "?" }), "error");
    after?.();
  } catch (e) { toast(e.message, "error"); }
}

async function clearRuns(f, jobs, groups, after) {
  const mode = select("mode", [["before", t("Runs scheduled before a time")], ["keep", t("All but the newest N per job")], ["all", t("All runs")]], "before");
  const before = h("input", { type: "datetime-local", name: "before_time", value: toInput(new Date(Date.now() - 30 * 864e5)) });
  const keep = h("input", { type: "number", name: "keep_newest", min: 1, value: 100 });
  const scope = (f.job.value ? t("job {name}", { name: jobs.find((j) => String(j.id) === f.job.value)?.name || f.job.value }) : t("every job"))
    + " · " + (f.group.value ? groupName(groups, f.group.value) : t("All groups"));
  const sync = () => { before.closest(".field").hidden = mode.value !== "before"; keep.closest(".field").hidden = mode.value !== "keep"; };
  mode.addEventListener("change", sync);
  const bodyEl = h("div", { class: "form-grid" }, h("p", { text: t("Clear runs of {scope}.", { scope }) }),
    field(t("What to clear"), mode), field(t("Before"), before), field(t("Keep newest"), keep));
  const pending = modal(t("Clear runs"), bodyEl, [
    { label: t("Cancel"), value: null },
    {
      label: t("Clear"), primary: true, class: "primary danger", value: "ok", onclick: async () => {
        const req = { group_id: f.group.value || "0", job_id: f.job.value || "0" };
        if (mode.value === "before") req.before_time = fromInput(before.value)?.toISOString();
        else if (mode.value === "keep") req.keep_newest = Number(keep.value);
        else req.before_time = new Date(Date.now() + 1000).toISOString();
        const r = await api("/logs:clear", { method: "POST", body: req });
        toast(t("Deleted {n} runs.", { n: r.deleted || 0 }));
      },
    },
  ]);
  sync();
  if ((await pending) === "ok") after();
}

// renderDetail shows one run and follows its output until it ends.
export async function renderDetail(root, ctx) {
  const id = ctx.params[0];
  const ac = new AbortController();
  ctx.onCleanup(() => ac.abort());
  const info = h("div", { class: "card run-info", id: "run-info" }, h("p", { class: "muted", text: t("Loading…") }));
  const statusEl = h("span", { id: "run-status" });
  const logEl = h("pre", { class: "log", id: "run-log", "aria-live": "polite" });
  const follow = h("input", { type: "checkbox", checked: true });
  const tailNote = h("span", { class: "muted small", id: "tail-note" });
  const killBtn = h("button", { type: "button", class: "danger", id: "kill-run", hidden: true, onclick: () => kill(id, () => {}) }, t("Kill"));
  let run = null;
  let job = null;

  const setStatus = (s) => {
    const v = short(s, "RUN_STATUS_") || "PENDING";
    statusEl.replaceChildren(badge(t(v), v));
    statusEl.dataset.status = v;
    killBtn.hidden = !(ctx.canWrite && v === "RUNNING");
  };

  // loadSeq orders the reads of the run: only the latest one asked for fills the card.
  let loadSeq = 0;
  async function loadRun() {
    const seq = ++loadSeq;
    let got;
    try {
      got = (await api(`/logs/${encodeURIComponent(id)}`)).run;
    } catch (e) {
      if (e.status === 404) {
        if (seq === loadSeq && !run) info.replaceChildren(h("p", { class: "muted", text: t("This run is not recorded yet; waiting…") }));
        return false;
      }
      throw e;
    }
    if (!job) job = await api(`/jobs/${got.job_id}`).then((r) => r.job).catch(() => null);
    const traceHref = traceURL((await uiConfig()).trace_url_template, got.trace_id);
    if (seq !== loadSeq) return true;
    run = got;
    setStatus(run.status);
    // label is the English label: translated for the eye, kept as data-key for scripts and tests.
    const kv = (label, v) => [h("dt", { text: t(label) }), h("dd", { "data-key": label.toLowerCase().replace(/\W+/g, "-") }, v ?? "—")];
    info.replaceChildren(h("dl", { class: "kv" },
      kv("Job", h("a", { href: `#/jobs/${run.job_id}` }, job ? `#${run.job_id} ${job.name}` : "#" + run.job_id)),
      kv("Trigger type", triggerLabel(run.trigger_type)),
      kv("Attempt", String(run.attempt || 0) + (run.retries_left ? ` · ${t("{n} retries left", { n: run.retries_left })}` : "")),
      kv("Shard", run.shard_total > 1 ? `${run.shard_index}/${run.shard_total}` : "—"),
      kv("Routing", short(run.route_strategy, "ROUTE_STRATEGY_") || "—"),
      kv("Executor", h("span", { class: "mono", text: run.executor_address || "—" })),
      kv("Trigger", outcomeBadge(run.trigger_outcome)),
      kv("Handler", run.handler || "—"),
      kv("Parameter", h("span", { class: "mono", text: run.params || "—" })),
      kv("Scheduled", fmtTime(run.scheduled_time)),
      kv("Triggered", fmtTime(run.trigger_time)),
      kv("Started", fmtTime(run.start_time)),
      kv("Ended", fmtTime(run.end_time)),
      kv("Duration", fmtDuration(run.start_time, run.end_time)),
      kv("Alarm", short(run.alarm_status, "ALARM_STATUS_") || "—"),
      kv("Trace id", traceHref
        ? h("a", { class: "mono", id: "trace-link", href: traceHref, target: "_blank", rel: "noopener", text: run.trace_id })
        : h("span", { class: "mono", text: run.trace_id || "—" }))),
    h("div", { class: "messages" },
      h("div", {}, h("h3", { text: t("Trigger message") }), h("pre", { class: "msg", id: "trigger-message", text: run.trigger_message || "—" })),
      h("div", {}, h("h3", { text: t("Handle message") }), h("pre", { class: "msg", id: "handle-message", text: run.handle_message || "—" }))));
    return true;
  }

  root.append(
    h("div", { class: "page-head" }, h("h1", {}, t("Run"), " ", h("span", { class: "mono small", text: id })), statusEl, killBtn,
      h("a", { class: "button", href: "#/runs" }, t("All runs"))),
    info,
    h("div", { class: "card" },
      h("div", { class: "log-head" }, h("h2", { text: t("Output") }), tailNote, h("span", { class: "spacer" }),
        h("label", { class: "check" }, follow, " ", t("Follow"))),
      logEl));

  await loadRun();
  let next = 1;
  const appendLines = (lines) => {
    const frag = document.createDocumentFragment();
    for (const l of lines) {
      const n = Number(l.line_no);
      if (n < next) continue;
      next = n + 1;
      frag.append(h("div", { class: "line" }, h("span", { class: "ln", text: n }), l.text));
    }
    logEl.append(frag);
    if (follow.checked) logEl.scrollTop = logEl.scrollHeight;
  };
  // The info card is read again whenever the tail shows it is out of date: at the first message
  // of a connection (the run may have been recorded since the page loaded), at the first output
  // (the run has started), when the status moves, and when the tail ends.
  let shownStatus = run?.status || "";
  let sawOutput = false;
  const refreshInfo = () => loadRun().then(() => { shownStatus = run?.status || shownStatus; }).catch(() => {});
  (async () => {
    for (let attempt = 0; !ac.signal.aborted;) {
      tailNote.textContent = t("following live…");
      try {
        let first = true;
        for await (const msg of stream(`/logs/${encodeURIComponent(id)}/lines:tail?from_line=${next}`, ac.signal)) {
          attempt = 0;
          appendLines(msg.lines || []);
          if (msg.status) setStatus(msg.status);
          const firstOutput = !sawOutput && (msg.lines || []).length > 0;
          sawOutput ||= firstOutput;
          if (first || firstOutput || (msg.status && msg.status !== shownStatus)) {
            shownStatus = msg.status || shownStatus;
            refreshInfo();
          }
          first = false;
        }
        await loadRun();
        if (run && run.status !== "RUN_STATUS_RUNNING") {
          tailNote.textContent = t("run ended");
          if (!logEl.childElementCount) logEl.append(h("div", { class: "muted", text: t("(no output)") }));
          return;
        }
      } catch (e) {
        if (ac.signal.aborted) return;
        tailNote.textContent = e.status === 404 ? t("waiting for the run…") : t("reconnecting: {msg}", { msg: e.message });
        if (!run) await loadRun().catch(() => {});
      }
      await sleep(Math.min(500 * 2 ** attempt++, 5000));
    }
  })();
}
