// Server errors in the user's language. Every error of the API carries a google.rpc.ErrorInfo
// whose reason is a stable word (internal/apierr): a specific one (JOB_NOT_FOUND,
// VERSION_CONFLICT, …) or else the name of its gRPC code (NOT_FOUND, UNAVAILABLE, …). The console
// words the error by that reason. Invalid input also names its fields (a google.rpc.BadRequest
// and the ErrorInfo's metadata.field), shown by their labels; what is wrong with a field is the
// server's English, which has no stable form to translate, so it is shown as it is. The server's
// message follows as the detail, so nothing the server said is lost.
import { t } from "./i18n.js";

// FIELDS names a request field (its proto path, without the request's wrapper message) by the
// console's label for it.
const FIELDS = {
  name: "Name", group_id: "Executor group", author: "Author", alarm_emails: "Alarm emails",
  schedule: "Schedule", "schedule.type": "Schedule type", "schedule.expression": "Expression", "schedule.time_zone": "Time zone",
  misfire_strategy: "Misfire", route_strategy: "Routing", block_strategy: "Block strategy", handler: "Handler", params: "Parameter",
  timeout_seconds: "Timeout", retry_count: "Retries", retry_backoff: "Retry backoff", retry_interval_ms: "Retry interval (ms)",
  glue_type: "Run mode", glue_source: "Source", glue_remark: "Remark", child_job_ids: "Child jobs", status: "Status",
  version: "Version", addresses: "Executors", id: "ID", job_id: "Job", trigger_type: "Trigger type",
  page_size: "Page size", page_token: "Page", skip: "Page", executor_address: "Executor",
  start_time: "From", end_time: "To", before_time: "Before", keep_newest: "Keep newest",
  username: "User name", password: "Password", old_password: "Current password", new_password: "New password",
  role: "Role", group_ids: "Executor groups", expire_time: "Expires", action: "Action", resource: "Object",
  app_name: "App name", title: "Title", address_type: "Address type", manual_addresses: "Manual addresses (one per line)",
  access_token: "Access token", count: "Count",
};

// WRAPPERS are the request messages' fields that hold the resource ("job.name" is "name").
const WRAPPERS = ["job.", "group.", "user.", "token.", "event."];

// fieldKey is a field path without its wrapper and list indexes: "job.child_job_ids[2]" is
// "child_job_ids".
export function fieldKey(path) {
  let p = String(path || "").replace(/\[\d+\]/g, "");
  for (const w of WRAPPERS) if (p.startsWith(w) && FIELDS[p.slice(w.length)]) { p = p.slice(w.length); break; }
  return p;
}

// fieldLabel is a field path in the user's language; an unknown field keeps its path.
export function fieldLabel(path) {
  const k = fieldKey(path);
  return FIELDS[k] ? t(FIELDS[k]) : k;
}

// REASONS words an error by its reason. It holds every reason the server sends and no other:
// the specific reasons (apierr.Reasons), then the gRPC code names (apierr.CodeReason).
// services/gateway's TestConsoleWordsEveryReason keeps it so, and every text translated in zh.js.
export const REASONS = {
  TOKEN_MISSING: "Please log in.",
  TOKEN_INVALID: "Your session has ended; please log in again.",
  LOGIN_FAILED: "Wrong user name or password.",
  EXECUTOR_TOKEN_INVALID: "The executor's credential is not its group's access token.",
  ROLE_REQUIRED: "Your role does not allow this.",
  GROUP_NOT_ALLOWED: "You were not given this executor group.",
  NOT_TOKEN_OWNER: "The API token belongs to another user.",
  INVALID_ARGUMENT: "Some input is not valid.",
  REQUEST_TOO_LARGE: "The request is too large.",
  JOB_NOT_FOUND: "The job does not exist; it may have been deleted.",
  GLUE_VERSION_NOT_FOUND: "The job has no such GLUE version.",
  RUN_NOT_FOUND: "The run does not exist; it may have been cleared.",
  EXECUTOR_GROUP_NOT_FOUND: "The executor group does not exist.",
  USER_NOT_FOUND: "The user does not exist.",
  API_TOKEN_NOT_FOUND: "The API token does not exist.",
  VERSION_CONFLICT: "Someone changed this job meanwhile; reload to see their change.",
  EXECUTOR_GROUP_EXISTS: "Another executor group has this app name.",
  LAST_ADMIN: "At least one admin must remain.",
  RUN_ENDED: "The run has already ended.",
  LOGIN_THROTTLED: "Too many failed attempts; try again later.",
  SERVER_BUSY: "The server is busy; try again shortly.",
  CANCELLED: "The request was cancelled.",
  UNKNOWN: "The server failed.",
  DEADLINE_EXCEEDED: "The server took too long; try again.",
  NOT_FOUND: "Not found.",
  ALREADY_EXISTS: "It exists already.",
  PERMISSION_DENIED: "Your account may not do this.",
  RESOURCE_EXHAUSTED: "Too many requests; try again later.",
  FAILED_PRECONDITION: "Not possible in the current state.",
  ABORTED: "Someone changed this meanwhile; reload to see their change.",
  OUT_OF_RANGE: "A value is out of range.",
  UNIMPLEMENTED: "The server does not offer this.",
  INTERNAL: "The server failed.",
  UNAVAILABLE: "A service is not reachable now; try again shortly.",
  DATA_LOSS: "The server lost data.",
  UNAUTHENTICATED: "Please log in again.",
};

// CODE_NAMES names the gRPC codes by number, for a body without an ErrorInfo (a proxy's answer,
// a broken connection): its code, else its HTTP status, picks the reason.
export const CODE_NAMES = [
  "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
  "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
  "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
];
const HTTP = { 400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 413: 3, 429: 8, 499: 1, 500: 13, 501: 12, 502: 14, 503: 14, 504: 4 };

const kind = (d) => String(d?.["@type"] || "").replace(/^.*\//, "");
// same: whether two texts say the same, but for case and a final full stop.
const same = (a, b) => a.trim().replace(/[.。]$/, "").toLowerCase() === b.trim().replace(/[.。]$/, "").toLowerCase();

// describe reads a failed call's body: {code, message, details} as the gateway writes it. It
// returns {message, detail, reason, code, fields}: message is the error worded by its reason in
// the user's language, or the fields found wrong by their labels, followed by the server's text;
// detail is the server's text (English); fields maps each field the server names (its path) to
// what is wrong with it, for showing beside that field.
export function describe(httpStatus, body) {
  const english = String(body?.message || "");
  const code = Number(body?.code) || HTTP[httpStatus] || 2;
  let reason = "";
  let named = "";
  const violations = [];
  for (const d of body?.details || []) {
    const k = kind(d);
    if (k === "google.rpc.ErrorInfo" && !reason) {
      reason = String(d.reason || "");
      named = String(d.metadata?.field || "");
    }
    if (k === "google.rpc.BadRequest") {
      for (const v of d.field_violations || d.fieldViolations || []) violations.push({ field: String(v.field || ""), why: String(v.description || "") });
    }
  }
  // A decoding error names its field in the ErrorInfo only.
  if (named && !violations.some((v) => fieldKey(v.field) === fieldKey(named))) violations.push({ field: named, why: "" });
  const fields = {};
  const bad = [];
  for (const v of violations) {
    const label = fieldLabel(v.field);
    bad.push(t("{field} is not valid", { field: label }));
    if (fields[v.field]) fields[v.field] += v.why ? t("; ") + v.why : "";
    else fields[v.field] = v.why ? t("{field} is not valid: {why}", { field: label, why: v.why }) : t("{field} is not valid", { field: label });
  }
  const head = t(REASONS[reason] || REASONS[CODE_NAMES[code]] || REASONS.UNKNOWN);
  const summary = bad.length ? [...new Set(bad)].join(t("; ")) : head;
  const message = english && !same(summary, english) ? summary + " " + t("(server: {msg})", { msg: english }) : summary;
  return { message, detail: english, reason, code, fields };
}
