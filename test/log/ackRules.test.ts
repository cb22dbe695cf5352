// An ack's rules are one SQL expression (queen.log_ack_problem_v1), judged over a whole batch in one
// statement and for a lone ack or a bundle's ack operation one at a time. This suite holds every
// surface to the same refusal, code and sentence, for each rule: a batch names the first ack that
// breaks one ("Ack 1: ..."), a batch of one and a lone ack name none, 0.1.0's batch refuses as the
// current one does, and a body-level consumerGroup is judged (and applied) in place of the acks' own.
import { useDatabase } from '../support/database';

const TENANT = '00000000-0000-0000-0000-000000000001';
const PID = '0a0a0a0a-0000-4000-8000-000000000001';

const db = useDatabase({ client: true });

type Refusal = { code: string; message: string; index: number | null } | 'accepted';

async function refusal(sql: string, params: unknown[]): Promise<Refusal> {
  try {
    await db.client.query(sql, params);
    return 'accepted';
  } catch (err) {
    const e = err as { code?: string; message: string; detail?: string };
    if (e.code !== 'QK400') throw err;
    const detail = JSON.parse(e.detail ?? '{}') as { code: string; index: number | null };
    return { code: detail.code, message: e.message, index: detail.index };
  }
}

const good = { transactionId: 't-1', partitionId: PID, status: 'completed' };

// Each rule, broken by one ack: the code and the sentence every surface gives.
const rules: Array<[name: string, ack: unknown, code: string, sentence: string]> = [
  ['not an object', 7, 'log_invalid_ack', 'an ack is an object {transactionId, partitionId, status, consumerGroup?, leaseId?}.'],
  ['no transactionId', { ...good, transactionId: undefined }, 'log_transaction_id_required', 'transactionId is required (a non-empty string).'],
  ['an empty transactionId', { ...good, transactionId: '' }, 'log_transaction_id_required', 'transactionId is required (a non-empty string).'],
  ['a numeric transactionId', { ...good, transactionId: 5 }, 'log_transaction_id_required', 'transactionId is required (a non-empty string).'],
  ['a partitionId not a UUID', { ...good, partitionId: 'p' }, 'log_invalid_partition_id', 'partitionId is required: the UUID the pop answered.'],
  ['no partitionId', { ...good, partitionId: undefined }, 'log_invalid_partition_id', 'partitionId is required: the UUID the pop answered.'],
  ['status done', { ...good, status: 'done' }, 'log_invalid_status', 'status is "completed" or "failed".'],
  ['no status', { ...good, status: undefined }, 'log_invalid_status', 'status is "completed" or "failed".'],
  ['a group not a name', { ...good, consumerGroup: 'a b' }, 'log_invalid_consumer_group', 'consumerGroup is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.'],
  ['a numeric group', { ...good, consumerGroup: 3 }, 'log_invalid_consumer_group', 'consumerGroup is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.'],
  ['a leaseId not a UUID', { ...good, leaseId: 'x' }, 'log_invalid_lease_id', 'leaseId is the UUID the pop answered.'],
  ['an error not a string', { ...good, error: { why: 1 } }, 'log_invalid_ack', 'error is a string (why the message failed) or null.'],
  // The first rule broken is the one named.
  ['two rules broken', { ...good, status: 'done', leaseId: 'x' }, 'log_invalid_status', 'status is "completed" or "failed".'],
];

const batchOf = (acks: unknown[], group?: unknown) => JSON.stringify({ acknowledgments: acks, ...(group === undefined ? {} : { consumerGroup: group }) });

describe.each(rules)('an ack with %s', (_name, bad, code, sentence) => {
  test('is refused alike by every surface, a batch naming its index', async () => {
    const expected = { code, message: `Ack 1: ${sentence}`, index: 1 };
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf([good, bad, bad])])).toEqual(expected);
    expect(await refusal(`SELECT queen.log_ack_batch_body_v1($1, $2::jsonb)`, [TENANT, batchOf([good, bad, bad])])).toEqual(expected);
    expect(await refusal(`SELECT queen.log_ack_batch_v2($1, $2::jsonb, false)`, [TENANT, JSON.stringify([good, bad])])).toEqual(expected);
    const alone = { code, message: sentence, index: null };
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf([bad])])).toEqual(alone);
    expect(await refusal(`SELECT queen.log_ack_batch_v1($1, $2::jsonb, false)`, [TENANT, JSON.stringify([bad])])).toEqual(alone);
    expect(await refusal(`SELECT queen.log_check_ack_v1($1::jsonb, NULL)`, [JSON.stringify(bad)])).toEqual(alone);
    expect(await refusal(`SELECT queen.log_check_ack_v1($1::jsonb, 4)`, [JSON.stringify(bad)])).toEqual({ code, message: `Ack 4: ${sentence}`, index: 4 });
  });
});

describe("a body's consumerGroup", () => {
  const groupSentence = 'consumerGroup is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.';

  test('that is not a name is refused, naming the first ack it is applied to', async () => {
    for (const group of [42, 'a b', '', { g: 1 }]) {
      expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf([good, good], group)]))
        .toEqual({ code: 'log_invalid_consumer_group', message: `Ack 0: ${groupSentence}`, index: 0 });
      expect(await refusal(`SELECT queen.log_ack_batch_body_v1($1, $2::jsonb)`, [TENANT, batchOf([good], group)]))
        .toEqual({ code: 'log_invalid_consumer_group', message: groupSentence, index: null });
    }
  });

  test("replaces the acks' own, judged and answered in their place; null leaves them theirs", async () => {
    // Nothing is leased, so each ack is answered not_leased: its answer names the group it went to.
    const answer = async (body: string) =>
      ((await db.client.query(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb) AS r`, [TENANT, body])).rows[0].r as Array<{ consumerGroup: string }>)
        .map((a) => a.consumerGroup);
    expect(await answer(batchOf([{ ...good, consumerGroup: 'a b' }, good], 'g'))).toEqual(['g', 'g']);
    expect(await answer(batchOf([{ ...good, consumerGroup: 'own' }, good], null))).toEqual(['own', '__QUEUE_MODE__']);
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf([good, { ...good, consumerGroup: 'a b' }], null)]))
      .toEqual({ code: 'log_invalid_consumer_group', message: `Ack 1: ${groupSentence}`, index: 1 });
    // A non-object element is refused as one whatever the body's group.
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf([good, 'x'], 'g')]))
      .toMatchObject({ code: 'log_invalid_ack', index: 1 });
  });

  test('a batch that is not a non-empty array of at most 1000 is refused before any ack', async () => {
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, JSON.stringify({ consumerGroup: 'g' })]))
      .toMatchObject({ code: 'log_acks_required', index: null });
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf([])])).toMatchObject({ code: 'log_acks_required' });
    expect(await refusal(`SELECT queen.log_ack_batch_body_v2($1, $2::jsonb)`, [TENANT, batchOf(Array(1001).fill(7))]))
      .toMatchObject({ code: 'log_batch_too_large', message: 'The batch has 1001 acks; at most 1000 are allowed.' });
  });
});
