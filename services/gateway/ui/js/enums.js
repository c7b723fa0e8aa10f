// The API's enum values, as [value, label] pairs for selects.
import { t } from "./i18n.js";

const pairs = (prefix, names) => names.map((n) => [prefix + n, n]);

export const SCHEDULE_TYPES = () => [
  ["SCHEDULE_TYPE_CRON", t("CRON (cron expression)")],
  ["SCHEDULE_TYPE_FIX_RATE", t("FIX_RATE (every interval)")],
  ["SCHEDULE_TYPE_FIX_DELAY", t("FIX_DELAY (interval after each run)")],
  ["SCHEDULE_TYPE_ONCE", t("ONCE (at one time)")],
  ["SCHEDULE_TYPE_NONE", t("NONE (manual only)")],
];
// GLUE_TYPES are the run modes the scheduler accepts for a job (services/scheduler validates
// glue_type). GLUE_GROOVY runs only on XXL-JOB executors, so a form offers it only for a group
// that has one (xxlGroup); the scheduler warns when a job is saved for a group that cannot run it.
export const GLUE_TYPES = () => [
  ["GLUE_TYPE_BEAN", t("BEAN (handler in the executor)")],
  ["GLUE_TYPE_GLUE_SHELL", "GLUE(Shell)"],
  ["GLUE_TYPE_GLUE_PYTHON", "GLUE(Python3)"],
  ["GLUE_TYPE_GLUE_PYTHON2", "GLUE(Python2)"],
  ["GLUE_TYPE_GLUE_NODEJS", "GLUE(Node.js)"],
  ["GLUE_TYPE_GLUE_PHP", "GLUE(PHP)"],
  ["GLUE_TYPE_GLUE_POWERSHELL", "GLUE(PowerShell)"],
  ["GLUE_TYPE_GLUE_GROOVY", t("GLUE(Java): Groovy on XXL-JOB executors")],
];

// xxlGroup reports whether an executor group has an XXL-JOB executor: an address that is the
// http(s) URL such an executor registers (or an operator typed), not an agent's host:port.
export const xxlGroup = (g) => (g?.addresses || []).some((a) => /^https?:\/\//.test(a));
// groovyFor is a glueOptions pick that offers GLUE_GROOVY only for a group with XXL-JOB executors.
export const groovyFor = (g) => (v) => v !== "GLUE_TYPE_GLUE_GROOVY" || xxlGroup(g);

// glueOptions are the run modes a job's form offers: the accepted ones, and a job's own mode
// when it is one no longer accepted (an imported Groovy job), so the form shows what it is.
export function glueOptions(current, pick = () => true) {
  const opts = GLUE_TYPES().filter(([v]) => pick(v));
  if (current && !current.endsWith("_UNSPECIFIED") && !opts.some(([v]) => v === current)) {
    opts.push([current, t("{mode} (not supported)", { mode: current.replace(/^GLUE_TYPE_/, "") })]);
  }
  return opts;
}
export const ROUTES = () => pairs("ROUTE_STRATEGY_", ["FIRST", "LAST", "ROUND", "RANDOM", "CONSISTENT_HASH", "LEAST_FREQUENTLY_USED", "LEAST_RECENTLY_USED", "FAILOVER", "BUSYOVER", "SHARDING_BROADCAST"]);
export const BLOCKS = () => [
  ["BLOCK_STRATEGY_SERIAL_EXECUTION", t("Serial (queue)")],
  ["BLOCK_STRATEGY_DISCARD_LATER", t("Discard later")],
  ["BLOCK_STRATEGY_COVER_EARLY", t("Cover early")],
];
export const MISFIRES = () => [
  ["MISFIRE_STRATEGY_DO_NOTHING", t("Do nothing")],
  ["MISFIRE_STRATEGY_FIRE_ONCE_NOW", t("Fire once now")],
];
export const BACKOFFS = () => [
  ["RETRY_BACKOFF_NONE", t("At once")],
  ["RETRY_BACKOFF_FIXED", t("Fixed interval")],
  ["RETRY_BACKOFF_EXPONENTIAL", t("Exponential")],
];
export const JOB_STATUSES = () => [["", t("All")], ["JOB_STATUS_RUNNING", t("Running")], ["JOB_STATUS_STOPPED", t("Stopped")]];
export const RUN_STATUSES = () => [["", t("All")], ...["RUNNING", "SUCCESS", "FAIL", "TIMEOUT", "KILLED", "SKIPPED"].map((s) => ["RUN_STATUS_" + s, t(s)])];
export const TRIGGER_TYPES = () => [["", t("All")], ...["MANUAL", "CRON", "RETRY", "PARENT", "API", "MISFIRE"].map((s) => ["TRIGGER_TYPE_" + s, triggerLabel("TRIGGER_TYPE_" + s)])];

// triggerLabel names a trigger type in the current language (MANUAL is also an address type, so
// trigger types have keys of their own).
export function triggerLabel(v) {
  const name = (v || "").replace(/^TRIGGER_TYPE_/, "");
  const k = "TRIGGER_" + name;
  const s = t(k);
  return s === k ? name : s;
}

// isScript says whether a GLUE type keeps its source in jobmesh.
export const isScript = (g) => !!g && g !== "GLUE_TYPE_BEAN" && g !== "GLUE_TYPE_UNSPECIFIED";
