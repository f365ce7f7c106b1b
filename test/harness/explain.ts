import type { Tx } from '../../src/db/database.js';

/**
 * A transaction that plans instead of running: each statement sent through it is `explain`ed in
 * `tx` (the caller's tenant transaction, so row-level security and the tenant apply) and its plan
 * text pushed to `plans`; it answers `answer` (what the code under test expects back, e.g. no rows).
 */
export function explainingTx(tx: Tx, plans: string[], answer: unknown = { rows: [] }): Tx {
  return {
    tenantId: tx.tenantId,
    query: async (text: string, values?: unknown[]) => {
      const { rows } = await tx.query<{ 'QUERY PLAN': string }>(`explain ${text}`, values);
      plans.push(rows.map((r) => r['QUERY PLAN']).join('\n'));
      return answer as never;
    },
  } as Tx;
}
