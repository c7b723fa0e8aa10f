// The dashboard: totals (workflow instances of today among them), runs per day by outcome (the
// last 14 days) and fires per minute (the last hour), refreshed every 15 s.
import { api, query } from "../api.js";
import { h } from "../dom.js";
import { t } from "../i18n.js";
import { stackedBars } from "../charts.js";
import { loadGroups, allAllowed } from "../groups.js";
import { hourMinute } from "../tz.js";

const day = (d) => d.toISOString().slice(0, 10);

// render shows the dashboard. Its figures are logsvc's (GET /dashboard and /reports), which
// the API limits to the caller's executor groups.
export async function render(root, ctx) {
  const groups = await loadGroups().catch(() => []);
  // Job names for the table: every job a caller limited to several groups may see, group by group.
  const jobGroups = allAllowed(ctx, groups) ? [""] : groups.map((g) => String(g.id));
  const cards = h("div", { class: "cards", id: "dashboard-cards" });
  const perDay = h("div", { class: "chart-box", id: "chart-days" });
  const perMin = h("div", { class: "chart-box", id: "chart-minutes" });
  const jobsBox = h("div", { class: "table-wrap" });
  root.append(h("div", { class: "page-head" }, h("h1", { text: t("Dashboard") })), cards,
    h("div", { class: "chart-row" },
      h("section", { class: "card" }, h("h2", { text: t("Runs per day") }), perDay),
      h("section", { class: "card" }, h("h2", { text: t("Fires per minute, last hour") }), perMin)),
    h("section", { class: "card" }, h("h2", { text: t("Jobs by runs, last 14 days") }), jobsBox));

  const series = () => [
    { key: "success", label: t("Success"), cls: "s-success" },
    { key: "fail", label: t("Failed"), cls: "s-fail" },
    { key: "running", label: t("Running"), cls: "s-running" },
  ];

  async function load() {
    const now = new Date();
    const from = new Date(now.getTime() - 13 * 864e5);
    const [dash, report, execs, wfCount, ...jobLists] = await Promise.all([
      api("/dashboard"),
      api("/reports" + query({ start_date: day(from), end_date: day(now) })).catch(() => ({ days: [], jobs: [] })),
      api("/executors").catch(() => null),
      // The scheduler counts workflow instances by the UTC day of their scheduled time.
      api("/workflow-instances:count" + query({ start_date: day(now), end_date: day(now) })).catch(() => null),
      ...jobGroups.map((g) => api("/jobs" + query({ group_id: g, page_size: 1000 })).catch(() => null)),
    ]);
    // The registry lists the executors the caller may see; logsvc's count is the fallback.
    const execCount = execs ? (execs.executors || []).length : dash.executor_count;
    const names = new Map(jobLists.flatMap((l) => l?.jobs || []).map((j) => [String(j.id), j.name]));
    const card = (id, label, value, cls = "", detail = "") => h("div", { class: "stat card " + cls, "data-stat": id },
      h("div", { class: "stat-value", text: value }), h("div", { class: "stat-label", text: label }),
      detail ? h("div", { class: "stat-detail muted", text: detail }) : null);
    const wf = { success: 0, failed: 0, killed: 0, running: 0, skipped: 0 };
    for (const d of wfCount?.days || []) for (const k of Object.keys(wf)) wf[k] += Number(d.counts?.[k] || 0);
    const wfTotal = Object.values(wf).reduce((a, b) => a + b, 0);
    const wfDetail = [["success", "Success"], ["failed", "Failed"], ["killed", "KILLED"], ["running", "Running"], ["skipped", "SKIPPED"]]
      .map(([k, label]) => `${t(label)} ${wf[k]}`).join(" · ");
    cards.replaceChildren(
      card("jobs", t("Jobs"), dash.job_count ?? 0),
      card("runs-today", t("Runs today"), dash.runs_today ?? 0),
      card("success-rate", t("Success rate today"), dash.runs_today > 0 ? `${(100 * (dash.success_rate_today || 0)).toFixed(1)} %` : "—"),
      card("executors", t("Executors online"), execCount ?? 0),
      card("running", t("Running now"), dash.running_count ?? 0),
      card("runs", t("Runs stored"), dash.run_count ?? 0),
      card("wf-instances", t("Workflow instances today"), wfCount ? wfTotal : "—", "", wfCount ? wfDetail : ""));
    const days = (report.days || []).map((d) => ({ label: d.date.slice(5), values: d }));
    perDay.replaceChildren(stackedBars(days, series(), { labelEvery: days.length > 16 ? 2 : 1, title: t("Runs per day") }));

    // Fires per minute: logsvc counts them by the minute of their scheduled time.
    const minutes = (dash.minutes || []).map((m) => ({ label: hourMinute(m.start_time), values: m }));
    perMin.replaceChildren(stackedBars(minutes, series(), { labelEvery: 10, title: t("Fires per minute, last hour") }));

    const jobs = (report.jobs || []).slice().sort((a, b) => (Number(b.success) + Number(b.fail)) - (Number(a.success) + Number(a.fail))).slice(0, 10);
    jobsBox.replaceChildren(jobs.length ? h("table", { class: "data" },
      h("thead", {}, h("tr", {}, [t("Job"), t("Success"), t("Failed"), t("Success rate")].map((c) => h("th", { text: c })))),
      h("tbody", {}, jobs.map((j) => h("tr", {},
        h("td", {}, h("a", { href: `#/runs?job_id=${j.job_id}` }, `#${j.job_id} ${names.get(String(j.job_id)) || ""}`)), h("td", { text: j.success }), h("td", { text: j.fail }),
        h("td", {}, h("div", { class: "rate" }, h("div", { class: "rate-bar", style: `width:${(100 * (j.success_rate || 0)).toFixed(0)}%` }), h("span", { text: `${(100 * (j.success_rate || 0)).toFixed(1)} %` })))))))
      : h("p", { class: "muted", text: t("No finished runs yet.") }));
  }
  await load();
  const timer = setInterval(() => { if (!document.hidden) load().catch(() => {}); }, 15000);
  ctx.onCleanup(() => clearInterval(timer));
}
