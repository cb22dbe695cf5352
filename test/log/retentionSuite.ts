// What the retention suites (retention.test.ts, retentionRows.test.ts) share: the suite's API, a test
// sweeper whose cell default retention is an hour (the tests age rows past it or not), closed with
// a check that no other sweeper leaked, and `age`, which makes age rather than waiting for it.
import { useApi, ApiSuite } from '../support/api';
import { closeLeakedSweepers, startTestSweeper, TestSweeper } from '../support/sweeper';

export interface RetentionSuite {
  api: ApiSuite;
  /** The suite's sweeper, started in beforeAll. */
  readonly sweeper: TestSweeper;
  /** Moves every message of `queue` (or those with the given seqs) `seconds` into the past. */
  age(queue: string, seconds: number, seqs?: number[]): Promise<void>;
}

export function useRetentionSuite(): RetentionSuite {
  let sweeper: TestSweeper;
  afterAll(async () => {
    await sweeper.close();
    expect(await closeLeakedSweepers()).toBe(0);
  });
  const api = useApi();
  beforeAll(() => {
    sweeper = startTestSweeper(api.databaseUrl, { retentionSeconds: 3600 });
  });
  return {
    api,
    get sweeper() {
      return sweeper;
    },
    async age(queue, seconds, seqs) {
      await api.pool.query(
        `UPDATE queen.messages m SET created_at = m.created_at - make_interval(secs => $2)
           FROM queen.partitions p JOIN queen.queues q ON q.id = p.queue_id
          WHERE p.id = m.partition_id AND q.name = $1 AND ($3::bigint[] IS NULL OR m.seq = ANY ($3))`,
        [queue, seconds, seqs ?? null],
      );
    },
  };
}
