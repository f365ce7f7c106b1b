import { describe, expect, it } from '@jest/globals';
import { LeftBehind, PublishError } from './destinations/destination.js';
import { ExportRunner, type ExportRunnerOptions } from './runner.js';
import type { ExportRun } from './runs/ledger.js';

/**
 * How a run's failure reads (ExportRunner's classification), where a stop and the destination's
 * cleanup meet: the reason names what was left behind instead of claiming the cleanup. A stop's
 * reason quotes the tenant's choices (who cancelled, the destination's paths): stored as tenant text.
 */
type Classify = (err: unknown, signal: AbortSignal, run: ExportRun) => { code: string; reason: string; origin: string };
const runner = new ExportRunner({ heartbeatEveryMs: 1_000, timeoutMs: 60_000 } as unknown as ExportRunnerOptions);
const classify = (runner as unknown as { classify: Classify }).classify.bind(runner);
const run = { id: 'r1', exportName: 'x' } as ExportRun;

/** A signal aborted by a cancel, as the runner aborts it (its RunFailure is not exported: made by `stop`). */
function cancelled(): AbortSignal {
  const controller = new AbortController();
  const internals = runner as unknown as { running: Map<string, { controller: AbortController }> };
  internals.running.set('r1', { controller } as never);
  runner.stop('r1', { code: 'interrupted', reason: 'cancelled by ann during the run; nothing was published (temporary file removed, multipart upload aborted). Retry it' });
  internals.running.delete('r1');
  return controller.signal;
}

describe('an export run\'s failure reason after a stop', () => {
  const leftover = 'the partial file /up/x.csv.1.part could not be removed (no answer within 5 s)';
  const expected = `cancelled by ann during the run; nothing was published; ${leftover}. Retry it`;

  it('a stop whose cleanup left something: the leftover in place of the cleanup claim', () => {
    const signal = cancelled();
    expect(classify(new LeftBehind(signal.reason, leftover), signal, run)).toEqual({ code: 'interrupted', reason: expected, origin: 'tenant' });
  });

  it('a stop that came after the destination had failed and named its leftover: the stop, with the leftover', () => {
    const signal = cancelled();
    const failure = new PublishError('publication', `the server refused the write; ${leftover}`, leftover);
    expect(classify(failure, signal, run)).toEqual({ code: 'interrupted', reason: expected, origin: 'tenant' });
  });

  it('a stop with nothing left: the stop\'s own reason', () => {
    const signal = cancelled();
    expect(classify(signal.reason, signal, run).reason).toBe('cancelled by ann during the run; nothing was published (temporary file removed, multipart upload aborted). Retry it');
  });
});
