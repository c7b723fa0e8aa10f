// The time zone the console shows times in: the browser's (the default), UTC, or an IANA zone the
// user picks. The choice is kept in this browser (localStorage) and used by every page; every time
// shown carries its zone's offset, so a time is never ambiguous.

const KEY = "jobmesh.tz";

// browserZone is the browser's own IANA zone.
export const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";

// validZone says whether the browser knows zone.
function validZone(zone) {
  try {
    new Intl.DateTimeFormat("en-US", { timeZone: zone });
    return true;
  } catch { return false; }
}

// zoneSetting is what the user chose: "" for the browser's zone, else a zone name ("UTC" included).
export function zoneSetting() {
  const v = localStorage.getItem(KEY) || "";
  return v && validZone(v) ? v : "";
}

// setZoneSetting keeps the user's choice ("" for the browser's zone).
export function setZoneSetting(v) {
  if (v && validZone(v)) localStorage.setItem(KEY, v);
  else localStorage.removeItem(KEY);
}

// zone is the IANA zone times are shown in now.
export const zone = () => zoneSetting() || browserZone();

// CURRENT_NAMES are today's names of zones that browsers list under an older one (ICU lists
// Asia/Calcutta, not Asia/Kolkata): both are valid, and people look for these.
const CURRENT_NAMES = ["Africa/Asmara", "America/Argentina/Buenos_Aires", "America/Nuuk", "Asia/Ho_Chi_Minh",
  "Asia/Kathmandu", "Asia/Kolkata", "Asia/Yangon", "Atlantic/Faroe", "Europe/Kyiv", "Pacific/Chuuk", "Pacific/Pohnpei"];

// zoneNames lists the zones a user may pick: UTC first, then every zone the browser knows, by name.
export function zoneNames() {
  const all = typeof Intl.supportedValuesOf === "function" ? Intl.supportedValuesOf("timeZone") : [];
  const names = new Set([...all, ...CURRENT_NAMES.filter(validZone), browserZone(), zoneSetting()].filter(Boolean));
  names.delete("UTC");
  return ["UTC", ...[...names].sort()];
}

const formatters = new Map();
function formatter(z) {
  let f = formatters.get(z);
  if (!f) {
    f = new Intl.DateTimeFormat("en-US", {
      timeZone: z, hourCycle: "h23", year: "numeric", month: "2-digit", day: "2-digit",
      hour: "2-digit", minute: "2-digit", second: "2-digit",
    });
    formatters.set(z, f);
  }
  return f;
}

// wall is the wall-clock time of d in zone z: {y, mo, d, h, mi, s}, all numbers.
function wall(date, z) {
  const p = {};
  for (const { type, value } of formatter(z).formatToParts(date)) p[type] = Number(value);
  return { y: p.year, mo: p.month, d: p.day, h: p.hour % 24, mi: p.minute, s: p.second };
}

// offsetMinutes is zone z's offset from UTC at date, in minutes (east positive).
function offsetMinutes(date, z) {
  const w = wall(date, z);
  const asUTC = Date.UTC(w.y, w.mo - 1, w.d, w.h, w.mi, w.s);
  return Math.round((asUTC - Math.floor(date.getTime() / 1000) * 1000) / 60000);
}

const p2 = (n) => String(n).padStart(2, "0");

// zoneLabel names the zone's offset at date: "UTC" for UTC itself, else "UTC+08:00".
export function zoneLabel(date, z = zone()) {
  if (z === "UTC" || z === "Etc/UTC") return "UTC";
  const off = offsetMinutes(date, z);
  const a = Math.abs(off);
  return `UTC${off < 0 ? "-" : "+"}${p2(Math.floor(a / 60))}:${p2(a % 60)}`;
}

// toDate reads a timestamp (RFC 3339 text, milliseconds or a Date); null when it is unset.
function toDate(ts) {
  if (!ts) return null;
  const d = ts instanceof Date ? ts : new Date(ts);
  return isNaN(d) || d.getTime() <= 0 ? null : d;
}

// formatTime shows a timestamp in the chosen zone with the zone's offset:
// "2026-11-22 08:00:00 UTC+08:00"; "—" when unset.
export function formatTime(ts) {
  const d = toDate(ts);
  if (!d) return "—";
  const z = zone();
  const w = wall(d, z);
  return `${w.y}-${p2(w.mo)}-${p2(w.d)} ${p2(w.h)}:${p2(w.mi)}:${p2(w.s)} ${zoneLabel(d, z)}`;
}

// hourMinute is "HH:MM" of a timestamp in the chosen zone (chart labels).
export function hourMinute(ts) {
  const d = toDate(ts);
  if (!d) return "";
  const w = wall(d, zone());
  return `${p2(w.h)}:${p2(w.mi)}`;
}

// toInput is the value of a datetime-local input showing date in the chosen zone.
export function toInput(date) {
  const w = wall(date, zone());
  return `${w.y}-${p2(w.mo)}-${p2(w.d)}T${p2(w.h)}:${p2(w.mi)}`;
}

// fromInput reads a datetime-local value as a wall-clock time in the chosen zone; null when empty
// or unreadable.
export function fromInput(v) {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?$/.exec(v || "");
  if (!m) return null;
  const z = zone();
  const asUTC = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
  // The offset depends on the instant; a second pass settles it around a change of offset.
  let t = asUTC - offsetMinutes(new Date(asUTC), z) * 60000;
  t = asUTC - offsetMinutes(new Date(t), z) * 60000;
  return new Date(t);
}
