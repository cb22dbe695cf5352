// queen.uuid_ok_v1 decides every partitionId, leaseId and timer id a request names. It is three
// cheap checks instead of the pattern's regex (which cost about 9 µs a match, two on every ack), so
// it must say what the pattern says: here over valid ids in both cases and every way one can be
// one character off (each position replaced by a hex digit, a hyphen, a non-hex letter, a
// multi-byte character), shortened, lengthened, braced and without hyphens.
import { useDatabase } from '../support/database';

const db = useDatabase({ client: true });

const ID = '0b8e5f4e-1c2d-4e5f-8a9b-0c1d2e3f4a5b';

function candidates(): string[] {
  const out = new Set<string>([ID, ID.toUpperCase(), 'AbCdEf01-2345-6789-aBcD-ef0123456789', '', '-', '----',
    `{${ID}}`, ID.replace(/-/g, ''), `${ID}0`, ID.slice(1), ` ${ID.slice(1)}`, `${ID}\n`, ID.replace(/-/g, '_')]);
  for (let i = 0; i < ID.length; i++) {
    for (const c of ['0', 'f', 'F', '-', 'g', 'G', '_', '%', ' ', 'é', '€']) out.add(ID.slice(0, i) + c + ID.slice(i + 1));
    out.add(ID.slice(0, i) + ID.slice(i + 1));
    out.add(ID.slice(0, i) + '-' + ID.slice(i));
  }
  return [...out];
}

test('uuid_ok_v1 agrees with the UUID pattern on valid ids and on every near miss', async () => {
  const texts = candidates();
  const { rows } = await db.client.query<{ t: string; ok: boolean; pattern: boolean }>(
    `SELECT t, queen.uuid_ok_v1(t) AS ok, t ~* ('^' || queen.uuid_pattern_v1() || '$') AS pattern FROM unnest($1::text[]) t`,
    [texts],
  );
  expect(rows).toHaveLength(texts.length);
  const disagreeing = rows.filter((r) => r.ok !== r.pattern).map((r) => r.t);
  expect(disagreeing).toEqual([]);
  // The set holds both answers, so the comparison can fail either way.
  expect(rows.filter((r) => r.ok).length).toBeGreaterThan(30);
  expect(rows.filter((r) => !r.ok).length).toBeGreaterThan(300);
  const nullAnswer = await db.client.query(`SELECT queen.uuid_ok_v1(NULL) AS ok`);
  expect(nullAnswer.rows[0].ok).toBe(false);
});
