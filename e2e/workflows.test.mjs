// Browser test of the console's workflows page, against a running stack. internal/uitest
// (TestWorkflows) starts the stack, makes the jobs, and runs this with the environment below; a
// non-zero exit fails that Go test.
//
//   JOBMESH_URL               gateway base URL, e.g. http://127.0.0.1:8080
//   JOBMESH_ADMIN_PASSWORD    password of "admin"
//   JOBMESH_GROUP_ID          the local agent's executor group
//   JOBMESH_JOBS              {"name": "id"} of that group's jobs: wf-a, wf-b, wf-c, wf-d (succeed),
//                             wf-fail (fails), wf-sleep (runs for minutes)
//   JOBMESH_SCREENSHOTS       where to write screenshots of the editor and an instance (optional)
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
const GROUP_ID = env("JOBMESH_GROUP_ID");
const JOBS = JSON.parse(env("JOBMESH_JOBS"));
const SHOTS = process.env.JOBMESH_SCREENSHOTS || "";
const T = 30_000; // generous wait for anything the UI shows
const RUN = 90_000; // wait for runs on the local agent

class Failure extends Error {}
const check = (ok, msg) => { if (!ok) throw new Failure(msg); };

const profile = fs.mkdtempSync(path.join(os.tmpdir(), "jobmesh-wf-"));
const browser = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1360, height: 900 },
  locale: "en-US",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const page = browser.pages()[0] || (await browser.newPage());
page.setDefaultTimeout(T);
const problems = [];
page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
// The browser logs every 4xx answer; the UI handles those, so only other errors count.
page.on("console", (m) => { if (m.type() === "error" && !/Failed to load resource: the server responded with a status of 4\d\d/.test(m.text())) problems.push(`console error: ${m.text()}`); });
page.on("request", (r) => { if (!r.url().startsWith(BASE) && !r.url().startsWith("data:")) problems.push(`request outside the binary: ${r.url()}`); });

async function shot(name) {
  if (!SHOTS) return;
  fs.mkdirSync(SHOTS, { recursive: true });
  await page.evaluate(() => document.getElementById("toasts")?.replaceChildren());
  await page.locator("svg.wf-graph").scrollIntoViewIfNeeded();
  await page.screenshot({ path: path.join(SHOTS, name + ".png") });
}

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    const out = path.join(SHOTS || os.tmpdir(), "workflows-failure.png");
    await page.screenshot({ path: out, fullPage: true }).catch(() => {});
    console.log(`     screenshot of the failure: ${out}`);
    console.log(`     page text: ${(await page.textContent("body").catch(() => "")).replace(/\s+/g, " ").slice(0, 1500)}`);
    throw e;
  }
}

const go = (hash) => page.goto(`${BASE}/#/${hash}`);
let killedView; // the URL of the instance the kill step ends
const node = (id) => page.locator(`svg.wf-graph g.node[data-node="${id}"]`);
const edge = (from, to) => page.locator(`svg.wf-graph g.edge[data-from="${from}"][data-to="${to}"]`);
const confirm = () => page.locator("dialog[open] button.primary").click();

// apiCall calls the REST API from the page as the logged-in user: {status, body}.
const apiCall = (method, p, body) => page.evaluate(async ([method, p, body]) => {
  const res = await fetch("/api/v1" + p, {
    method, body: body === undefined ? undefined : JSON.stringify(body),
    headers: { Authorization: "Bearer " + localStorage.getItem("jobmesh.token"), "Content-Type": "application/json" },
  });
  return { status: res.status, body: await res.json().catch(() => ({})) };
}, [method, p, body]);

// addNode adds a node for a job from the toolbar; the node is named after the job.
async function addNode(job) {
  await page.selectOption("#add-job", JOBS[job]);
  await page.click("#add-node");
  await node(job).waitFor();
}

// dragConnect draws an edge by dragging from a node's port to another node.
async function dragConnect(from, to) {
  const port = await node(from).locator("circle.port").boundingBox();
  const target = await node(to).locator("rect.box").boundingBox();
  await page.mouse.move(port.x + port.width / 2, port.y + port.height / 2);
  await page.mouse.down();
  await page.mouse.move(target.x + target.width / 2, target.y + target.height / 2, { steps: 8 });
  await page.mouse.up();
  await edge(from, to).waitFor({ state: "attached" }); // a level edge has no height: "visible" never holds
}

// panelConnect draws an edge from the selected node's panel.
async function panelConnect(from, to, condition) {
  await clickNode(from);
  await page.selectOption("#connect-to", to);
  if (condition) await page.selectOption("#connect-condition", condition);
  await page.click("#add-edge");
  await edge(from, to).waitFor({ state: "attached" }); // a level edge has no height: "visible" never holds
}

async function clickNode(id) {
  await node(id).locator("text.name").click();
  await page.waitForFunction((id) => document.querySelector("#node-form input[name='node.id']")?.value === id, id);
}

// instanceReaches waits until the instance view shows status.
const instanceReaches = (status, timeout = RUN) => page.locator(`#instance-status[data-status="${status}"]`).waitFor({ timeout });

let failed = false;
let wfID = "";
let dY = 0; // where wf-d was dragged to
try {
  await step("log in and open the workflows page from the navigation", async () => {
    await page.goto(BASE + "/");
    await page.fill("#login-form input[name=username]", "admin");
    await page.fill("#login-form input[name=password]", ADMIN_PASSWORD);
    await page.click("#login-form button[type=submit]");
    await page.locator("#who").waitFor();
    await page.click("nav.side a[data-nav=workflows]");
    await page.locator("#workflows-table").waitFor();
    check(await page.locator("nav.side a[data-nav=workflows].active").count() === 1, "the Workflows entry should be marked as the current page");
  });

  await step("draw a diamond in the editor: nodes from the group's jobs, edges dragged and added from the panel", async () => {
    await page.click("#new-workflow");
    await page.locator("#wf-form").waitFor();
    await page.selectOption("#wf-form select[name=group_id]", GROUP_ID);
    await page.fill("#wf-form input[name=name]", "diamond");
    await page.fill("#wf-form textarea[name=params]", "bucket=exports");
    await page.fill("#wf-form input[name=alarm_emails]", "data@example.com, ops@example.com");
    for (const j of ["wf-a", "wf-b", "wf-c", "wf-d"]) await addNode(j);
    check(await page.locator("svg.wf-graph g.node").count() === 4, "the graph should hold the 4 nodes added");
    // A node with no edges is a root: a graph of four roots is valid.
    await page.locator("#wf-valid").waitFor();

    await dragConnect("wf-a", "wf-b");
    // The edge just drawn is selected: its condition is set in the panel.
    await page.selectOption("#edge-condition", "EDGE_CONDITION_ALWAYS");
    await page.locator('svg.wf-graph g.edge[data-from="wf-a"][data-to="wf-b"][data-condition="EDGE_CONDITION_ALWAYS"]').waitFor({ state: "attached" });
    check(await edge("wf-a", "wf-b").locator("text.cond").textContent() === "always", "an ALWAYS edge should be labelled so");
    await panelConnect("wf-a", "wf-c");
    await dragConnect("wf-b", "wf-d");
    await panelConnect("wf-c", "wf-d");
    check(await page.locator("svg.wf-graph g.edge").count() === 4, "the diamond should have 4 edges");
    await page.locator("#wf-valid").waitFor();

    // Move the join below the others: its place is stored with the workflow.
    const yOf = async () => Number((await node("wf-d").getAttribute("transform")).match(/translate\([\d.]+,\s*([\d.]+)\)/)[1]);
    const y0 = await yOf();
    const box = await node("wf-d").locator("rect.box").boundingBox();
    await page.mouse.move(box.x + 20, box.y + 20);
    await page.mouse.down();
    await page.mouse.move(box.x + 20, box.y + 140, { steps: 6 });
    await page.mouse.up();
    dY = await yOf();
    check(dY - y0 >= 100 && dY - y0 <= 140, `wf-d should have moved down by about 120 px: from y ${y0} to ${dY}`);
  });

  await step("a cycle is refused while editing, naming its node, and the graph marks it", async () => {
    await panelConnect("wf-d", "wf-a");
    await page.locator("#wf-violations li.violation", { hasText: "cycle" }).waitFor();
    check(await page.locator("svg.wf-graph g.node.invalid").count() === 1, "the node named by the cycle violation should be marked");
    await shot("workflow-editor");
    // The edge just added is selected: delete it, and the workflow is valid again.
    await page.click("#delete-edge");
    await page.locator("#wf-valid").waitFor();
    check(await page.locator("svg.wf-graph g.node.invalid").count() === 0, "no node should stay marked once the cycle is gone");
  });

  await step("save the workflow: its graph, conditions and places are stored", async () => {
    await page.click("#save-workflow");
    await page.waitForURL(/#\/workflows\/\d+$/);
    wfID = page.url().match(/#\/workflows\/(\d+)$/)[1];
    await page.locator("#trigger-workflow").waitFor();
    const r = await apiCall("GET", `/workflows/${wfID}`);
    check(r.status === 200, `GET /workflows/${wfID}: ${r.status}`);
    const w = r.body.workflow;
    check(w.name === "diamond" && String(w.group_id) === GROUP_ID, `stored name/group: ${w.name}/${w.group_id}`);
    check(w.nodes.map((n) => `${n.id}:${n.job_id}`).join(",") === ["wf-a", "wf-b", "wf-c", "wf-d"].map((j) => `${j}:${JOBS[j]}`).join(","), `stored nodes: ${JSON.stringify(w.nodes)}`);
    const edges = w.edges.map((e) => `${e.from}>${e.to}:${(e.condition || "").replace("EDGE_CONDITION_", "")}`).sort().join(",");
    check(edges === "wf-a>wf-b:ALWAYS,wf-a>wf-c:ON_SUCCESS,wf-b>wf-d:ON_SUCCESS,wf-c>wf-d:ON_SUCCESS", `stored edges: ${edges}`);
    const d = w.nodes.find((n) => n.id === "wf-d");
    check(Number(d.y) === dY, `wf-d's place should be stored: y = ${d.y}, want ${dY}`);
    check(w.params?.bucket === "exports", `stored params: ${JSON.stringify(w.params)}`);
    check((w.alarm_emails || []).join(",") === "data@example.com,ops@example.com", `stored alarm emails: ${JSON.stringify(w.alarm_emails)}`);
    // The list shows it.
    await go("workflows?group_id=" + GROUP_ID);
    await page.locator('#workflows-table tr[data-workflow="diamond"]').waitFor();
  });

  await step("run it: the instance view shows every node reach SUCCESS, in the graph and the table", async () => {
    await go(`workflows/${wfID}`);
    await page.click("#trigger-workflow");
    await page.fill("dialog[open] textarea[name=params]", "day=2026-11-28");
    await confirm();
    await page.waitForURL(/#\/workflows\/instances\/w\d+-\d+$/);
    await instanceReaches("SUCCESS");
    check(await page.locator('#nodes-table tr[data-status="SUCCESS"]').count() === 4, "the 4 nodes should be SUCCESS in the table");
    await page.waitForFunction(() => document.querySelectorAll('svg.wf-graph g.node[data-status="SUCCESS"]').length === 4);
    check((await node("wf-d").locator("text.state").textContent()).startsWith("SUCCESS"), "a node's label should say its status");
    check((await page.textContent("#instance-info")).includes("day=2026-11-28"), "the instance's params should be shown");
    await shot("workflow-instance");
    // Its instances list has it.
    const inst = decodeURIComponent(page.url().split("/").pop());
    await go(`workflows/${wfID}/instances`);
    await page.locator(`#instances-table tr[data-instance="${inst}"][data-status="SUCCESS"]`).waitFor();
    await page.click(`#instances-table tr[data-instance="${inst}"] a`);
    await instanceReaches("SUCCESS");
  });

  await step("open a node's run and log from the instance view", async () => {
    const trig = await page.locator('#nodes-table tr[data-node="wf-d"] a.run-link').getAttribute("title");
    check(/^\d+-\d+-0-0-w\d+\.3$/.test(trig), `wf-d's run id should be its trigger id, got ${trig}`);
    await page.click('#nodes-table tr[data-node="wf-d"] a.log-link');
    await page.locator('#run-status[data-status="SUCCESS"]').waitFor({ timeout: RUN });
    check(page.url().endsWith("#/runs/" + encodeURIComponent(trig)), `the run page should be the node's run: ${page.url()}`);
    await page.locator("#run-log .line", { hasText: "d" }).first().waitFor();
    await page.goBack();
    // A node in the graph links to its run too.
    await node("wf-b").click();
    await page.waitForURL(/#\/runs\/.*-w\d+\.1$/);
    await page.locator("#run-info").waitFor();
  });

  await step("edit the workflow: a new version, the instance that ran keeps the old one", async () => {
    const inst = (await apiCall("GET", `/workflow-instances?workflow_id=${wfID}`)).body.instances[0];
    await go(`workflows/${wfID}`);
    await node("wf-c").waitFor();
    await clickNode("wf-c");
    await page.uncheck("#node-form input[name='node.enabled']");
    await page.locator('svg.wf-graph g.node.disabled[data-node="wf-c"]').waitFor();
    await page.locator("#wf-valid").waitFor();
    await page.click("#save-workflow");
    await page.locator("#view .page-head", { hasText: "version 2" }).waitFor();
    const w = (await apiCall("GET", `/workflows/${wfID}`)).body.workflow;
    check(String(w.version) === "2", `version after the edit: ${w.version}`);
    check(w.nodes.find((n) => n.id === "wf-c").enabled === false, "wf-c should be stored disabled");
    const again = (await apiCall("GET", `/workflow-instances/${encodeURIComponent(inst.id)}`)).body.instance;
    check(String(again.version) === "1" && again.workflow.nodes.find((n) => n.id === "wf-c").enabled !== false,
      "the instance that ran should keep version 1's graph");
  });

  await step("a failing instance: retry it from its failed node", async () => {
    const r = await apiCall("POST", "/workflows", {
      group_id: GROUP_ID, name: "fails", schedule: { type: "SCHEDULE_TYPE_NONE" },
      nodes: [{ id: "F", job_id: JOBS["wf-fail"] }, { id: "G", job_id: JOBS["wf-a"] }], edges: [{ from: "F", to: "G" }],
    });
    check(r.status === 200, `create "fails": ${r.status} ${JSON.stringify(r.body)}`);
    await go(`workflows/${r.body.workflow.id}/instances`);
    await page.click("#trigger-workflow");
    await confirm();
    await instanceReaches("FAILED");
    // Made with the API, without places: the view lays the graph out itself.
    const f = await node("F").getAttribute("transform");
    const g = await node("G").getAttribute("transform");
    check(f !== g, `F and G should be drawn apart (${f}, ${g})`);
    await page.locator('#nodes-table tr[data-node="F"][data-status="FAILED"]').waitFor();
    await page.locator('#nodes-table tr[data-node="G"][data-status="SKIPPED"]').waitFor();
    check(await page.locator("#kill-instance").count() === 0, "an ended instance should not offer Kill");

    await page.click("#retry-instance");
    await confirm();
    // Attempt 1 runs, and fails again.
    await page.locator('#nodes-table tr[data-node="F"][data-status="FAILED"] td:nth-child(4)', { hasText: "1" }).waitFor({ timeout: RUN });
    await instanceReaches("FAILED");
    const trig = await page.locator('#nodes-table tr[data-node="F"] a.run-link').getAttribute("title");
    check(/-0-1-w\d+\.0$/.test(trig), `F's run after the retry should be attempt 1: ${trig}`);
  });

  await step("mark a running node done: the node after it runs; kill a running instance", async () => {
    const r = await apiCall("POST", "/workflows", {
      group_id: GROUP_ID, name: "sleeps", schedule: { type: "SCHEDULE_TYPE_NONE" },
      nodes: [{ id: "S", job_id: JOBS["wf-sleep"] }, { id: "G", job_id: JOBS["wf-a"] }], edges: [{ from: "S", to: "G" }],
    });
    check(r.status === 200, `create "sleeps": ${r.status} ${JSON.stringify(r.body)}`);
    await go("workflows?group_id=" + GROUP_ID);
    await page.click('#workflows-table tr[data-workflow="sleeps"] button:has-text("Run once")');
    await confirm();
    await page.locator('#nodes-table tr[data-node="S"][data-status="RUNNING"]').waitFor({ timeout: RUN });
    await page.locator('svg.wf-graph g.node[data-node="S"][data-status="RUNNING"]').waitFor();
    await page.click('#nodes-table tr[data-node="S"] button.mark-done');
    await confirm();
    await instanceReaches("SUCCESS");
    await page.locator('#nodes-table tr[data-node="G"][data-status="SUCCESS"]').waitFor();
    check((await page.textContent('#nodes-table tr[data-node="S"]')).includes("marked done by hand"), "S should say it was marked done by hand");

    await go(`workflows/${r.body.workflow.id}/instances`);
    await page.click("#trigger-workflow");
    await confirm();
    await page.locator('#nodes-table tr[data-node="S"][data-status="RUNNING"]').waitFor({ timeout: RUN });
    await page.click("#kill-instance");
    await confirm();
    await instanceReaches("KILLED");
    await page.locator('#nodes-table tr[data-node="S"][data-status="KILLED"]').waitFor();
    check(await page.locator("#retry-instance").count() === 1, "a killed instance should offer Retry");
    killedView = page.url();
  });

  await step("the dashboard counts today's workflow instances by status", async () => {
    await go("dashboard");
    const card = page.locator("#dashboard-cards [data-stat=wf-instances]");
    await card.locator(".stat-detail", { hasText: /KILLED [1-9]/ }).waitFor();
    const total = Number(await card.locator(".stat-value").textContent());
    check(total >= 2, `the card should count today's instances (at least the killed one and one that succeeded), got ${total}`);
    check(/Success [1-9]/.test(await card.locator(".stat-detail").textContent()), "the card should count the instances that succeeded");
    await page.goto(killedView);
    await instanceReaches("KILLED");
  });

  await step("the page speaks Chinese", async () => {
    await page.selectOption("#lang-switch", "zh");
    await page.locator("nav.side a[data-nav=workflows]", { hasText: "工作流" }).waitFor();
    await page.locator("#instance-status", { hasText: "已终止" }).waitFor();
    await page.selectOption("#lang-switch", "en");
  });

  check(problems.length === 0, "the browser reported problems:\n" + problems.join("\n"));
} catch (e) {
  failed = true;
  if (!(e instanceof Failure)) console.log(e.stack || e);
} finally {
  await browser.close().catch(() => {});
  fs.rmSync(profile, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
