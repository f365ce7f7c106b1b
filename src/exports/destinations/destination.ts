import type { Readable } from 'node:stream';

/**
 * The publication port of exports: where a finished CSV byte stream lands. A destination publishes
 * atomically (the final name appears with every byte or not at all) and never replaces anything
 * (docs/exports-destinations.md).
 */

/** Nothing: each destination is constructed with its target (host and path, bucket and key). */
// biome-ignore lint/suspicious/noEmptyInterface: the port names it; a destination carries its own target.
export interface PublishTarget {}

export interface PublishReceipt {
  /** Where the file landed: `sftp://user@host:port/dir/file.csv`, `s3://bucket/key`. */
  location: string;
  /** S3 only: the object's ETag, without the surrounding quotes (not a checksum for multipart objects). */
  etag?: string;
  /** S3 only, on a versioned bucket: the version the publication created. */
  versionId?: string;
}

export type PublishFailureCode = 'publication' | 'collision';

/**
 * Failures of the destination itself. `reason` is a sentence a person can act on; it never holds a
 * credential or a raw third-party message (server-supplied free text); protocol status codes and
 * error codes (e.g. S3 `AccessDenied`, SFTP status 4) may be named. `message` is the same sentence.
 *
 * - `publication`: the upload or the commit was refused or could not be made (credentials, host
 *   key, missing directory or bucket, network, outbound address policy); nothing is left at the
 *   final name.
 * - `collision`: the final name already exists; the existing file or object is untouched.
 */
export class PublishError extends Error {
  constructor(
    readonly code: PublishFailureCode,
    readonly reason: string,
    /** What the cleanup could not remove, already named at the end of `reason`. */
    readonly leftover?: string,
  ) {
    super(reason);
    this.name = 'PublishError';
  }
}

export function isPublishError(err: unknown): err is PublishError {
  return err instanceof PublishError;
}

export interface PublishOptions {
  /** The SHA-256 (hex) of the body; callable once the body has ended (the caller hashes it). */
  digest: () => string;
  /** Aborts the publication: same cleanup as a failure, then `signal.reason` is thrown. */
  signal?: AbortSignal;
  /**
   * Awaited once every byte has gone to the destination, just before the step that makes the file
   * appear (the SFTP rename, the S3 PutObject or CompleteMultipartUpload); not called when the
   * publication ends earlier. The caller's last word on whether the file may appear: to refuse, it
   * aborts `signal` (publish then cleans up and throws `signal.reason`). It does not throw.
   */
  beforeCommit?: () => Promise<void>;
}

/** The caller's `beforeCommit`, then its refusal (an aborted signal) thrown as `signal.reason`. */
export async function admitCommit(opts: PublishOptions): Promise<void> {
  await opts.beforeCommit?.();
  opts.signal?.throwIfAborted();
}

export interface Destination {
  /** Where the file will land, for messages and the receipt (`sftp://user@host:port/dir/file.csv`, `s3://bucket/key`). */
  readonly location: string;
  /**
   * Publishes every byte of `body` under the final name, never replacing an existing object.
   * `digest()` gives the SHA-256 hex of the body once the body has ended (the caller hashes it).
   * On ANY failure it cleans up what it wrote (SFTP .part removed, S3 multipart aborted) and then:
   * if `body` emitted an error, rethrows THAT error object unchanged (so the caller can tell a
   * generation failure from a publication one); otherwise throws PublishError.
   * `signal` aborts (same cleanup, throws signal.reason).
   *
   * When publication ends early (a failure, a collision found before the body was read, an
   * abort), `body` is destroyed without an error so that whatever produces it stops.
   */
  publish(body: Readable, opts: PublishOptions): Promise<PublishReceipt>;
}

/**
 * Follows a body's errors for a destination: the first error the body emits is what `publish`
 * rethrows, whatever else failed after it. `release()` stops listening and, unless the body has
 * ended, destroys it without an error (an `error` listener stays, so a late error is not uncaught).
 */
export class BodyWatch {
  private failure: { error: unknown } | undefined;
  private readonly onError = (error: unknown) => {
    this.failure ??= { error };
  };

  constructor(private readonly body: Readable) {
    if (body.errored) this.failure = { error: body.errored };
    body.on('error', this.onError);
  }

  /** The body's own error, when it emitted one. */
  get error(): { error: unknown } | undefined {
    return this.failure;
  }

  release(): void {
    if (!this.body.readableEnded && !this.body.destroyed) this.body.destroy();
    this.body.off('error', this.onError);
    this.body.on('error', () => {});
  }
}

/**
 * What to throw once the cleanup is done: the body's own error first (a generation failure stays
 * one, even when it also made the caller abort), then the abort reason, then the destination's
 * failure (whose reason already names `leftover`). With `leftover` (what the cleanup could not
 * remove), the first two come wrapped in a `LeftBehind` that says so.
 */
export function outcome(watch: BodyWatch, signal: AbortSignal | undefined, failure: unknown, leftover?: string): unknown {
  const cause = watch.error ? watch.error.error : signal?.aborted ? signal.reason : undefined;
  if (cause === undefined) return failure;
  return leftover ? new LeftBehind(cause, leftover) : cause;
}

/** A run's failure (`cause`: a stop, a generation failure) after which the destination's cleanup left something behind. */
export class LeftBehind extends Error {
  constructor(
    override readonly cause: unknown,
    /** What is left and where, as a clause of a sentence: `the partial file … could not be removed`. */
    readonly leftover: string,
  ) {
    super(leftover);
    this.name = 'LeftBehind';
  }
}

/**
 * How long a cleanup after a failure or a stop may take (removing a partial file, aborting a
 * multipart upload): a destination that stopped answering must not hold a stopping hub. Past it,
 * the cleanup is given up and the run's reason names what is left.
 */
export const CLEANUP_MS = 5_000;

/** `work`, or `undefined` once `ms` have passed without it settling (its later outcome ignored). */
export async function within<T>(work: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  work.catch(() => {});
  try {
    return await Promise.race([work, new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

