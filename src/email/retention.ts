import type { Database } from '../db/database.js';
import { deleteWalking } from '../db/retention.js';

/**
 * How long a finished claim on a message (a row of `email.sends`, src/email/consumer.ts) is kept:
 * it is needed only while the e-mail consumer's cursor may still be before its event (a process
 * that reads the event again then finds the message recorded and sends nothing), a moment under
 * normal running, so a day is ample.
 */
export const SEND_CLAIMS_KEPT_DAYS = 1;

/**
 * The daily purge of the e-mail consumer's finished claims (05:10 UTC, by the background roles'
 * leader; docs/email.md): the claims, of every tenant, whose send ended more than `keptDays` days
 * ago. A claim not finished (its send under way, or its process died mid-send and its message is
 * claimed again once the lease runs out) stays whatever its age. Once a day for the whole table, not
 * a delete per claim: a tenant that stops sending has its claims purged all the same, and sending
 * costs no statement for it. The batches walk the index on (tenant_id, finished_at): the rows read
 * are those that go, and per tenant the first one that stays.
 */
export function purgeSendClaims(db: Database, keptDays: number, batch?: number): Promise<number> {
  if (keptDays <= 0) return Promise.resolve(0);
  return deleteWalking(
    db,
    'email-send-claim-retention',
    `with after as (
       select coalesce(($2::text[])[1]::bigint, -1) as tenant_id, coalesce(($2::text[])[2]::timestamptz, '-infinity') as finished_at,
              coalesce(($2::text[])[3]::bigint, -1) as event_id, coalesce(($2::text[])[4]::bigint, -1) as rule_id),
     gone as (
       delete from email.sends s using (
         select c.event_id, c.rule_id from email.sends c, after a
          where c.finished_at < now() - make_interval(days => $1)
            and (c.tenant_id, c.finished_at) >= (a.tenant_id, a.finished_at)
            and (c.tenant_id, c.finished_at, c.event_id, c.rule_id) > (a.tenant_id, a.finished_at, a.event_id, a.rule_id)
          order by c.tenant_id, c.finished_at, c.event_id, c.rule_id limit $3) o
        where s.event_id = o.event_id and s.rule_id = o.rule_id
       returning s.tenant_id, s.finished_at, s.event_id, s.rule_id)
     select count(*)::int as n,
            (select array[g.tenant_id::text, g.finished_at::text, g.event_id::text, g.rule_id::text] from gone g
              order by g.tenant_id desc, g.finished_at desc, g.event_id desc, g.rule_id desc limit 1) as last
       from gone`,
    [keptDays],
    batch,
  );
}
