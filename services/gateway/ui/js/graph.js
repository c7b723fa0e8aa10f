// The workflow graph drawn as SVG: nodes as boxes, edges as arrows coloured by their condition.
// The editor moves nodes and draws edges by dragging; the instance view colours each node by its
// status. Hand-written: nothing is loaded from outside the binary.
import { t } from "./i18n.js";

const NS = "http://www.w3.org/2000/svg";
// Node box size, the grid nodes snap to, and the space around the drawing.
export const NODE_W = 170;
export const NODE_H = 56;
const GRID = 10;
const PAD = 30;

function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

// CONDITIONS are the edge conditions with their short labels.
export const CONDITIONS = () => [
  ["EDGE_CONDITION_ON_SUCCESS", t("on success")],
  ["EDGE_CONDITION_ON_FAILURE", t("on failure")],
  ["EDGE_CONDITION_ALWAYS", t("always")],
];
// condOf is an edge's condition, ON_SUCCESS when unset.
export const condOf = (e) => (e.condition && e.condition !== "EDGE_CONDITION_UNSPECIFIED" ? e.condition : "EDGE_CONDITION_ON_SUCCESS");
const condLabel = (c) => (CONDITIONS().find(([v]) => v === c) || [c, c])[1];

// layout places nodes in columns by their depth in the graph (the longest path from a root), for
// graphs stored without positions (made with the API or the CLI). Nodes on a cycle go last.
export function layout(nodes, edges) {
  const ids = nodes.map((n) => n.id);
  const ins = new Map(ids.map((id) => [id, []]));
  for (const e of edges) if (ins.has(e.to) && ins.has(e.from)) ins.get(e.to).push(e.from);
  const depth = new Map();
  const visiting = new Set();
  const d = (id) => {
    if (depth.has(id)) return depth.get(id);
    if (visiting.has(id)) return 0; // a cycle: cut it here
    visiting.add(id);
    const v = Math.max(-1, ...ins.get(id).map(d)) + 1;
    visiting.delete(id);
    depth.set(id, v);
    return v;
  };
  const rows = new Map();
  for (const n of nodes) {
    const c = d(n.id);
    const r = rows.get(c) || 0;
    rows.set(c, r + 1);
    n.x = PAD + c * (NODE_W + 60);
    n.y = PAD + r * (NODE_H + 30);
  }
}

// needsLayout says whether nodes were stored without places of their own (two on one spot).
export function needsLayout(nodes) {
  return new Set(nodes.map((n) => `${Number(n.x) || 0},${Number(n.y) || 0}`)).size < nodes.length;
}

// graphView draws a workflow graph in an <svg>. opts.onSelect({kind: "node"|"edge", index} or
// null) is called as a node or an edge is clicked; opts.editable turns on dragging nodes
// (opts.onMoved(index)) and drawing edges from a node's port (the dot on its right) to another
// node (opts.onConnect(from, to)). opts.nodeInfo(node, index) gives {sub, status, label, href, title} to draw: a second
// line, a status class and its word, a link. render(nodes, edges, deco) draws; deco holds
// selected ({kind, index}) and bad ({nodes: Set, edges: Set} of indexes to mark invalid).
export function graphView(opts = {}) {
  const svg = s("svg", { class: "wf-graph" + (opts.editable ? " editable" : ""), role: "img", "aria-label": opts.label || t("Workflow graph") });
  const defs = s("defs");
  for (const c of ["ON_SUCCESS", "ON_FAILURE", "ALWAYS", "TEMP"]) {
    defs.append(s("marker", { id: "wf-arrow-" + c, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 5, markerHeight: 5, orient: "auto-start-reverse", class: "arrow " + c },
      s("path", { d: "M0,0 L10,5 L0,10 z" })));
  }
  const gEdges = s("g", { class: "edges" });
  const gNodes = s("g", { class: "nodes" });
  const gTemp = s("g", { class: "temp" });
  svg.append(defs, gEdges, gNodes, gTemp);
  let nodes = [];
  let edges = [];
  let deco = {};
  const nodeEls = [];

  const at = (n) => ({ x: Number(n.x) || 0, y: Number(n.y) || 0 });
  const byId = (id) => nodes.find((n) => n.id === id);
  // pt is a pointer event's place in the drawing's coordinates.
  const pt = (ev) => {
    const p = svg.createSVGPoint();
    p.x = ev.clientX;
    p.y = ev.clientY;
    return p.matrixTransform(svg.getScreenCTM().inverse());
  };
  const curve = (x1, y1, x2, y2) => {
    const dx = Math.max(40, Math.abs(x2 - x1) / 2);
    return `M${x1},${y1} C${x1 + dx},${y1} ${x2 - dx},${y2} ${x2},${y2}`;
  };
  // route draws an edge between two boxes: right side to left side when the target is to the
  // right, left to right when it is to the left on the same row, else bottom to top (or top to
  // bottom), so that no edge loops out of the drawing. It returns the path and its middle.
  const route = (p, q) => {
    let a;
    let b;
    let vertical = false;
    if (q.x >= p.x + NODE_W + 20) { a = [p.x + NODE_W, p.y + NODE_H / 2]; b = [q.x, q.y + NODE_H / 2]; }
    else if (q.x + NODE_W + 20 <= p.x && Math.abs(q.y - p.y) < NODE_H) { a = [p.x, p.y + NODE_H / 2]; b = [q.x + NODE_W, q.y + NODE_H / 2]; }
    else if (q.y >= p.y) { a = [p.x + NODE_W / 2, p.y + NODE_H]; b = [q.x + NODE_W / 2, q.y]; vertical = true; }
    else { a = [p.x + NODE_W / 2, p.y]; b = [q.x + NODE_W / 2, q.y + NODE_H]; vertical = true; }
    const mid = [(a[0] + b[0]) / 2, (a[1] + b[1]) / 2];
    if (!vertical) {
      const dx = Math.max(40, Math.abs(b[0] - a[0]) / 2) * Math.sign(b[0] - a[0]);
      return { d: `M${a[0]},${a[1]} C${a[0] + dx},${a[1]} ${b[0] - dx},${b[1]} ${b[0]},${b[1]}`, mid };
    }
    const dy = Math.max(30, Math.abs(b[1] - a[1]) / 2) * (b[1] >= a[1] ? 1 : -1);
    return { d: `M${a[0]},${a[1]} C${a[0]},${a[1] + dy} ${b[0]},${b[1] - dy} ${b[0]},${b[1]}`, mid };
  };

  function size() {
    let w = 600;
    let hgt = 240;
    for (const n of nodes) {
      const { x, y } = at(n);
      w = Math.max(w, x + NODE_W + PAD + (opts.editable ? 200 : 0));
      hgt = Math.max(hgt, y + NODE_H + PAD + (opts.editable ? 120 : 0));
    }
    svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
    svg.setAttribute("width", w);
    svg.setAttribute("height", hgt);
  }

  function drawEdges() {
    gEdges.replaceChildren();
    edges.forEach((e, i) => {
      const a = byId(e.from);
      const b = byId(e.to);
      if (!a || !b) return; // a dangling edge: validation names it
      const p = at(a);
      const q = at(b);
      const c = condOf(e).replace("EDGE_CONDITION_", "");
      const { d, mid } = route(p, q);
      const sel = deco.selected?.kind === "edge" && deco.selected.index === i;
      const g = s("g", {
        class: `edge ${c}` + (sel ? " selected" : "") + (deco.bad?.edges?.has(i) ? " invalid" : ""),
        "data-edge": i, "data-from": e.from, "data-to": e.to, "data-condition": condOf(e),
      },
      s("path", { class: "line", d, "marker-end": `url(#wf-arrow-${c})` }),
      opts.onSelect ? s("path", { class: "hit", d }) : null,
      c !== "ON_SUCCESS" ? s("text", { class: "cond", x: mid[0], y: mid[1] - 6, "text-anchor": "middle" }, condLabel(condOf(e))) : null);
      if (opts.onSelect) g.addEventListener("pointerdown", (ev) => { ev.stopPropagation(); opts.onSelect({ kind: "edge", index: i }); });
      gEdges.append(g);
    });
  }

  function drawNodes() {
    gNodes.replaceChildren();
    nodeEls.length = 0;
    nodes.forEach((n, i) => {
      const { x, y } = at(n);
      const info = opts.nodeInfo?.(n, i) || {};
      const sel = deco.selected?.kind === "node" && deco.selected.index === i;
      const g = s("g", {
        class: "node" + (n.enabled === false ? " disabled" : "") + (info.status ? " st-" + info.status : "") + (sel ? " selected" : "") + (deco.bad?.nodes?.has(i) ? " invalid" : ""),
        transform: `translate(${x},${y})`, "data-node": n.id, "data-status": info.status || null, tabindex: opts.editable ? 0 : null,
      },
      s("title", {}, info.title || n.id),
      s("rect", { class: "box", width: NODE_W, height: NODE_H, rx: 8 }),
      s("text", { class: "name", x: 10, y: 20 }, clip(n.id, 20)),
      s("text", { class: "sub", x: 10, y: 38 }, clip(info.sub || "", 26)),
      info.label ? s("text", { class: "state", x: 10, y: 51 }, clip(info.label, 28)) : null,
      opts.editable ? s("circle", { class: "port", cx: NODE_W, cy: NODE_H / 2, r: 7, "data-port": n.id }) : null);
      if (opts.editable) {
        g.addEventListener("pointerdown", (ev) => (ev.target.classList.contains("port") ? connect(ev, i) : drag(ev, i)));
      } else if (opts.onSelect) {
        g.addEventListener("pointerdown", (ev) => { ev.stopPropagation(); opts.onSelect({ kind: "node", index: i }); });
      }
      nodeEls[i] = g;
      gNodes.append(info.href ? s("a", { href: info.href, class: "node-link" }, g) : g);
    });
  }

  // drag moves node i with the pointer, on the grid.
  function drag(ev, i) {
    ev.preventDefault();
    ev.stopPropagation();
    opts.onSelect?.({ kind: "node", index: i });
    const n = nodes[i];
    const start = pt(ev);
    const from = at(n);
    let moved = false;
    svg.setPointerCapture(ev.pointerId);
    const move = (e) => {
      const p = pt(e);
      const x = Math.max(0, Math.round((from.x + p.x - start.x) / GRID) * GRID);
      const y = Math.max(0, Math.round((from.y + p.y - start.y) / GRID) * GRID);
      if (x === at(n).x && y === at(n).y) return;
      moved = true;
      n.x = x;
      n.y = y;
      nodeEls[i].setAttribute("transform", `translate(${x},${y})`);
      drawEdges();
    };
    const up = () => {
      svg.removeEventListener("pointermove", move);
      svg.removeEventListener("pointerup", up);
      svg.removeEventListener("pointercancel", up);
      if (moved) { size(); opts.onMoved?.(i); }
    };
    svg.addEventListener("pointermove", move);
    svg.addEventListener("pointerup", up);
    svg.addEventListener("pointercancel", up);
  }

  // connect draws an edge from node i's port to the node the pointer is released on.
  function connect(ev, i) {
    ev.preventDefault();
    ev.stopPropagation();
    const n = nodes[i];
    const { x, y } = at(n);
    const line = s("path", { class: "temp-edge", "marker-end": "url(#wf-arrow-TEMP)" });
    gTemp.replaceChildren(line);
    svg.setPointerCapture(ev.pointerId);
    const move = (e) => { const p = pt(e); line.setAttribute("d", curve(x + NODE_W, y + NODE_H / 2, p.x, p.y)); };
    const up = (e) => {
      svg.removeEventListener("pointermove", move);
      svg.removeEventListener("pointerup", up);
      svg.removeEventListener("pointercancel", up);
      gTemp.replaceChildren();
      const target = document.elementFromPoint(e.clientX, e.clientY)?.closest("[data-node]");
      if (target && target.dataset.node !== n.id && svg.contains(target)) opts.onConnect?.(n.id, target.dataset.node);
    };
    move(ev);
    svg.addEventListener("pointermove", move);
    svg.addEventListener("pointerup", up);
    svg.addEventListener("pointercancel", up);
  }

  if (opts.onSelect) svg.addEventListener("pointerdown", (ev) => { if (ev.target === svg) opts.onSelect(null); });

  return {
    svg,
    render(ns, es, d = {}) {
      nodes = ns;
      edges = es;
      deco = d;
      size();
      drawEdges();
      drawNodes();
    },
  };
}

const clip = (v, n) => (v.length > n ? v.slice(0, n - 1) + "…" : v);
