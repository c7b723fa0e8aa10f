// Hand-written SVG charts: stacked bars with axes, a legend and a tooltip per bar.

const NS = "http://www.w3.org/2000/svg";

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) if (c) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// niceMax rounds a maximum up to 1, 2 or 5 times a power of ten, for axis ticks.
function niceMax(v) {
  if (v <= 4) return 4;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// stackedBars draws bars, one per item of data ({label, values: {key: n}}), stacked by series
// ([{key, label, cls}]). labelEvery thins the x labels.
export function stackedBars(data, series, { height = 220, labelEvery = 1, title = "" } = {}) {
  const W = 640;
  const H = height;
  const m = { l: 40, r: 10, t: 12, b: 38 };
  const iw = W - m.l - m.r;
  const ih = H - m.t - m.b;
  const total = (d) => series.reduce((a, x) => a + (Number(d.values[x.key]) || 0), 0);
  const max = niceMax(Math.max(0, ...data.map(total)));
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": title });
  const y = (v) => m.t + ih - (v / max) * ih;
  for (let i = 0; i <= 4; i++) {
    const v = (max / 4) * i;
    svg.append(s("line", { x1: m.l, x2: W - m.r, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: m.l - 6, y: y(v) + 4, class: "axis", "text-anchor": "end" }, Number.isInteger(v) ? v : v.toFixed(1)));
  }
  const slot = iw / Math.max(1, data.length);
  const bw = Math.max(1, Math.min(40, slot * 0.7));
  data.forEach((d, i) => {
    const x = m.l + slot * i + (slot - bw) / 2;
    let acc = 0;
    const g = s("g", { class: "bar" });
    for (const ser of series) {
      const v = Number(d.values[ser.key]) || 0;
      if (!v) continue;
      g.append(s("rect", { x, y: y(acc + v), width: bw, height: Math.max(0.5, y(acc) - y(acc + v)), class: ser.cls }));
      acc += v;
    }
    g.append(s("rect", { x: m.l + slot * i, y: m.t, width: slot, height: ih, class: "hit" },
      s("title", {}, `${d.label}\n` + series.map((ser) => `${ser.label}: ${Number(d.values[ser.key]) || 0}`).join("\n"))));
    svg.append(g);
    if (i % labelEvery === 0) svg.append(s("text", { x: m.l + slot * i + slot / 2, y: H - m.b + 16, class: "axis", "text-anchor": "middle" }, d.label));
  });
  svg.append(s("line", { x1: m.l, x2: W - m.r, y1: y(0), y2: y(0), class: "base" }));
  let lx = m.l;
  for (const ser of series) {
    svg.append(s("rect", { x: lx, y: H - 14, width: 10, height: 10, class: ser.cls }), s("text", { x: lx + 14, y: H - 5, class: "legend" }, ser.label));
    lx += 24 + ser.label.length * 7.5;
  }
  return svg;
}
