// End-to-end test of jobmesh's web console in headless Chromium, against a running stack.
// internal/uitest starts the stack, creates the users and the other group's job, and runs this
// with the environment below; a non-zero exit fails that Go test.
//
//   JOBMESH_URL               gateway base URL, e.g. http://127.0.0.1:8080
//   JOBMESH_ADMIN_PASSWORD    password of "admin"
//   JOBMESH_GROUP_ID          the local agent's executor group
//   JOBMESH_VIEWER, JOBMESH_VIEWER_PASSWORD        a viewer of that group
//   JOBMESH_OPERATOR, JOBMESH_OPERATOR_PASSWORD    an operator limited to that group
//   JOBMESH_OTHER_GROUP, JOBMESH_OTHER_JOB, JOBMESH_OTHER_JOB_ID   a group, and a job in it, that
//                             the operator must not see
//   JOBMESH_OTHER_GROUP_ID    that group's id (it holds enough jobs for several pages of the job list)
//   JOBMESH_SCREENSHOTS       where to write screenshots of the main pages (optional)
//   CHROMIUM                  browser executable, default /usr/bin/chromium
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const env = (k, def) => {
  const v = process.env[k] ?? def;
  if (v === undefined || v === "") { console.error(`missing environment variable ${k}`); process.exit(2); }
  return v;
};
const BASE = env("JOBMESH_URL").replace(/\/$/, "");
const ADMIN_PASSWORD = env("JOBMESH_ADMIN_PASSWORD");
const GROUP_ID = env("JOBMESH_GROUP_ID");
const VIEWER = env("JOBMESH_VIEWER");
const VIEWER_PASSWORD = env("JOBMESH_VIEWER_PASSWORD");
const OPERATOR = env("JOBMESH_OPERATOR");
const OPERATOR_PASSWORD = env("JOBMESH_OPERATOR_PASSWORD");
const OTHER_GROUP = env("JOBMESH_OTHER_GROUP");
const OTHER_JOB = env("JOBMESH_OTHER_JOB");
const OTHER_JOB_ID = env("JOBMESH_OTHER_JOB_ID");
const OTHER_GROUP_ID = env("JOBMESH_OTHER_GROUP_ID");
// The browser's own zone: not UTC, so "the browser's zone" and "UTC" differ on every page.
const BROWSER_ZONE = "America/New_York";
const SHOTS = process.env.JOBMESH_SCREENSHOTS || "";
const T = 30_000; // generous wait for anything the UI shows

class Failure extends Error {}
const check = (ok, msg) => { if (!ok) throw new Failure(msg); };

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "jobmesh-e2e-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1360, height: 860 },
  locale: "en-US",
  timezoneId: BROWSER_ZONE,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const page = browser.pages()[0] || (await browser.newPage());
page.setDefaultTimeout(T);
const problems = [];
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
// The browser logs every 4xx answer; the UI handles those (a bad cron while typing, a 403), so
// only other errors count.
page.on("console", (m) => { if (m.type() === "error" && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) problems.push(`console error: ${m.text()}`); });
// Works without a network: every request must stay on the gateway.
page.on("request", (r) => { if (!r.url().startsWith(BASE) && !r.url().startsWith("data:")) problems.push(`request outside the binary: ${r.url()}`); });

async function shot(name, opts = {}) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.evaluate(() => document.getElementById("toasts")?.replaceChildren());
  await page.waitForTimeout(300); // let the page settle for the picture only
  await page.screenshot({ path: path.join(SHOTS, name + ".png"), ...opts });
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    const out = path.join(SHOTS || os.tmpdir(), "failure.png");
    await page.screenshot({ path: out, fullPage: true }).catch(() => {});
    console.log(`     screenshot of the failure: ${out}`);
    console.log(`     page text: ${(await page.textContent("body").catch(() => "")).replace(/\s+/g, " ").slice(0, 1500)}`);
    throw e;
  }
}

const go = (hash) => page.goto(`${BASE}/#/${hash}`);
const view = () => page.locator("#view");
const jobRow = (name) => page.locator(`#jobs-table tr[data-job="${name}"]`);

// apiCall calls the REST API from the page as the logged-in user: {status, body}.
const apiCall = (method, p, body) => page.evaluate(async ([method, p, body]) => {
  const res = await fetch("/api/v1" + p, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { Authorization: "Bearer " + localStorage.getItem("jobmesh.token"), "Content-Type": "application/json" },
  });
  return { status: res.status, body: await res.json().catch(() => ({})) };
}, [method, p, body]);

// zoneOffset is the "UTC+hh:mm" label of zone at instant ms, as the console writes it.
function zoneOffset(zone, ms) {
  if (zone === "UTC") return "UTC";
  const parts = Object.fromEntries(new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric" })
    .formatToParts(new Date(ms)).map((x) => [x.type, Number(x.value)]));
  const off = Math.round((Date.UTC(parts.year, parts.month - 1, parts.day, parts.hour % 24, parts.minute, parts.second) - Math.floor(ms / 1000) * 1000) / 60000);
  const a = Math.abs(off);
  return `UTC${off < 0 ? "-" : "+"}${String(Math.floor(a / 60)).padStart(2, "0")}:${String(a % 60).padStart(2, "0")}`;
}

// shownAs is how the console shows instant ms in zone: "2026-11-22 08:00:00 UTC+08:00".
function shownAs(zone, ms) {
  const p = Object.fromEntries(new Intl.DateTimeFormat("en-US", { timeZone: zone, hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" })
    .formatToParts(new Date(ms)).map((x) => [x.type, x.value]));
  return `${p.year}-${p.month}-${p.day} ${p.hour}:${p.minute}:${p.second} ${zoneOffset(zone, ms)}`;
}

// pageIDs are the ids of the jobs the API lists on page n (size 10) of the other group.
async function pageIDs(n) {
  const r = await apiCall("GET", `/jobs?group_id=${OTHER_GROUP_ID}&page_size=10&skip=${(n - 1) * 10}`);
  check(r.status === 200, `GET /jobs page ${n}: ${r.status}`);
  return (r.body.jobs || []).map((j) => String(j.id));
}
const shownIDs = () => page.locator("#jobs-table tr[data-job] td:first-child").allTextContents().then((a) => a.map((x) => x.trim()));

async function login(user, password) {
  await page.goto(BASE + "/");
  await page.locator("#login-form").waitFor();
  await page.fill("#login-form input[name=username]", user);
  await page.fill("#login-form input[name=password]", password);
  await page.click("#login-form button[type=submit]");
  await page.locator("#who").waitFor();
  check((await page.textContent("#who")).includes(user), `the header should name ${user}`);
}

async function logout() {
  await page.click("#logout");
  await page.locator("#login-form").waitFor();
}

// createJob fills the job form; source is the GLUE shell script.
async function createJob({ name, type, expression, params, source, scheduled }) {
  await go("jobs");
  await page.click("#new-job");
  await page.locator("#job-form").waitFor();
  await page.selectOption("#job-form select[name=group_id]", GROUP_ID);
  await page.fill("#job-form input[name=name]", name);
  await page.selectOption("#job-form select[name='schedule.type']", type);
  if (expression !== undefined) await page.fill("#job-form input[name='schedule.expression']", expression);
  await page.selectOption("#job-form select[name=glue_type]", "GLUE_TYPE_GLUE_SHELL");
  await page.fill("#job-form textarea[name=params]", params || "");
  await page.fill("#job-form textarea[name=glue_source]", source);
  await page.fill("#job-form input[name=glue_remark]", "first");
  if (scheduled) await page.check("#job-form input[name=status]");
}

let failed = false;
const started = Date.now();
try {
  await step("login page rejects a wrong password, then the admin logs in", async () => {
    await page.goto(BASE + "/");
    await page.fill("#login-form input[name=username]", "admin");
    await page.fill("#login-form input[name=password]", "not-the-password");
    await page.click("#login-form button[type=submit]");
    await page.locator("#login-form .error", { hasText: "Wrong user name or password" }).waitFor();
    await shot("login");
    await login("admin", ADMIN_PASSWORD);
    await page.locator("#dashboard-cards [data-stat=executors] .stat-value").waitFor();
  });

  let cronID = "";
  await step("create a cron job; the preview follows the expression while typing", async () => {
    await createJob({ name: "e2e-cron", type: "SCHEDULE_TYPE_CRON", expression: "0/2 * * * * ?", params: "world", source: 'echo "hello from e2e $1"\n', scheduled: true });
    await page.locator("#fire-preview li").nth(4).waitFor();
    const times = await page.locator("#fire-preview li").allTextContents();
    // Shown in the browser's zone, with its offset.
    const secs = times.map((x) => /:(\d\d) (UTC[+-]\d\d:\d\d)$/.exec(x));
    check(secs.every((m) => m && Number(m[1]) % 2 === 0 && m[2] === zoneOffset(BROWSER_ZONE, Date.now())),
      `every preview time should fall on an even second and name ${BROWSER_ZONE}'s offset, got ${times}`);
    // The run modes offered are exactly the ones the server accepts: every GlueType of the API
    // is tried as a stopped job, and the ones refused (naming glue_type) must not be offered.
    const offered = (await page.locator("#job-form select[name=glue_type] option").evaluateAll((os) => os.map((o) => o.value))).sort();
    const spec = await page.evaluate(async () => (await fetch("/api/openapi.json")).json());
    const glueEnum = Object.entries(spec.definitions || spec.components?.schemas || {}).find(([k]) => /GlueType$/.test(k))?.[1]?.enum || [];
    check(glueEnum.length > 5, `the OpenAPI document should list the GLUE types, got ${glueEnum}`);
    const accepted = [];
    for (const g of glueEnum.filter((v) => !v.endsWith("_UNSPECIFIED"))) {
      const r = await apiCall("POST", "/jobs", { name: "e2e-glue-" + g, group_id: GROUP_ID, handler: g === "GLUE_TYPE_BEAN" ? "demo" : "",
        glue_type: g, glue_source: g === "GLUE_TYPE_BEAN" ? "" : "echo hi\n", schedule: { type: "SCHEDULE_TYPE_NONE" } });
      if (r.status === 200) {
        accepted.push(g);
        // The group has only jobmesh agents: a Groovy job is saved with a warning that none runs it.
        const warned = (r.body.warnings || []).some((w) => w.includes("GLUE_GROOVY"));
        check(warned === (g === "GLUE_TYPE_GLUE_GROOVY"), `${g}: warnings ${JSON.stringify(r.body.warnings)}`);
        check((await apiCall("DELETE", `/jobs/${r.body.job.id}`)).status === 200, "deleting the GLUE probe job");
      } else {
        check(r.status === 400 && JSON.stringify(r.body).includes("glue_type"), `${g}: ${r.status} ${JSON.stringify(r.body)}, want accepted or refused naming glue_type`);
      }
    }
    // Groovy runs only on XXL-JOB executors, so the form offers it only for a group that has one.
    const runnable = accepted.filter((g) => g !== "GLUE_TYPE_GLUE_GROOVY").sort();
    check(accepted.includes("GLUE_TYPE_GLUE_GROOVY"), `the server should accept GLUE_GROOVY (with a warning), accepts ${accepted}`);
    check(JSON.stringify(offered) === JSON.stringify(runnable), `the form offers ${offered}, the group runs ${runnable}`);
    await page.fill("#job-form input[name='schedule.expression']", "not a cron");
    await page.locator("#preview-error").filter({ hasText: /\S/ }).waitFor();
    await page.fill("#job-form input[name='schedule.expression']", "0/2 * * * * ?");
    await page.locator("#fire-preview li").nth(4).waitFor();
    await shot("job-form", { fullPage: true });
    await page.click("#save-job");
    await jobRow("e2e-cron").waitFor();
    cronID = (await jobRow("e2e-cron").locator("td").first().textContent()).trim();
    check(/^\d+$/.test(cronID), `job id cell: ${cronID}`);
  });

  await step("watch it run and read its output in the run's log", async () => {
    await jobRow("e2e-cron").getByRole("link", { name: "Runs" }).click();
    const ok = page.locator("#runs-table tr[data-status=SUCCESS]").first();
    await ok.waitFor({ timeout: 60_000 });
    await shot("runs");
    await ok.getByRole("link", { name: "Log" }).click();
    await page.locator("#run-log", { hasText: "hello from e2e world" }).waitFor();
    await page.locator("#run-status[data-status=SUCCESS]").waitFor();
    check((await page.textContent("#trigger-message")).trim() !== "—", "the trigger message should be shown");
    await shot("run-detail");
  });

  await step("every time names its zone; the zone setting (browser, UTC, any IANA zone) holds across pages and reloads", async () => {
    await go(`runs?job_id=${cronID}&auto=0`);
    const first = page.locator("#runs-table tr[data-run]").first();
    await first.waitFor();
    const runID = await first.getAttribute("data-run");
    const r = await apiCall("GET", `/logs/${encodeURIComponent(runID)}`);
    const ms = Date.parse(r.body.run.scheduled_time);
    const cell = page.locator(`#runs-table tr[data-run="${runID}"] td.time`);
    const shows = async (zone) => {
      await page.locator(`#runs-table tr[data-run="${runID}"] td.time`, { hasText: shownAs(zone, ms) }).waitFor();
    };
    await shows(BROWSER_ZONE);
    await page.selectOption("#tz-switch", "UTC");
    await shows("UTC");
    check((await cell.textContent()).endsWith(" UTC"), `a UTC time should say so: ${await cell.textContent()}`);
    await page.selectOption("#tz-switch", "Asia/Kolkata");
    await shows("Asia/Kolkata");
    // Kept in this browser: a reload shows the same zone, and so do other pages.
    await page.reload();
    await shows("Asia/Kolkata");
    check(await page.inputValue("#tz-switch") === "Asia/Kolkata", "the zone setting should survive a reload");
    // Time filters are read in the chosen zone too: from the run's own minute it is listed, from
    // the next minute it is not.
    const minute = shownAs("Asia/Kolkata", ms).slice(0, 16).replace(" ", "T");
    const next = shownAs("Asia/Kolkata", Math.floor(ms / 60000) * 60000 + 60000).slice(0, 16).replace(" ", "T");
    await page.fill("#view input[name=start_time]", minute);
    await page.locator("#view input[name=start_time]").dispatchEvent("change");
    await cell.waitFor();
    await page.fill("#view input[name=start_time]", next);
    await page.locator("#view input[name=start_time]").dispatchEvent("change");
    await cell.waitFor({ state: "detached" });
    await go(`jobs/${cronID}`);
    await page.locator("#view .page-head .muted", { hasText: /updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\+05:30$/ }).waitFor();
    await page.selectOption("#tz-switch", "");
    await go(`runs?job_id=${cronID}&auto=0`);
    await shows(BROWSER_ZONE);
  });

  await step("edit the cron job, then stop it", async () => {
    await go("jobs");
    await jobRow("e2e-cron").getByRole("link", { name: "Edit" }).click();
    await page.locator("#job-form").waitFor();
    check(await page.inputValue("#job-form input[name='schedule.expression']") === "0/2 * * * * ?", "the form should show the stored cron");
    await page.fill("#job-form textarea[name=params]", "again");
    await page.fill("#job-form input[name=author]", "e2e-author");
    await page.selectOption("#job-form select[name=route_strategy]", "ROUTE_STRATEGY_ROUND");
    await page.click("#save-job");
    await jobRow("e2e-cron").locator("td", { hasText: "e2e-author" }).waitFor();
    await jobRow("e2e-cron").getByRole("link", { name: "Edit" }).click();
    await page.locator("#job-form").waitFor();
    check(await page.inputValue("#job-form textarea[name=params]") === "again", "the edited parameter should be stored");
    check(await page.inputValue("#job-form select[name=route_strategy]") === "ROUTE_STRATEGY_ROUND", "the edited routing should be stored");
    check(await page.isChecked("#job-form input[name=status]"), "the job should still be scheduled");
    await go("jobs");
    await jobRow("e2e-cron").getByRole("button", { name: "Stop" }).click();
    await jobRow("e2e-cron").getByRole("button", { name: "Start" }).waitFor();
  });

  await step("lists page by number: page buttons, jump to a page, previous and next", async () => {
    await go(`jobs?group_id=${OTHER_GROUP_ID}`);
    await page.locator("#jobs-table").waitFor();
    await page.selectOption("#view select[name=page_size]", "10");
    const total = Number((await apiCall("GET", `/jobs?group_id=${OTHER_GROUP_ID}&page_size=1`)).body.total_size);
    const last = Math.ceil(total / 10);
    check(last >= 5, `the other group should hold five pages of jobs, it holds ${total} jobs`);
    const pager = page.locator("#jobs .pager");
    await pager.filter({ hasText: `Page 1 of ${last}` }).waitFor();
    check((await pager.textContent()).includes(`${total} jobs`), `the pager should count ${total} jobs: ${await pager.textContent()}`);
    const nums = await pager.locator("button.page-num").allTextContents();
    check(JSON.stringify(nums) === JSON.stringify(["1", "2", "3", String(last)]), `page buttons on page 1: ${nums}`);
    const on = async (n) => {
      await pager.filter({ hasText: `Page ${n} of ${last}` }).waitFor();
      const want = await pageIDs(n);
      const got = await shownIDs();
      check(JSON.stringify(got) === JSON.stringify(want), `page ${n} shows jobs ${got}, the API lists ${want}`);
    };
    await on(1);
    await pager.locator('button.page-num[data-page="3"]').click();
    await on(3);
    check(await pager.locator("button.page-num.current").textContent() === "3", "page 3 should be marked current");
    await pager.locator(`button.page-num[data-page="${last}"]`).click();
    await on(last);
    check(await pager.locator('button[data-page="next"]').isDisabled(), "Next should be disabled on the last page");
    await pager.locator("input[name=page]").fill("2");
    await pager.locator("input[name=page]").press("Enter");
    await on(2);
    await pager.locator('button[data-page="next"]').click();
    await on(3);
    await pager.locator('button[data-page="prev"]').click();
    await on(2);
    await pager.locator("input[name=page]").fill(String(last + 5));
    await pager.locator('button[data-page="go"]').click();
    await on(last);
    // The runs list counts its runs and pages by number too.
    await go(`runs?job_id=${cronID}&auto=0`);
    const runsTotal = Number((await apiCall("GET", `/logs?job_id=${cronID}&page_size=1`)).body.total_size);
    await page.locator("#runs .pager", { hasText: /\d+ runs · Page 1 of \d+/ }).waitFor();
    check(runsTotal > 0, "the cron job should have runs");
  });

  await step("run a long job once with a parameter, see it on its executor, follow its live log and kill it", async () => {
    await createJob({ name: "e2e-long", type: "SCHEDULE_TYPE_NONE", source: 'echo "long job started with $1"\nsleep 300\necho "never printed"\n' });
    await page.locator("#fire-preview li", { hasText: "Never fires on its own" }).waitFor();
    await page.click("#save-job");
    await jobRow("e2e-long").getByRole("button", { name: "Run once" }).click();
    const dlg = page.locator("dialog[open]");
    await dlg.locator("textarea[name=params]").fill("p1");
    await dlg.getByRole("button", { name: "Run" }).click();
    await dlg.waitFor({ state: "detached" });
    await jobRow("e2e-long").getByRole("link", { name: "Runs" }).click();
    const running = page.locator("#runs-table tr[data-status=RUNNING]").first();
    await running.waitFor();
    const longID = await running.getAttribute("data-run");
    // The executors page shows it among the local agent's running jobs, linked to its runs.
    await go("executors");
    const busy = page.locator("#executors-table td.running-jobs a");
    await busy.waitFor();
    const busyText = (await busy.textContent()).trim();
    check(/^1 \(jobs #\d+\)$/.test(busyText), `the agent should run one job, the cell says "${busyText}"`);
    await busy.click();
    await page.locator(`#runs-table tr[data-run="${longID}"][data-status=RUNNING]`).waitFor();
    check(await page.locator("#runs-table tr[data-run]").count() === 1, "the executor's running runs should be the long one only");
    // The run's page is opened as if the run were not recorded yet (its first read answers 404):
    // the info card must fill in from the live output, while the run is still running.
    let hidden = 0;
    const getRun = (u) => u.pathname === "/api/v1/logs/" + encodeURIComponent(longID);
    await page.route(getRun, (route) => {
      hidden++;
      return route.fulfill({ status: 404, contentType: "application/json", body: JSON.stringify({ code: 5, message: "not found" }) });
    }, { times: 1 });
    await running.getByRole("link", { name: "Log" }).click();
    await page.locator("#run-log", { hasText: "long job started with p1" }).waitFor();
    await page.locator("#run-status[data-status=RUNNING]").waitFor();
    check(hidden === 1, `the run's first read should have been answered 404, ${hidden} were`);
    await page.locator("#run-info dd[data-key=started]", { hasText: /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC[+-]\d\d:\d\d$/ }).waitFor();
    check((await page.textContent("#run-info dd[data-key=executor]")).trim() !== "—", "the running run's card should name its executor");
    check(await page.locator("#run-status[data-status=RUNNING]").count() === 1, "the run should still be running while its card fills in");
    await page.click("#kill-run");
    await page.locator("dialog[open]").getByRole("button", { name: "Kill" }).click();
    await page.locator("#run-status[data-status=KILLED]").waitFor();
    check(!(await page.textContent("#run-log")).includes("never printed"), "the killed job should not finish its script");
  });

  await step("clear the long job's runs", async () => {
    await go("jobs");
    await jobRow("e2e-long").getByRole("link", { name: "Runs" }).click();
    await page.locator("#runs-table tr[data-status=KILLED]").waitFor();
    await page.click("#clear-runs");
    const dlg = page.locator("dialog[open]");
    await dlg.locator("select[name=mode]").selectOption("all");
    await dlg.getByRole("button", { name: "Clear" }).click();
    await dlg.waitFor({ state: "detached" });
    await page.locator("#runs-table td.empty").waitFor();
  });

  await step("copy a job and delete the copy", async () => {
    await go("jobs");
    const row = jobRow("e2e-long");
    await row.locator("details.more summary").click();
    await row.getByRole("button", { name: "Copy" }).click();
    const dlg = page.locator("dialog[open]");
    await dlg.locator("input[name=name]").fill("e2e-long-copy");
    await dlg.getByRole("button", { name: "Copy" }).click();
    const copy = jobRow("e2e-long-copy");
    await copy.waitFor();
    await copy.locator("details.more summary").click();
    await copy.getByRole("button", { name: "Delete" }).click();
    await page.locator("dialog[open]").getByRole("button", { name: "Delete" }).click();
    await copy.waitFor({ state: "detached" });
  });

  await step("GLUE editor: save a version, diff it and restore the first", async () => {
    await go(`jobs/${cronID}/glue`);
    await page.locator("#glue-versions li").first().waitFor();
    check(await page.locator(".code-hl .tok-str").count() > 0, "the source should be highlighted");
    await page.fill("textarea[name=glue_source]", 'echo "second version $1"\n');
    await page.click("#save-glue");
    await page.locator(".glue-toolbar ~ .error", { hasText: "remark" }).waitFor();
    await page.fill("input[name=glue_remark]", "second");
    await page.click("#save-glue");
    await page.locator("#glue-versions li").nth(1).waitFor();
    const first = page.locator("#glue-versions li").nth(1);
    await first.getByRole("button", { name: "Diff" }).click();
    await page.locator("#glue-diff .ddel", { hasText: "hello from e2e" }).waitFor();
    await page.locator("#glue-diff .dadd", { hasText: "second version" }).waitFor();
    await shot("glue-editor");
    await first.getByRole("button", { name: "Restore" }).click();
    await page.locator("dialog[open]").getByRole("button", { name: "Restore" }).click();
    await page.locator("#glue-versions li").nth(2).waitFor();
    check((await page.inputValue("textarea[name=glue_source]")).includes("hello from e2e"), "the editor should hold the restored source");
  });

  await step("executor groups (create, edit, delete), dashboard, users, API tokens and audit", async () => {
    await go("executors");
    await page.locator("#executors-table td", { hasText: "ONLINE" }).first().waitFor();
    await page.locator(`#groups-table tr[data-group="${OTHER_GROUP}"]`).waitFor();
    await shot("executors");
    await page.click("#new-group");
    let gdlg = page.locator("dialog[open]");
    await gdlg.locator("input[name=app_name]").fill("e2e-manual");
    await gdlg.locator("input[name=title]").fill("E2E manual");
    await gdlg.locator("select[name=address_type]").selectOption("ADDRESS_TYPE_MANUAL");
    await gdlg.locator("textarea[name=manual_addresses]").fill("127.0.0.1:7001\n127.0.0.1:7002");
    await gdlg.getByRole("button", { name: "Save" }).click();
    const grp = page.locator('#groups-table tr[data-group="e2e-manual"]');
    await grp.locator("td", { hasText: "127.0.0.1:7002" }).waitFor();
    await grp.getByRole("button", { name: "Edit" }).click();
    gdlg = page.locator("dialog[open]");
    await gdlg.locator("input[name=title]").fill("E2E manual, renamed");
    await gdlg.getByRole("button", { name: "Save" }).click();
    await grp.locator("td", { hasText: "E2E manual, renamed" }).waitFor();
    await grp.getByRole("button", { name: "Delete" }).click();
    await page.locator("dialog[open]").getByRole("button", { name: "Delete" }).click();
    await grp.waitFor({ state: "detached" });
    await go("dashboard");
    await page.locator("#chart-days svg .s-success").first().waitFor();
    await shot("dashboard");
    await go("users");
    await page.locator(`#users-table tr[data-user="${OPERATOR}"]`).waitFor();
    await page.click("#new-user");
    const dlg = page.locator("dialog[open]");
    await dlg.locator("input[name=username]").fill("e2e-user");
    await dlg.locator("input[name=password]").fill("e2e-user-pass-phrase");
    await dlg.locator("select[name=role]").selectOption("ROLE_OPERATOR");
    await dlg.locator(`input[name=group_ids][value="${GROUP_ID}"]`).check();
    await dlg.getByRole("button", { name: "Save" }).click();
    await page.locator('#users-table tr[data-user="e2e-user"]', { hasText: "operator" }).waitFor();
    await shot("users");
    await go("tokens");
    await page.click("#new-token");
    await page.locator("dialog[open] input[name=name]").fill("e2e-automation");
    await page.locator("dialog[open]").getByRole("button", { name: "Create" }).click();
    const secret = page.locator("#token-secret");
    await secret.waitFor();
    const value = await secret.inputValue();
    check(value.length > 20, `the new token's secret should be shown once, got ${value}`);
    const me = await page.evaluate(async (tok) => (await fetch("/api/v1/auth/me", { headers: { Authorization: "Bearer " + tok } })).status, value);
    check(me === 200, `the new API token should work, GET /auth/me = ${me}`);
    await page.locator("dialog[open]").getByRole("button", { name: "Close" }).click();
    await page.locator('#tokens-table tr[data-token="e2e-automation"]').waitFor();
    await go("audit");
    await page.locator("#audit-table td", { hasText: "jobs/" + cronID }).first().waitFor();
    await shot("audit");
    // Actions read as words, not RPC names.
    const createJob = "/jobmesh.scheduler.v1.JobService/CreateJob";
    const actions = await page.locator("#audit-table td.action").allTextContents();
    check(actions.length > 0 && actions.every((a) => a && !a.includes("/") && !a.includes("jobmesh")), `audit actions should be readable: ${actions}`);
    check((await page.locator(`#audit-table tr[data-action="${createJob}"] td.action`).first().textContent()) === "Create job", "CreateJob should read Create job");
    // Filters go to the server: by action (with pages of the matches), object, user and time.
    const filters = page.locator("#audit-filters");
    await filters.locator("select[name=action]").selectOption(createJob);
    const created = Number((await apiCall("GET", "/audit-events?page_size=1&action=" + encodeURIComponent(createJob))).body.total_size);
    check(created > 50, `more than 50 jobs should have been created, the API counts ${created}`);
    const pager = page.locator("#audit .pager");
    await pager.filter({ hasText: `${created} events · Page 1 of ${Math.ceil(created / 50)}` }).waitFor();
    const acts = await page.locator("#audit-table tr[data-action]").evaluateAll((rs) => rs.map((r) => r.dataset.action));
    check(acts.length === 50 && acts.every((a) => a === createJob), `filtered by action, got ${acts.length} rows: ${[...new Set(acts)]}`);
    await pager.locator('button.page-num[data-page="2"]').click();
    await pager.filter({ hasText: "Page 2 of" }).waitFor();
    check(await page.locator("#audit-table tr[data-action]").count() === Math.min(50, created - 50), "page 2 should hold the rest");
    await filters.locator("select[name=action]").selectOption("");
    await filters.locator("input[name=resource]").fill("jobs/" + cronID);
    await filters.locator("input[name=resource]").press("Enter");
    await pager.filter({ hasText: "Page 1 of 1" }).waitFor();
    const objects = await page.locator("#audit-table tr[data-action] td.object").allTextContents();
    check(objects.length > 0 && objects.every((o) => o.includes("jobs/" + cronID)), `filtered by object: ${objects}`);
    await filters.locator("input[name=username]").fill("nobody-by-that-name");
    await filters.locator("input[name=username]").press("Enter");
    await page.locator("#audit-table td.empty", { hasText: "No events match." }).waitFor();
    await filters.locator("input[name=username]").fill("adm");
    await filters.locator("input[name=username]").press("Enter");
    await page.locator("#audit-table tr[data-action]").first().waitFor();
    const tomorrow = shownAs(BROWSER_ZONE, Date.now() + 864e5).slice(0, 16).replace(" ", "T");
    await filters.locator("input[name=start_time]").fill(tomorrow);
    await filters.locator("input[name=start_time]").dispatchEvent("change");
    await page.locator("#audit-table td.empty").waitFor();
    // A range that ends before it starts is refused by the server, which names the field.
    await filters.locator("input[name=end_time]").fill(shownAs(BROWSER_ZONE, Date.now() - 864e5).slice(0, 16).replace(" ", "T"));
    await filters.locator("input[name=end_time]").dispatchEvent("change");
    await page.locator("#audit .error", { hasText: "end_time" }).waitFor();
  });

  await step("at 800 px the jobs table's actions are in view and work", async () => {
    await page.setViewportSize({ width: 800, height: 900 });
    try {
      await go("jobs");
      const row = jobRow("e2e-long");
      await row.waitFor();
      await page.evaluate(() => window.scrollTo(0, 0));
      check(await page.evaluate(() => document.documentElement.scrollWidth) <= 800, "the page should not scroll sideways at 800 px");
      check(await page.locator("#jobs").evaluate((el) => el.scrollLeft) === 0, "the job table should not be scrolled");
      const controls = row.locator(".actions > a, .actions > button, .actions summary");
      const n = await controls.count();
      check(n >= 5, `the row should have its actions, found ${n}`);
      for (let i = 0; i < n; i++) {
        const c = controls.nth(i);
        const name = (await c.textContent()).trim();
        const box = await c.boundingBox();
        check(box && box.x >= 0 && box.x + box.width <= 800 && box.y >= 0 && box.y + box.height <= 900,
          `action ${name} should be inside the 800 px window, it is at ${JSON.stringify(box)}`);
        const onTop = await c.evaluate((el) => {
          const r = el.getBoundingClientRect();
          const hit = document.elementFromPoint(r.x + r.width / 2, r.y + r.height / 2);
          return el === hit || el.contains(hit);
        });
        check(onTop, `action ${name} should not be covered`);
      }
      await row.getByRole("button", { name: "Run once" }).click();
      const dlg = page.locator("dialog[open]");
      await dlg.waitFor();
      await dlg.getByRole("button", { name: "Cancel" }).click();
      await dlg.waitFor({ state: "detached" });
      await row.locator("details.more summary").click();
      await row.getByRole("button", { name: "Copy" }).waitFor();
      await row.locator("details.more summary").click();
    } finally {
      await page.setViewportSize({ width: 1360, height: 860 });
    }
  });

  await step("switch to Chinese and back", async () => {
    await go("jobs");
    await jobRow("e2e-cron").waitFor();
    await page.selectOption("#lang-switch", "zh");
    await page.locator("nav.side a[data-nav=jobs]", { hasText: "任务管理" }).waitFor();
    await page.locator("#jobs-table th", { hasText: "操作" }).waitFor();
    await shot("jobs-zh");
    // Server errors in Chinese, worded by the reason the server gives. A bad save
    // (INVALID_ARGUMENT) names each field by its label, with the server's English beside it.
    await go("jobs/new");
    await page.locator("#job-form").waitFor();
    await page.fill("#job-form input[name=name]", "");
    await page.fill("#job-form input[name=timeout_seconds]", "999999");
    await page.click("#save-job");
    const err = page.locator("#job-form-error");
    await err.filter({ hasText: "服务器原文" }).waitFor();
    const text = await err.textContent();
    check(text.startsWith("名称无效；任务超时时间无效") && text.includes("timeout_seconds: want"),
      `the error should name the fields in Chinese and keep the server's text: ${text}`);
    const nameErr = await page.textContent("#job-form .field-error[data-field=name]");
    check(nameErr.startsWith("名称无效：want "), `the name field should say it is not valid, and the server's why: ${nameErr}`);
    check(await page.locator("#job-form input[name=timeout_seconds].invalid").count() === 1, "the timeout field should be marked");
    // A job that does not exist (JOB_NOT_FOUND).
    const missing = await apiCall("GET", "/jobs/987654321");
    check(missing.status === 404 && missing.body.details?.[0]?.reason === "JOB_NOT_FOUND", `a missing job: ${JSON.stringify(missing)}`);
    await go("jobs/987654321");
    const notFound = (await view().locator("p.error", { hasText: "任务不存在" }).textContent()).trim();
    check(notFound.startsWith("任务不存在，可能已被删除。") && notFound.includes("服务器原文"), `a missing job's page: ${notFound}`);
    // A save based on a version someone else changed meanwhile (VERSION_CONFLICT).
    await go(`jobs/${cronID}`);
    await page.locator("#job-form input[name=name]").waitFor();
    const other = await apiCall("PATCH", `/jobs/${cronID}`, { author: "someone-else" });
    check(other.status === 200, `changing the job behind the form: ${JSON.stringify(other)}`);
    await page.click("#save-job");
    await err.filter({ hasText: "服务器原文" }).waitFor();
    const conflict = await err.textContent();
    check(conflict.startsWith("任务已被他人修改；请刷新后查看。"), `a stale save should say someone changed the job: ${conflict}`);
    const stale = await apiCall("PATCH", `/jobs/${cronID}`, { author: "e2e", version: 1 });
    check(stale.status === 409 && stale.body.details?.[0]?.reason === "VERSION_CONFLICT", `a stale save: ${JSON.stringify(stale)}`);
    // An answer with no ErrorInfo (a proxy's) is worded by its HTTP status.
    const proxy = await page.evaluate(async () => new (await import("/js/api.js")).ApiError(502, { message: "Bad Gateway" }).message);
    check(proxy.startsWith("服务暂不可用") && proxy.includes("Bad Gateway"), `a proxy's 502: ${proxy}`);
    await go("audit");
    await page.locator("#audit-table td.action", { hasText: "新增任务" }).first().waitFor();
    await go("jobs");
    await page.selectOption("#lang-switch", "en");
    await page.locator("nav.side a[data-nav=jobs]", { hasText: "Jobs" }).waitFor();
    await jobRow("e2e-cron").waitFor();
    await shot("jobs");
    await logout();
  });

  await step("a viewer reads but sees no edit controls", async () => {
    await login(VIEWER, VIEWER_PASSWORD);
    await go("jobs");
    await jobRow("e2e-cron").waitFor();
    check(await page.locator("#new-job").count() === 0, "a viewer should not see New job");
    for (const b of ["Run once", "Stop", "Start", "Copy", "Delete"]) {
      check(await page.locator("#jobs-table").getByRole("button", { name: b, exact: true }).count() === 0, `a viewer should not see ${b}`);
    }
    await jobRow("e2e-cron").getByRole("link", { name: "View" }).click();
    await page.locator("#job-form").waitFor();
    check(await page.locator("#save-job").count() === 0, "a viewer should not see Save");
    check(await page.locator("#job-form input[name=name]").isDisabled(), "a viewer's job form should be read-only");
    await go("runs");
    await page.locator("#runs-table").waitFor();
    check(await page.locator("#clear-runs").count() === 0, "a viewer should not see Clear runs");
    check(await page.locator("nav.side a[data-nav=users]").count() === 0, "a viewer should not see Users");
    await go("users");
    await page.locator("#view .forbidden").waitFor();
    // Everyone may change their own password.
    await page.click("#change-password");
    const dlg = page.locator("dialog[open]");
    await dlg.locator("input[name=old_password]").fill(VIEWER_PASSWORD);
    await dlg.locator("input[name=new_password]").fill(VIEWER_PASSWORD + "-2");
    await dlg.locator("input[name=new_password_again]").fill(VIEWER_PASSWORD + "-2");
    await dlg.getByRole("button", { name: "Save" }).click();
    await dlg.waitFor({ state: "detached" });
    await logout();
    await login(VIEWER, VIEWER_PASSWORD + "-2");
    await logout();
  });

  await step("an operator limited to one group cannot see another's", async () => {
    await login(OPERATOR, OPERATOR_PASSWORD);
    await go("jobs");
    await jobRow("e2e-cron").waitFor();
    await page.locator("#new-job").waitFor();
    check(await jobRow(OTHER_JOB).count() === 0, `an operator of group ${GROUP_ID} should not see ${OTHER_JOB}`);
    await go("executors");
    await page.locator("#groups-table").waitFor();
    check(await page.locator(`#groups-table tr[data-group="${OTHER_GROUP}"]`).count() === 0, `the operator should not see group ${OTHER_GROUP}`);
    await go(`jobs/${OTHER_JOB_ID}`);
    await page.locator("#view .forbidden").waitFor();
    await go(`runs?job_id=${OTHER_JOB_ID}`);
    await page.locator("#runs-table, #runs .error").first().waitFor();
    check(await page.locator("#runs-table tr[data-run]").count() === 0, "the operator should see no run of the other group's job");
    await logout();
  });

  check(problems.length === 0, "the browser reported problems:\n" + problems.join("\n"));
} catch (e) {
  failed = true;
  if (!(e instanceof Failure)) console.log(e.stack || e);
  else console.log(e.message);
} finally {
  await browser.close().catch(() => {});
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log(`${failed ? "FAILED" : "passed"} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(failed ? 1 : 0);
