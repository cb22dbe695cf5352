// A validator for the part of JSON Schema (2020-12, as OpenAPI 3.1 uses it) that docs/openapi.yaml
// uses, and no more: test/docs/openapi.test.ts checks the document names no keyword outside
// KEYWORDS, so a keyword this file does not check cannot slip in unchecked. Why not Ajv: one more
// dependency (and its own OpenAPI wrapper) for about a hundred lines; `format` is an annotation here
// (as 2020-12 makes it by default), checked by no one.

export type Schema = Record<string, unknown> | boolean;

/** Keywords checked below, and the annotations that check nothing. */
export const KEYWORDS = new Set([
  '$ref', 'type', 'const', 'enum', 'properties', 'required', 'additionalProperties', 'items', 'minItems',
  'oneOf', 'anyOf', 'allOf', 'minimum', 'maximum', 'minLength', 'maxLength', 'pattern',
  // annotations
  'description', 'default', 'format', 'title', 'examples',
]);

function typeOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'array';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'number';
  return typeof value;
}

function resolve(root: unknown, ref: string): Schema {
  if (!ref.startsWith('#/')) throw new Error(`only local $refs are resolved: ${ref}`);
  let at: any = root;
  for (const part of ref.slice(2).split('/')) {
    at = at?.[part.replace(/~1/g, '/').replace(/~0/g, '~')];
    if (at === undefined) throw new Error(`$ref ${ref} resolves to nothing`);
  }
  return at as Schema;
}

/** The problems found, each with its JSON path; [] when the value is valid. */
export function validate(schema: Schema, value: unknown, root: unknown, at = '$'): string[] {
  if (schema === true) return [];
  if (schema === false) return [`${at}: no value is allowed here`];
  const s = schema as Record<string, any>;
  const errors: string[] = [];
  if (s.$ref !== undefined) errors.push(...validate(resolve(root, s.$ref), value, root, at));
  const t = typeOf(value);
  if (s.type !== undefined) {
    const types: string[] = Array.isArray(s.type) ? s.type : [s.type];
    if (!types.includes(t) && !(t === 'integer' && types.includes('number'))) {
      errors.push(`${at}: ${t} where ${types.join(' or ')} is expected`);
      return errors;
    }
  }
  if ('const' in s && JSON.stringify(s.const) !== JSON.stringify(value)) errors.push(`${at}: ${JSON.stringify(value)} is not ${JSON.stringify(s.const)}`);
  if (s.enum !== undefined && !s.enum.some((e: unknown) => JSON.stringify(e) === JSON.stringify(value))) {
    errors.push(`${at}: ${JSON.stringify(value)} is not one of ${JSON.stringify(s.enum)}`);
  }
  if (t === 'object') {
    const obj = value as Record<string, unknown>;
    for (const name of s.required ?? []) if (!(name in obj)) errors.push(`${at}: ${name} is required`);
    for (const [name, sub] of Object.entries(s.properties ?? {})) {
      if (name in obj) errors.push(...validate(sub as Schema, obj[name], root, `${at}.${name}`));
    }
    if (s.additionalProperties !== undefined) {
      for (const name of Object.keys(obj)) {
        if (!(name in (s.properties ?? {}))) errors.push(...validate(s.additionalProperties, obj[name], root, `${at}.${name}`));
      }
    }
  }
  if (t === 'array') {
    const arr = value as unknown[];
    if (s.minItems !== undefined && arr.length < s.minItems) errors.push(`${at}: fewer than ${s.minItems} items`);
    if (s.items !== undefined) arr.forEach((v, i) => errors.push(...validate(s.items, v, root, `${at}[${i}]`)));
  }
  if (t === 'integer' || t === 'number') {
    const n = value as number;
    if (s.minimum !== undefined && n < s.minimum) errors.push(`${at}: ${n} is below ${s.minimum}`);
    if (s.maximum !== undefined && n > s.maximum) errors.push(`${at}: ${n} is above ${s.maximum}`);
  }
  if (t === 'string') {
    const str = value as string;
    if (s.minLength !== undefined && [...str].length < s.minLength) errors.push(`${at}: shorter than ${s.minLength}`);
    if (s.maxLength !== undefined && [...str].length > s.maxLength) errors.push(`${at}: longer than ${s.maxLength}`);
    if (s.pattern !== undefined && !new RegExp(s.pattern, 'u').test(str)) errors.push(`${at}: ${JSON.stringify(str)} does not match ${s.pattern}`);
  }
  for (const sub of s.allOf ?? []) errors.push(...validate(sub, value, root, at));
  if (s.anyOf !== undefined && !s.anyOf.some((sub: Schema) => validate(sub, value, root, at).length === 0)) {
    errors.push(`${at}: matches none of anyOf`);
  }
  if (s.oneOf !== undefined) {
    const matching = s.oneOf.filter((sub: Schema) => validate(sub, value, root, at).length === 0).length;
    if (matching !== 1) {
      const why = matching === 0 ? s.oneOf.map((sub: Schema, i: number) => `[${i}] ${validate(sub, value, root, at).join('; ')}`).join(' | ') : `${matching} match`;
      errors.push(`${at}: oneOf needs exactly one match: ${why}`);
    }
  }
  return errors;
}

/** Every schema in an OpenAPI document (under components.schemas and in every `schema:`), for the keyword check. */
export function schemasIn(node: unknown, out: Array<Record<string, unknown>> = [], isSchema = false): Array<Record<string, unknown>> {
  if (Array.isArray(node)) {
    for (const v of node) schemasIn(v, out, isSchema);
    return out;
  }
  if (node === null || typeof node !== 'object') return out;
  const obj = node as Record<string, unknown>;
  if (isSchema) {
    out.push(obj);
    for (const [k, v] of Object.entries(obj)) {
      if (k === 'properties') for (const sub of Object.values(v as object)) schemasIn(sub, out, true);
      else if (['items', 'additionalProperties'].includes(k)) schemasIn(v, out, true);
      else if (['oneOf', 'anyOf', 'allOf'].includes(k)) for (const sub of v as unknown[]) schemasIn(sub, out, true);
    }
    return out;
  }
  for (const [k, v] of Object.entries(obj)) {
    if (k === 'schema') schemasIn(v, out, true);
    else if (k === 'schemas') for (const sub of Object.values(v as object)) schemasIn(sub, out, true);
    else schemasIn(v, out, false);
  }
  return out;
}
