// REST client for /api/v1: adds the session token, turns error bodies into ApiError, and reads
// grpc-gateway's newline-delimited JSON streams.
import { describe } from "./errors.js";

const KEY = "jobmesh.token";

// ApiError is a failed call: status is the HTTP status; message is in the user's language
// (errors.js), detail the server's English text (it names the field), fields maps each field the
// server found wrong (proto path) to why, in the user's language.
export class ApiError extends Error {
  constructor(status, body) {
    const d = describe(status, body || {});
    super(d.message || `HTTP ${status}`);
    this.status = status;
    this.code = d.code;
    this.reason = d.reason;
    this.detail = d.detail;
    this.fields = d.fields;
  }
}

// session holds the session token, kept in this browser's localStorage until logout.
export const session = {
  get token() { return localStorage.getItem(KEY) || ""; },
  set token(v) { if (v) localStorage.setItem(KEY, v); else localStorage.removeItem(KEY); },
};

function headers(json) {
  const hd = {};
  if (json) hd["Content-Type"] = "application/json";
  if (session.token) hd.Authorization = "Bearer " + session.token;
  return hd;
}

// query builds "?a=1&b=2" from an object, leaving out empty values.
export function query(params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "" || v === 0 || v === "0") continue;
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else q.set(k, v);
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

async function failure(res) {
  const body = await res.json().catch(() => ({}));
  if (res.status === 401) window.dispatchEvent(new CustomEvent("jobmesh:unauthenticated"));
  if (!body.message) body.message = res.statusText || `HTTP ${res.status}`;
  return new ApiError(res.status, body);
}

// api calls path under /api/v1 and returns the decoded JSON answer.
export async function api(path, { method = "GET", body } = {}) {
  const res = await fetch("/api/v1" + path, {
    method,
    headers: headers(body !== undefined),
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  if (!res.ok) throw await failure(res);
  return res.json().catch(() => ({}));
}

// latest returns a reader like api() whose calls settle only while they are its newest: a call
// answered after a later one was made never settles, so a list whose filter changed twice
// quickly cannot show the answer to the first filter over the second's.
export function latest() {
  let seq = 0;
  return (path, opts) => {
    const mine = ++seq;
    const never = new Promise(() => {});
    return api(path, opts).then((r) => (mine === seq ? r : never), (e) => (mine === seq ? Promise.reject(e) : never));
  };
}

// stream follows a server stream: it yields each message's result until the server ends the
// response or signal aborts it.
export async function* stream(path, signal) {
  const res = await fetch("/api/v1" + path, { headers: headers(false), signal });
  if (!res.ok) throw await failure(res);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        const msg = JSON.parse(line);
        if (msg.error) throw new ApiError(500, { ...msg.error, message: msg.error.message || "stream error" });
        yield msg.result || msg;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// uiConfig is the gateway's configuration for the UI ({trace_url_template}), read once.
let uiConfigP;
export function uiConfig() {
  uiConfigP ??= fetch("/api/ui-config").then((r) => (r.ok ? r.json() : {})).catch(() => ({}));
  return uiConfigP;
}

// traceURL is the link of a trace id through the configured template; empty without one.
export function traceURL(template, traceID) {
  return template && traceID ? template.replaceAll("{trace_id}", encodeURIComponent(traceID)) : "";
}
