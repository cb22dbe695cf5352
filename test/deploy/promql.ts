// The metric names a PromQL expression reads. Not a PromQL parser: it removes what cannot be a
// metric name (strings, label matchers, ranges, grouping clauses, function calls, keywords,
// numbers, Grafana variables) and keeps the identifiers left.
const KEYWORDS = new Set([
  'by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset',
  'inf', 'nan', 'atan2',
]);

export function metricNames(expr: string): string[] {
  let s = expr
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, ' ') // strings
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ') // grouping labels
    .replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, ' '); // Grafana variables
  const names = new Set<string>();
  for (const m of s.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const name = m[0];
    const after = s.slice(m.index! + name.length).trimStart();
    if (after.startsWith('(')) continue; // a function
    if (KEYWORDS.has(name.toLowerCase())) continue;
    const before = s.slice(0, m.index!);
    if (/[0-9.]$/.test(before) || /^[eE][0-9+-]/.test(name)) continue; // part of a number such as 1e-9
    names.add(name);
  }
  return [...names];
}

/** Whether `name` is a sample a family of `families` exposes (a histogram's _bucket/_sum/_count too). */
export function exposes(families: Map<string, { type: string }>, name: string): boolean {
  if (families.has(name)) return true;
  const m = /^(.*)_(bucket|sum|count)$/.exec(name);
  return !!m && ['histogram', 'summary'].includes(families.get(m[1])?.type ?? '');
}
