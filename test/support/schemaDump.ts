// A normalised dump of everything in schema `queen`, read from the catalog (no pg_dump needed, so it
// works with any server the harness finds). The golden copy lives in test/schema.sql; a changed
// table, index or procedure shows up there as a diff in review. Regenerate with `npm run schema:dump`.
import { Client } from 'pg';

const QUERIES: Array<[string, string]> = [
  [
    'tables',
    `SELECT format('TABLE %s %s', c.relname, coalesce(array_to_string(c.reloptions, ','), '')) AS line
       FROM pg_class c WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind IN ('r', 'p') ORDER BY c.relname`,
  ],
  [
    'columns',
    `SELECT format('COLUMN %s.%s %s%s%s%s%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
              CASE WHEN a.attcollation <> 0 AND a.attcollation <> (SELECT oid FROM pg_collation WHERE collname = 'default')
                   THEN ' COLLATE ' || quote_ident((SELECT collname FROM pg_collation WHERE oid = a.attcollation)) ELSE '' END,
              CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END,
              CASE WHEN a.attgenerated = 's' THEN ' GENERATED ' ELSE '' END,
              coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')) AS line
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE c.relnamespace = 'queen'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY c.relname, a.attnum`,
  ],
  [
    'constraints',
    `SELECT format('CONSTRAINT %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid)) AS line
       FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
      WHERE c.relnamespace = 'queen'::regnamespace ORDER BY c.relname, k.conname`,
  ],
  [
    'indexes',
    `SELECT pg_get_indexdef(i.indexrelid) AS line FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
      WHERE c.relnamespace = 'queen'::regnamespace ORDER BY c.relname`,
  ],
  [
    'sequences',
    `SELECT format('SEQUENCE %s %s cache %s', s.sequencename, s.data_type, s.cache_size) AS line
       FROM pg_sequences s WHERE s.schemaname = 'queen' ORDER BY 1`,
  ],
  [
    'functions',
    `SELECT pg_get_functiondef(p.oid) AS line FROM pg_proc p
      WHERE p.pronamespace = 'queen'::regnamespace ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)`,
  ],
];

export async function dumpSchema(url: string): Promise<string> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    const parts: string[] = [];
    for (const [title, sql] of QUERIES) {
      const { rows } = await client.query(sql);
      parts.push(`-- ${title}`, ...rows.map((r) => String(r.line).trimEnd()), '');
    }
    return parts.join('\n');
  } finally {
    await client.end();
  }
}
