// Server errors in the user's language. The server's messages are English; what it says in a
// stable form is translated instead: the gRPC code, the reason of a google.rpc.ErrorInfo (and of
// a field violation) when there is one, and the field a google.rpc.BadRequest names. The English
// text stays as the detail, so nothing the server said is lost.
import { t, lang } from "./i18n.js";

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

// FIELD_REASONS word what is wrong with a field, by the stable reason of its violation
// (google.rpc.BadRequest.FieldViolation.reason, or a google.rpc.ErrorInfo naming the field in
// its metadata). A reason missing here reads "is not valid".
const FIELD_REASONS = {
  REQUIRED: "is required",
  FIELD_REQUIRED: "is required",
  MISSING: "is required",
  TOO_LONG: "is too long",
  FIELD_TOO_LONG: "is too long",
  TOO_MANY: "has too many values",
  OUT_OF_RANGE: "is out of range",
  FIELD_OUT_OF_RANGE: "is out of range",
  INVALID_FORMAT: "is not in the expected format",
  UNKNOWN_VALUE: "has an unknown value",
  UNSUPPORTED: "is not supported",
  NOT_SUPPORTED: "is not supported",
};

// REASONS word a whole error by its stable reason (google.rpc.ErrorInfo.reason). A reason
// missing here falls back to the error's code.
const REASONS = {
  NOT_FOUND: "Not found.",
  ALREADY_EXISTS: "It exists already.",
  CONFLICT: "Someone changed this meanwhile; reload to see their change.",
  VERSION_CONFLICT: "Someone changed this meanwhile; reload to see their change.",
  STALE_VERSION: "Someone changed this meanwhile; reload to see their change.",
  FAILED_PRECONDITION: "Not possible in the current state.",
  PERMISSION_DENIED: "Your account may not do this.",
  UNAUTHENTICATED: "Please log in again.",
  UNAVAILABLE: "A service is not reachable now; try again shortly.",
  RESOURCE_EXHAUSTED: "Too many requests; try again later.",
  RATE_LIMITED: "Too many requests; try again later.",
};

// CODES words an error by its gRPC code when no reason says more.
const CODES = {
  1: "The request was cancelled.",
  2: "The server failed.",
  3: "Some input is not valid.",
  4: "The server took too long; try again.",
  5: "Not found.",
  6: "It exists already.",
  7: "Your account may not do this.",
  8: "Too many requests; try again later.",
  9: "Not possible in the current state.",
  10: "Someone changed this meanwhile; reload to see their change.",
  11: "A value is out of range.",
  12: "The server does not offer this.",
  13: "The server failed.",
  14: "A service is not reachable now; try again shortly.",
  16: "Please log in again.",
};
const HTTP = { 400: 3, 401: 16, 403: 7, 404: 5, 409: 10, 429: 8, 500: 13, 501: 12, 503: 14, 504: 4 };

const kind = (d) => String(d?.["@type"] || "").replace(/^.*\//, "");
const norm = (r) => String(r || "").trim().toUpperCase();

// describe reads a failed call's body: {code, message, details} as grpc-gateway writes it.
// It returns {message, detail, reason, fields}: message in the user's language (in English it
// is the server's own), detail the server's English text, fields each named field's message.
export function describe(httpStatus, body) {
  const english = body?.message || "";
  const code = Number(body?.code) || HTTP[httpStatus] || 2;
  let reason = "";
  let localized = "";
  const violations = [];
  const infos = [];
  for (const d of body?.details || []) {
    const k = kind(d);
    if (k === "google.rpc.ErrorInfo") infos.push(d);
    for (const v of d.field_violations || d.fieldViolations || []) {
      violations.push({ field: v.field, reason: norm(v.reason), localized: v.localized_message?.message || v.localizedMessage?.message || "" });
    }
    if (k === "google.rpc.LocalizedMessage" && String(d.locale || "").toLowerCase().startsWith(lang())) localized = d.message || "";
  }
  for (const d of infos) {
    reason ||= norm(d.reason);
    const f = d.metadata?.field;
    if (f && !violations.some((v) => fieldKey(v.field) === fieldKey(f))) violations.push({ field: f, reason: norm(d.reason), localized: "" });
  }
  const fields = {};
  for (const v of violations) {
    const why = v.localized || t(FIELD_REASONS[v.reason] || FIELD_REASONS[reason] || "is not valid");
    fields[v.field] = t("{field} {why}", { field: fieldLabel(v.field), why });
  }
  const head = localized || t(REASONS[reason] || CODES[code] || CODES[2]);
  const list = [...new Set(Object.values(fields))];
  let message;
  if (lang() === "en") message = english || head;
  else message = [list.length ? list.join(t("; ")) : head, english ? t("(server: {msg})", { msg: english }) : ""].filter(Boolean).join(" ");
  return { message, detail: english, reason, code, fields, violations };
}
