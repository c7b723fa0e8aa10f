// Line diff (longest common subsequence) for comparing GLUE versions.

// diffLines returns [{op, text, a, b}] where op is " " (both), "-" (only in a) or "+" (only in
// b), and a/b are 1-based line numbers in each side (0 when absent).
export function diffLines(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  const n = x.length;
  const m = y.length;
  if (n * m > 4e6) {
    // Too big for the table: show it as removed and added.
    return [...x.map((t, i) => ({ op: "-", text: t, a: i + 1, b: 0 })), ...y.map((t, j) => ({ op: "+", text: t, a: 0, b: j + 1 }))];
  }
  const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) L[i][j] = x[i] === y[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (x[i] === y[j]) { out.push({ op: " ", text: x[i], a: i + 1, b: j + 1 }); i++; j++; }
    else if (L[i + 1][j] >= L[i][j + 1]) { out.push({ op: "-", text: x[i], a: i + 1, b: 0 }); i++; }
    else { out.push({ op: "+", text: y[j], a: 0, b: j + 1 }); j++; }
  }
  while (i < n) { out.push({ op: "-", text: x[i], a: i + 1, b: 0 }); i++; }
  while (j < m) { out.push({ op: "+", text: y[j], a: 0, b: j + 1 }); j++; }
  return out;
}
