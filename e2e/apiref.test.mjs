// Browser test of the console's API reference page, against a running stack. internal/uitest
// (TestAPIReference) starts the stack and runs this with the environment below; a non-zero exit
// fails that Go test.
//
//   JOBMESH_URL               gateway base URL, e.g. http://127.0.0.1:8080
//   JOBMESH_ADMIN_PASSWORD    password of "admin"
//   JOBMESH_OPERATIONS        how many operations the served OpenAPI document has
//   JOBMESH_SCREENSHOTS       where to write a screenshot of the page (optional)
//   CHROMIUM                  browser executable, default /usr/bin/chromium
import { chromium } from "playwright-core";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const env = (k) => {
  const v = process.env[k];
  if (!v) { console.error(`missing environment variable ${k}`); process.exit(2); }
  return v;
};
const BASE = env("JOBMESH_URL").replace(/\/$/, "");
const ADMIN_PASSWORD = env("JOBMESH_ADMIN_PASSWORD");
const OPERATIONS = Number(env("JOBMESH_OPERATIONS"));
const SHOTS = process.env.JOBMESH_SCREENSHOTS || "";

class Failure extends Error {}
const check = (ok, msg) => { if (!ok) throw new Failure(msg); };

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "jobmesh-apiref-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1360, height: 860 },
  locale: "en-US",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const page = browser.pages()[0] || (await browser.newPage());
page.setDefaultTimeout(30_000);
const problems = [];
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
page.on("console", (m) => { if (m.type() === "error") problems.push(`console error: ${m.text()}`); });
page.on("request", (r) => { if (!r.url().startsWith(BASE) && !r.url().startsWith("data:")) problems.push(`request outside the binary: ${r.url()}`); });

let failed = false;
try {
  await page.goto(BASE + "/");
  await page.fill("#login-form input[name=username]", "admin");
  await page.fill("#login-form input[name=password]", ADMIN_PASSWORD);
  await page.click("#login-form button[type=submit]");
  await page.locator("#who").waitFor();

  await page.click("nav.side a[data-nav=api]");
  await page.locator('[data-op="JobService_CreateJob"]').waitFor();
  const ops = await page.locator(".apiref-op").count();
  check(ops === OPERATIONS, `the page lists ${ops} operations, want the document's ${OPERATIONS}`);
  check((await page.textContent("#apiref-version")).includes("jobmesh API"), "the page should name the API and its version");
  const login = page.locator('[data-op="AuthService_Login"]');
  check(await login.locator(".badge", { hasText: "no token" }).count() === 1, "Login should be marked as needing no token");
  check(await page.locator('[data-op="JobService_CreateJob"] .badge', { hasText: "no token" }).count() === 0, "CreateJob should need a token");

  // An operation opens to its body, example and responses; a schema link opens the schema.
  const create = page.locator('[data-op="JobService_CreateJob"]');
  await create.locator("summary").click();
  await create.locator(".apiref-example").waitFor();
  check((await create.locator(".apiref-example").textContent()).includes("SCHEDULE_TYPE_CRON"), "CreateJob's example should be shown");
  for (const code of ["200", "400", "401", "403"]) {
    check(await create.locator(`tr[data-status="${code}"]`).count() === 1, `CreateJob should list its ${code} response`);
  }
  const update = page.locator('[data-op="JobService_UpdateJob"]');
  await update.locator("summary").click();
  check(await update.locator('tr[data-status="409"]').count() === 1, "UpdateJob should list its 409 response");
  check((await update.locator("summary .apiref-path").textContent()) === "/api/v1/jobs/{id}", "UpdateJob's path should read /api/v1/jobs/{id}");
  await create.locator('a[data-schema="Schedule"]').first().click();
  await page.locator("#schema-Schedule[open]").waitFor();
  check((await page.locator("#schema-Schedule").textContent()).includes("time_zone"), "the Schedule schema should list its fields");
  if (SHOTS) {
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.locator("#apiref-filter").scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(SHOTS, "api-reference.png") });
  }

  // The filter keeps the matching operations only.
  await page.fill("#apiref-filter", "jobs/{id}:trigger");
  await page.waitForFunction(() => document.querySelectorAll(".apiref-op:not([hidden])").length === 1);
  check(await page.locator('[data-op="JobService_TriggerJob"]:not([hidden])').count() === 1, "filtering by jobs/{id}:trigger should keep TriggerJob");
  await page.fill("#apiref-filter", "no operation is called this");
  await page.locator("text=No operation matches.").waitFor();

  await page.selectOption("#lang-switch", "zh");
  await page.locator("nav.side a[data-nav=api]", { hasText: "API 参考" }).waitFor();
  await page.selectOption("#lang-switch", "en");

  check(problems.length === 0, "the browser reported problems:\n" + problems.join("\n"));
  console.log("ok   the API reference lists, opens, links and filters the document's operations");
} catch (e) {
  failed = true;
  console.log(e instanceof Failure ? `FAIL ${e.message}` : e.stack || e);
  await page.screenshot({ path: path.join(SHOTS || os.tmpdir(), "apiref-failure.png"), fullPage: true }).catch(() => {});
} finally {
  await browser.close().catch(() => {});
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
