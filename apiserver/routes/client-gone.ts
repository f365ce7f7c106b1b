import type { Context } from 'koa';
import { HubError, type Rendered } from '../../src/errors.js';

const GONE = 'the client closed the connection before the answer';

/** The client went away before its answer: nothing is sent (nobody reads it; the access log shows 499). */
export class ClientGone extends HubError {
  render(): Rendered {
    return { status: 499, body: { json: { error: GONE } } };
  }
}

/**
 * `work` with a signal that aborts (reason ClientGone) when the client goes away before its answer
 * is sent: the response closes unfinished, or the connection was gone already (while
 * authentication ran). What the work waits for (a model's call, a probe of a connector's source, a
 * wait for a rate limit or the analytic gate) ends then, instead of running on for nobody. An error
 * the work throws for that abort (`cancelled`: its own kind of cancellation) is the ClientGone.
 */
export async function whileClientWaits<T>(ctx: Context, work: (signal: AbortSignal) => Promise<T>, cancelled?: (err: unknown) => boolean): Promise<T> {
  const controller = new AbortController();
  const onClose = () => {
    if (!ctx.res.writableFinished) controller.abort(new ClientGone(GONE));
  };
  ctx.res.once('close', onClose);
  if (ctx.req.socket.destroyed || ctx.res.destroyed) onClose();
  try {
    return await work(controller.signal);
  } catch (err) {
    if (controller.signal.aborted && cancelled?.(err)) throw controller.signal.reason;
    throw err;
  } finally {
    ctx.res.off('close', onClose);
  }
}
