// The schedule fields of the job and workflow forms: type, expression, time zone, misfire
// strategy, whether it fires on its schedule, and a live preview of the next fire times.
import { api } from "./api.js";
import { h, field, select, fmtTime, debounce } from "./dom.js";
import { t } from "./i18n.js";
import { SCHEDULE_TYPES, MISFIRES } from "./enums.js";
import { zone, browserZone } from "./tz.js";

const en = (v, def) => (v && !v.endsWith("_UNSPECIFIED") ? v : def);

// scheduleFields builds the fields for schedule ({type, expression, time_zone}), misfire and
// running. opts: ro (read only), types ([value, label] pairs; default every type), hint (under the
// expression), never (what the preview says of type NONE). It returns {el, inputs, scheduleOf,
// start}: inputs are named schedule.type, schedule.expression, schedule.time_zone,
// misfire_strategy and status, so a form can mark the fields a server error names; scheduleOf
// reads the schedule; start shows the fields for the type and the first preview.
export function scheduleFields(schedule, misfire, running, opts = {}) {
  const dis = { disabled: !!opts.ro };
  const viewZone = zone();
  const inputs = {
    type: select("schedule.type", opts.types || SCHEDULE_TYPES(), en(schedule?.type, "SCHEDULE_TYPE_CRON"), dis),
    expression: h("input", { name: "schedule.expression", value: schedule?.expression || "", class: "mono", ...dis }),
    time_zone: h("input", { name: "schedule.time_zone", value: schedule?.time_zone || "", placeholder: "UTC", list: "tz-list", ...dis }),
    misfire_strategy: select("misfire_strategy", MISFIRES(), en(misfire, "MISFIRE_STRATEGY_DO_NOTHING"), dis),
    running: h("input", { type: "checkbox", name: "status", checked: !!running, ...dis }),
  };
  const previewBox = h("ol", { class: "preview", id: "fire-preview", "aria-live": "polite" });
  const previewErr = h("p", { class: "error small", id: "preview-error" });
  const tzList = h("datalist", { id: "tz-list" }, [...new Set([viewZone, browserZone(), "UTC", "Asia/Shanghai", "Asia/Tokyo", "Asia/Singapore", "Europe/London", "Europe/Berlin", "America/New_York", "America/Los_Angeles"])].filter(Boolean).map((z) => h("option", { value: z })));

  const scheduleOf = () => ({
    type: inputs.type.value, expression: inputs.type.value === "SCHEDULE_TYPE_NONE" ? "" : inputs.expression.value.trim(),
    time_zone: inputs.time_zone.value.trim(),
  });
  const sync = () => {
    const type = inputs.type.value;
    inputs.expression.disabled = !!opts.ro || type === "SCHEDULE_TYPE_NONE";
    inputs.expression.placeholder = ({
      SCHEDULE_TYPE_CRON: "0 0/5 * * * ?", SCHEDULE_TYPE_FIX_RATE: "30s", SCHEDULE_TYPE_FIX_DELAY: "1m",
      SCHEDULE_TYPE_ONCE: new Date(Date.now() + 3600e3).toISOString().replace(/\.\d+Z$/, "Z"),
    })[type] || "";
    inputs.time_zone.closest(".field").hidden = type !== "SCHEDULE_TYPE_CRON";
  };
  const preview = debounce(async () => {
    previewErr.textContent = "";
    if (inputs.type.value === "SCHEDULE_TYPE_NONE") { previewBox.replaceChildren(h("li", { class: "muted", text: opts.never || "" })); return; }
    try {
      const r = await api("/schedules:preview", { method: "POST", body: { schedule: scheduleOf(), count: 5 } });
      const times = r.fire_times || [];
      previewBox.replaceChildren(...(times.length ? times.map((x) => h("li", { text: fmtTime(x) })) : [h("li", { class: "muted", text: t("No fire ahead.") })]));
    } catch (e) {
      previewBox.replaceChildren();
      previewErr.textContent = e.message;
    }
  }, 250);
  inputs.type.addEventListener("change", () => { sync(); preview(); });
  inputs.expression.addEventListener("input", preview);
  inputs.time_zone.addEventListener("input", preview);

  const el = h("div", { class: "schedule-grid" },
    h("div", { class: "form-grid" }, field(t("Schedule type"), inputs.type),
      field(t("Expression"), inputs.expression, opts.hint),
      field(t("Time zone"), inputs.time_zone), tzList, field(t("Misfire"), inputs.misfire_strategy),
      h("label", { class: "check" }, inputs.running, " ", t("Scheduled (start firing on save)"))),
    h("div", { class: "preview-box" }, h("h3", { text: t("Next fire times") }), previewBox, previewErr));
  return { el, inputs, scheduleOf, start: () => { sync(); preview(); } };
}
