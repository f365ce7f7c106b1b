/**
 * How a command fails, and so which exit code `svc` ends with: 2 for a command line that is wrong
 * (main prints the command's usage after the message), 130 for Ctrl-C, 1 for everything else.
 */

/** Exit 2: the command line itself is wrong. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** Exit 130: the user pressed Ctrl-C where the terminal delivers it as a character (a hidden prompt in raw mode). */
export class Interrupted extends Error {
  override name = 'Interrupted';
}

/** Exit 1: not logged in, a file that does not parse, a run that failed. */
export class CliError extends Error {
  override name = 'CliError';
}

/** Exit 1: the hub answered an error status; `message` is its `error` text (or plain-text body). */
export class HttpError extends CliError {
  override name = 'HttpError';
  constructor(
    readonly status: number,
    message: string,
    readonly body: unknown,
    /** The answer's `Retry-After` in seconds, when it gave a number (a 429, a 503). */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/**
 * How an error line names the answer: `HTTP 404`, and the `Retry-After` a 429 or a 503 gave
 * (`HTTP 429, Retry-After: 42`), so that whoever reads it knows how long the hub asks them to wait.
 */
export function answered(err: HttpError): string {
  return `HTTP ${err.status}${err.retryAfterSeconds === undefined ? '' : `, Retry-After: ${err.retryAfterSeconds}`}`;
}
