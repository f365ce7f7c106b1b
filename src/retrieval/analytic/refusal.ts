import { HubError, type Rendered } from '../../errors.js';

/**
 * A generated query that one of the five guards declined. Analytic chat answers it as any other
 * answer (HTTP 200): the refusal message as `answer`, the refused SQL, no rows. Guards 1-4 refuse
 * before the query runs (guardQuery); guard 5 is PostgreSQL itself refusing inside the read-only,
 * time-limited transaction of runReadOnly (a write, a statement timeout, a missing privilege).
 */
export class AnalyticRefusal extends HubError {
  constructor(
    readonly guard: 1 | 2 | 3 | 4 | 5,
    message: string,
    readonly sql: string,
  ) {
    super(message);
    this.name = 'AnalyticRefusal';
  }
  render(): Rendered {
    return { status: 200, body: { json: { answer: this.message, sql: this.sql, rowCount: 0, rows: [] } } };
  }
}
