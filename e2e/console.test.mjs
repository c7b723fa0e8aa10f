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
    const secs = times.map((x) => Number(x.slice(-2)));
    check(secs.every((s) => s % 2 === 0), `every preview time should fall on an even second, got ${times}`);
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
    await running.getByRole("link", { name: "Log" }).click();
    await page.locator("#run-log", { hasText: "long job started with p1" }).waitFor();
    await page.locator("#run-status[data-status=RUNNING]").waitFor();
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
  });

  await step("switch to Chinese and back", async () => {
    await go("jobs");
    await jobRow("e2e-cron").waitFor();
    await page.selectOption("#lang-switch", "zh");
    await page.locator("nav.side a[data-nav=jobs]", { hasText: "任务管理" }).waitFor();
    await page.locator("#jobs-table th", { hasText: "操作" }).waitFor();
    await shot("jobs-zh");
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
