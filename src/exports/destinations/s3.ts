import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { isIP } from 'node:net';
import type { Readable } from 'node:stream';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  HeadObjectCommand,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { describeNetworkError } from '../../egress/network-error.js';
import { type EgressPolicy, egressDenial, parseAddress } from '../../egress/policy.js';
import { unlessAborted } from '../../abortable.js';
import { storableText } from '../../validation/input-limits.js';
import { admitCommit, BodyWatch, CLEANUP_MS, type Destination, outcome, type PublishOptions, type PublishReceipt, PublishError, within } from './destination.js';

/**
 * Publication to S3 or an S3-compatible store (docs/exports-destinations.md). A HeadObject first
 * (present: collision; 404 or 403: absent). The body is read into memory up to `partSize`: a body
 * that ends within it is one PutObject with `If-None-Match: *` and the SHA-256 as metadata
 * `svc-sha256`; a longer one is a multipart upload whose CompleteMultipartUpload carries
 * `If-None-Match: *`, aborted on any failure. S3 answers 412 (or 409 to overlapping conditional
 * writes) when the key exists, so an object is never replaced. Every connection the client opens
 * goes through the outbound address policy.
 */

export interface S3DestinationOptions {
  bucket: string;
  /** The object key (prefix plus file name, tokens resolved); never with a leading slash. */
  key: string;
  region: string;
  /** An S3-compatible endpoint (`https://host:port`); path-style addressing is used with it. */
  endpoint?: string;
  accessKeyId: string;
  secretAccessKey: string;
  egress: EgressPolicy;
  /** The single-PUT limit and the multipart part size: 5 MiB to 5 GiB, as S3 requires (default 8 MiB). */
  partSize?: number;
  /** Connecting must succeed within this (default 10 s). */
  connectTimeoutMs?: number;
  /** How long aborting a multipart upload after a failure or a stop may take (test hook; default CLEANUP_MS). */
  cleanupMs?: number;
  /** A request (one PUT, one part, one HEAD) not answered within this long fails (default 120 s). */
  requestTimeoutMs?: number;
  /** The committing request's whole answer, its body included, must have come within this long of its sending (default COMMIT_ANSWER_MS). */
  commitAnswerMs?: number;
  /** Content-Type of the object (default `text/csv; charset=utf-8`). */
  contentType?: string;
}

export const DEFAULT_PART_SIZE = 8 * 1024 * 1024;
/**
 * How long the committing request (PutObject, CompleteMultipartUpload) may take, its answer read
 * whole. requestTimeout ends at the answer's headers: a store that sends them and then its body a
 * byte at a time (S3 sends spaces while it assembles a large multipart object, "several minutes"; a
 * broken or hostile store may never stop) would otherwise hold the run for ever, as nothing else
 * cuts a publication once it is committing (no stop, no time limit).
 */
export const COMMIT_ANSWER_MS = 15 * 60_000;
/**
 * The longest answer body read (the SDK reads each whole into memory before parsing it): S3's
 * answers to the requests of a publication are XML of a few kilobytes at most (the spaces S3 sends
 * while it completes a multipart upload included). A store sending more (gigabytes, as fast as it
 * can) would otherwise fill the hub's memory.
 */
export const MAX_ANSWER_BYTES = 1024 * 1024;

/** An answer body longer than MAX_ANSWER_BYTES, cut there; `status`: the answer's HTTP status. */
class AnswerTooLong extends Error {
  constructor(readonly status: number | undefined) {
    super(`the answer is longer than ${MAX_ANSWER_BYTES} bytes`);
    this.name = 'AnswerTooLong';
  }
}

/**
 * An answer body that had not ended `ms` after its headers, cut there. Named as the SDK's own time
 * limit is, so the request is sent again (TimeoutError is a transient error to its retries).
 */
class AnswerTooSlow extends Error {
  constructor(readonly ms: number) {
    super(`the answer's body did not end within ${ms} ms of its headers`);
    this.name = 'TimeoutError';
  }
}

/**
 * The SDK's collector of an answer body (its `streamCollector`): it refuses (and stops reading) one
 * longer than MAX_ANSWER_BYTES and, with `withinMs`, one that has not ended that long after the
 * headers. requestTimeout ends with the headers: a body sent a byte now and then would otherwise
 * hold a request (and the run) until the run's time limit, whatever requestTimeout says.
 */
function answerCollector(withinMs?: number) {
  return (stream: Readable & { statusCode?: number }): Promise<Uint8Array> =>
    new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let length = 0;
      const cut = (err: Error) => {
        clearTimeout(timer);
        stream.destroy();
        reject(err);
      };
      const timer = withinMs === undefined ? undefined : setTimeout(() => cut(new AnswerTooSlow(withinMs)), withinMs);
      stream.on('data', (chunk: Buffer) => {
        length += chunk.length;
        if (length <= MAX_ANSWER_BYTES) chunks.push(chunk);
        else cut(new AnswerTooLong(stream.statusCode));
      });
      stream.once('end', () => {
        clearTimeout(timer);
        resolve(Buffer.concat(chunks, length));
      });
      stream.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
}
const RETRY_PUBLISHED = 'Retry it: a collision on retry means it was';

/**
 * The committing request failed where S3 may have stored the object all the same: its answer lost,
 * late or too long (`commitFailed`). `what` says which answer and how it was missed.
 */
class MaybePublished extends PublishError {
  constructor(readonly what: string) {
    super('publication', `${what}: the file may have been published. ${RETRY_PUBLISHED}`);
  }
}

/**
 * What aborting a multipart upload found: it was aborted, it was no longer open (404), no longer open
 * when the abort was sent again after the first attempt's answer was lost (`gone again`: that
 * attempt may have aborted it), or what is left (a clause).
 */
type AbortOutcome = 'aborted' | 'gone' | 'gone again' | { left: string };

const MIN_PART_SIZE = 5 * 1024 * 1024;
const MAX_PART_SIZE = 5 * 1024 * 1024 * 1024;
const MAX_PARTS = 10_000;
const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EPIPE',
  'EADDRNOTAVAIL',
  'TimeoutError',
  'RequestTimeout',
]);

/** Error names the SDK gives an answer without an S3 error code (a HEAD, a body it could not read). */
const GENERIC_NAMES = new Set(['Unknown', 'UnknownError', 'Error', 'Forbidden', 'NotFound', 'BadRequest', '400', '403', '404', '500', '503']);

/**
 * An error code as S3 and compatible stores write them (`SignatureDoesNotMatch`,
 * `XAmzContentSHA256Mismatch`, `XMinioStorageFull`): a reason names one. Anything else in an answer's
 * `<Code>` (words, a line break, a terminal escape, kilobytes) is the store's own text, which a
 * reason never quotes: the HTTP status is named instead.
 */
const S3_CODE = /^[A-Za-z][A-Za-z0-9._-]{0,63}$/;

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for http(s) Agents that asks the outbound address policy for every connection: a
 * refused name or address fails the connection before a packet is sent; an admitted name is
 * connected to at the address the policy checked (no second resolution).
 */
export function egressLookup(egress: EgressPolicy) {
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    egress.admit(hostname).then(
      (address) => {
        const family = isIP(address);
        // An allow-listed name comes back as it is: resolve it normally.
        if (family === 0) {
          return dnsLookup(address, { ...options, all: true }, (err, addresses) => {
            if (err) return callback(err, options.all ? [] : '');
            if (options.all) return callback(null, addresses);
            const first = addresses[0];
            if (!first) return callback(Object.assign(new Error(`${address} resolves to no address`), { code: 'ENOTFOUND' }), '');
            return callback(null, first.address, first.family);
          });
        }
        if (options.all) return callback(null, [{ address, family }]);
        return callback(null, address, family);
      },
      (err: unknown) => callback(err as NodeJS.ErrnoException, options.all ? [] : ''),
    );
  };
}

interface S3Failure {
  name?: string;
  Code?: string;
  code?: unknown;
  message?: string;
  /** `attempts`: how many times the SDK sent the request (its retries included), set on the error it gives up with. */
  $metadata?: { httpStatusCode?: number; attempts?: number };
}

export class S3Destination implements Destination {
  readonly location: string;
  private readonly partSize: number;
  private readonly endpointName: string;

  constructor(private readonly options: S3DestinationOptions) {
    this.location = `s3://${options.bucket}/${options.key}`;
    if (options.key.startsWith('/')) {
      throw new PublishError('publication', `the S3 key ${options.key} starts with a slash: S3 keys are relative to the bucket (remove the leading slash from prefix)`);
    }
    if (!options.key) throw new PublishError('publication', 'the S3 key is empty');
    this.partSize = options.partSize ?? DEFAULT_PART_SIZE;
    if (!Number.isInteger(this.partSize) || this.partSize < MIN_PART_SIZE || this.partSize > MAX_PART_SIZE) {
      throw new RangeError(`partSize must be an integer from 5 MiB to 5 GiB (S3's part size limits), not ${options.partSize}`);
    }
    this.endpointName = options.endpoint ?? `the S3 endpoint of region ${options.region}`;
  }

  async publish(body: Readable, opts: PublishOptions): Promise<PublishReceipt> {
    const watch = new BodyWatch(body);
    const signal = opts.signal;
    const requestTimeoutMs = this.options.requestTimeoutMs ?? 120_000;
    const handler = (keepAlive: boolean) => {
      const agentOptions = { keepAlive, lookup: egressLookup(this.options.egress) };
      return new NodeHttpHandler({
        httpAgent: new HttpAgent(agentOptions),
        httpsAgent: new HttpsAgent(agentOptions),
        connectionTimeout: this.options.connectTimeoutMs ?? 10_000,
        requestTimeout: requestTimeoutMs,
        // Without it the handler only logs a warning when the time is up and the request waits on
        // (an endpoint that accepts the connection and never answers would hold the run).
        throwOnRequestTimeout: true,
      });
    };
    const config = {
      region: this.options.region,
      ...(this.options.endpoint ? { endpoint: this.options.endpoint, forcePathStyle: true } : {}),
      credentials: { accessKeyId: this.options.accessKeyId, secretAccessKey: this.options.secretAccessKey },
      requestChecksumCalculation: 'WHEN_REQUIRED' as const,
      responseChecksumValidation: 'WHEN_REQUIRED' as const,
    };
    const client = new S3Client({ ...config, requestHandler: handler(true), streamCollector: answerCollector(requestTimeoutMs) });
    // The committing request is sent once: were a lost answer retried, the retry would meet our own
    // object and report a collision. A failed commit is a publication failure; a retried run then
    // reports collision if the first attempt did land, which is what collision means on a retry.
    // It goes on a fresh connection, so that a kept-alive one the server has meanwhile closed
    // cannot fail it.
    // Its answer may take minutes (S3 completing a large multipart upload): bounded by COMMIT_ANSWER_MS instead.
    const commitClient = new S3Client({ ...config, requestHandler: handler(false), maxAttempts: 1, streamCollector: answerCollector() });
    let uploadId: string | undefined;
    /** CompleteMultipartUpload was sent: S3 may have completed the upload, whatever the answer. */
    let completing = false;
    /** The part being sent (settled once answered), and how to cancel it. */
    let sending: { done: Promise<void>; cancel: AbortController } | undefined;
    try {
      await this.admitEndpoint();
      await this.precheck(client, signal);
      const reader = new PartReader(body, this.partSize);
      const first = await unlessAborted(reader.next(), signal);
      if (!first.more) {
        const digest = opts.digest();
        await admitCommit(opts);
        const commit = this.commitSignal(signal);
        const out = await commitClient.send(
          new PutObjectCommand({
            Bucket: this.options.bucket,
            Key: this.options.key,
            Body: first.part,
            ContentLength: first.part.length,
            ContentType: this.options.contentType ?? 'text/csv; charset=utf-8',
            IfNoneMatch: '*',
            Metadata: { 'svc-sha256': digest },
          }),
          { abortSignal: commit.signal },
        ).catch((err: unknown) => this.commitFailed(err, commit.late()));
        return this.receipt(out.ETag, out.VersionId);
      }
      const created = await client.send(
        new CreateMultipartUploadCommand({
          Bucket: this.options.bucket,
          Key: this.options.key,
          ContentType: this.options.contentType ?? 'text/csv; charset=utf-8',
        }),
        signal ? { abortSignal: signal } : {},
      );
      uploadId = created.UploadId;
      if (!uploadId) throw new PublishError('publication', `${this.endpointName} answered CreateMultipartUpload without an upload id`);
      const parts: Array<{ PartNumber: number; ETag: string }> = [];
      let current = first;
      for (let partNumber = 1; ; partNumber++) {
        if (sending) await sending.done; // one part uploading while the next one is read: about two parts in memory
        if (partNumber > MAX_PARTS) {
          throw new PublishError('publication', `the file needs more than ${MAX_PARTS} parts of ${this.partSize} bytes, the most S3 accepts in one upload`);
        }
        const cancel = new AbortController();
        const done = this.uploadPart(client, uploadId, partNumber, current.part, parts, signal ? AbortSignal.any([signal, cancel.signal]) : cancel.signal);
        done.catch(() => {});
        sending = { done, cancel };
        if (!current.more) break;
        const failed = done.then(() => new Promise<never>(() => {}));
        current = await unlessAborted(Promise.race([reader.next(), failed]), signal);
      }
      await sending.done;
      await admitCommit(opts);
      parts.sort((a, b) => a.PartNumber - b.PartNumber);
      const commit = this.commitSignal(signal);
      completing = true;
      const out = await commitClient.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.options.bucket,
          Key: this.options.key,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts },
          IfNoneMatch: '*',
        }),
        { abortSignal: commit.signal },
      ).catch((err: unknown) => this.commitFailed(err, commit.late()));
      uploadId = undefined;
      return this.receipt(out.ETag, out.VersionId);
    } catch (err) {
      let failure = this.classify(err);
      const aborted = uploadId ? await this.abortUpload(client, uploadId, sending) : 'aborted';
      const left = typeof aborted === 'object' ? aborted.left : undefined;
      if (left) failure = new PublishError(failure.code, `${failure.reason}; ${left}`, left);
      // No longer open after its CompleteMultipartUpload was sent (a lost or failed answer): S3
      // completed it, as far as can be told. Nothing is left behind; the reason says what is known.
      if (aborted === 'gone again' && completing && failure instanceof MaybePublished) {
        failure = new PublishError(
          'publication',
          `${failure.what}, and the multipart upload was gone when its abort was sent again (HTTP 404; the answer to the first was lost, and that one may have aborted it): the file may have been published. ${RETRY_PUBLISHED}`,
        );
      }
      if (aborted === 'gone' && completing && failure.code === 'publication') {
        const what = failure instanceof MaybePublished ? failure.what : failure.reason;
        failure = new PublishError('publication', `${what}, and the multipart upload was gone when it was then aborted (HTTP 404): the file was most likely published. ${RETRY_PUBLISHED}`);
      }
      // Aborted after its CompleteMultipartUpload's answer was missed: the upload was still open, so
      // that Complete had not completed it, and an aborted upload never is (S3 answers a Complete
      // coming after the abort 404 NoSuchUpload). Nothing was published.
      if (aborted === 'aborted' && completing && failure instanceof MaybePublished) {
        failure = new PublishError('publication', `${failure.what}, and the multipart upload was then aborted, which S3 confirmed: an aborted upload is never completed, so the file was not published. Retry it`);
      }
      throw outcome(watch, signal, failure, left);
    } finally {
      watch.release();
      client.destroy();
      commitClient.destroy();
    }
  }

  /**
   * The committing request failed: when it may have reached S3 and only its answer is missing (no
   * answer within requestTimeout, the connection reset or closed once it was sent), S3 may have
   * stored the object, and the reason says so (as the SFTP rename's does); so too when its answer
   * did not come whole within COMMIT_ANSWER_MS (`late`); otherwise as any failure.
   */
  private commitFailed(err: unknown, late: boolean): never {
    const e = (err ?? {}) as S3Failure;
    const code = systemCode(err);
    const sent =
      (e.name === 'TimeoutError' && /requestTimeout/.test(String(e.message ?? ''))) || code === 'ECONNRESET' || code === 'EPIPE' || e.message === 'socket hang up';
    // A success whose answer is too long to read: S3 took the object, as far as can be told.
    const tooLong = err instanceof AnswerTooLong && err.status !== undefined && err.status < 300;
    const missing = late
      ? `did not come whole from ${this.endpointName} within ${this.commitAnswerMs / 1000} s (the request sent once; the connection was cut)`
      : tooLong
        ? `from ${this.endpointName} (HTTP ${(err as AnswerTooLong).status}) was longer than ${MAX_ANSWER_BYTES / 1024 / 1024} MiB, which no S3 answer is, and was not read further`
        : `did not come from ${this.endpointName} (${this.networkDetail(err)})`;
    if (!late && !tooLong && (e.$metadata?.httpStatusCode !== undefined || !sent)) throw err;
    throw new MaybePublished(`the answer to the request publishing ${this.location} ${missing}`);
  }

  /** The committing request's signal: the caller's, and the end of COMMIT_ANSWER_MS (`late` then true). */
  private commitSignal(signal: AbortSignal | undefined): { signal: AbortSignal; late: () => boolean } {
    const deadline = AbortSignal.timeout(this.commitAnswerMs);
    return { signal: signal ? AbortSignal.any([signal, deadline]) : deadline, late: () => deadline.aborted && !signal?.aborted };
  }

  private get commitAnswerMs(): number {
    return this.options.commitAnswerMs ?? COMMIT_ANSWER_MS;
  }

  /** An endpoint given as an IP literal is connected to without a name lookup: check it here. */
  private async admitEndpoint(): Promise<void> {
    if (!this.options.endpoint) return;
    const host = new URL(this.options.endpoint).hostname;
    if (parseAddress(host.replace(/^\[|\]$/g, ''))) await this.options.egress.admit(host);
  }

  private async precheck(client: S3Client, signal: AbortSignal | undefined): Promise<void> {
    try {
      await client.send(new HeadObjectCommand({ Bucket: this.options.bucket, Key: this.options.key }), signal ? { abortSignal: signal } : {});
    } catch (err) {
      const status = (err as S3Failure).$metadata?.httpStatusCode;
      // 404: absent. 403: absent too (without s3:ListBucket S3 answers 403 for a missing key). Any
      // other answer (a HEAD carries no error code: a wrong region is a bare 400 or 301) decides
      // nothing either: the conditional write is the real check and its answer names the cause.
      // No answer at all (network) ends here.
      if (status !== undefined) return;
      throw err;
    }
    throw new PublishError('collision', `${this.location} already exists; it was left untouched`);
  }

  private async uploadPart(
    client: S3Client,
    uploadId: string,
    partNumber: number,
    body: Buffer,
    parts: Array<{ PartNumber: number; ETag: string }>,
    signal: AbortSignal | undefined,
  ): Promise<void> {
    const out = await client.send(
      new UploadPartCommand({
        Bucket: this.options.bucket,
        Key: this.options.key,
        UploadId: uploadId,
        PartNumber: partNumber,
        Body: body,
        ContentLength: body.length,
      }),
      signal ? { abortSignal: signal } : {},
    );
    if (!out.ETag) throw new PublishError('publication', `${this.endpointName} answered UploadPart ${partNumber} without an ETag`);
    parts.push({ PartNumber: partNumber, ETag: out.ETag });
  }

  /**
   * Aborts the multipart upload (not under the caller's signal, within CLEANUP_MS in all, retries
   * included); answers what to add to the reason when it could not. A part still being sent (the
   * body failed while it was) is waited for first, within CLEANUP_MS, then cancelled: S3 may store
   * a part whose upload was in progress when the abort came, after the abort ("it might be
   * necessary to abort a given multipart upload multiple times"), which then holds storage no
   * listing of uploads shows. An upload no longer open (404 `NoSuchUpload`: completed, or aborted
   * already, by this abort's own first attempt when the 404 answers a retry) leaves nothing behind.
   */
  private async abortUpload(client: S3Client, uploadId: string, sending: { done: Promise<void>; cancel: AbortController } | undefined): Promise<AbortOutcome> {
    const ms = this.options.cleanupMs ?? CLEANUP_MS;
    if (sending && (await within(sending.done.then(settled, settled), ms)) === undefined) {
      sending.cancel.abort();
      await sending.done.catch(() => {});
    }
    try {
      await client.send(new AbortMultipartUploadCommand({ Bucket: this.options.bucket, Key: this.options.key, UploadId: uploadId }), {
        abortSignal: AbortSignal.timeout(ms),
      });
      return 'aborted';
    } catch (err) {
      const e = (err ?? {}) as S3Failure;
      const status = e.$metadata?.httpStatusCode;
      if (status === 404 && (e.name === 'NoSuchUpload' || e.Code === 'NoSuchUpload')) return (e.$metadata?.attempts ?? 1) > 1 ? 'gone again' : 'gone';
      const detail = status ? ` (HTTP ${status})` : (err as Error)?.name === 'AbortError' || (err as Error)?.name === 'TimeoutError' ? ` (no answer within ${(this.options.cleanupMs ?? CLEANUP_MS) / 1000} s)` : '';
      return { left: `the incomplete multipart upload ${uploadId} could not be aborted${detail}` };
    }
  }

  /** The store's ETag and version id with a NUL or half a surrogate pair (an XML answer may write one as `&#0;`) as U+FFFD: the run's record stores them. */
  private receipt(etag: string | undefined, versionId: string | undefined): PublishReceipt {
    return {
      location: this.location,
      ...(etag ? { etag: storableText(etag.replace(/^"|"$/g, '')) } : {}),
      ...(versionId ? { versionId: storableText(versionId) } : {}),
    };
  }

  /** Any failure as a PublishError: codes and statuses only, never S3's message text. */
  private classify(err: unknown): PublishError {
    if (err instanceof PublishError) return err;
    const denied = egressDenial(err);
    if (denied) return new PublishError('publication', `S3 endpoint not contacted: ${denied.message}`);
    const e = (err ?? {}) as S3Failure;
    const status = e.$metadata?.httpStatusCode ?? (err instanceof AnswerTooLong ? err.status : undefined);
    const where = this.location;
    if (err instanceof AnswerTooLong && status !== 412) {
      return new PublishError('publication', `${this.endpointName} answered HTTP ${status ?? '(unknown status)'} with more than ${MAX_ANSWER_BYTES / 1024 / 1024} MiB while publishing ${where}: no S3 answer is that long, and it was not read further`);
    }
    const code = err instanceof AnswerTooLong ? undefined : typeof e.Code === 'string' ? e.Code : typeof e.name === 'string' ? e.name : undefined;
    /** The code a reason may name: an S3 error code, not the SDK's generic name nor the store's own text. */
    const named = code !== undefined && S3_CODE.test(code) && !GENERIC_NAMES.has(code) ? code : undefined;
    if (code === 'PreconditionFailed' || status === 412 || code === 'ConditionalRequestConflict') {
      return new PublishError('collision', `${where} already exists (S3 ${named ?? status} to the conditional write); it was left untouched`);
    }
    if (code === 'NoSuchBucket') return new PublishError('publication', `bucket ${this.options.bucket} does not exist at ${this.endpointName}`);
    if (code === 'InvalidAccessKeyId' || code === 'SignatureDoesNotMatch') {
      return new PublishError('publication', `S3 refused the credentials in access_key_env/secret_key_env (${code})`);
    }
    if (status === 403) {
      return new PublishError('publication', `S3 refused the write to ${where} (${named ? `${named}, ` : ''}HTTP 403): the credentials in access_key_env/secret_key_env were refused or may not write there`);
    }
    if (code === 'NoSuchUpload') return new PublishError('publication', `the multipart upload of ${where} disappeared before it was completed (NoSuchUpload)`);
    if (code === 'EntityTooSmall' || code === 'EntityTooLarge') return new PublishError('publication', `S3 refused a part of ${where} (${code})`);
    if (code === 'PermanentRedirect' || code === 'AuthorizationHeaderMalformed' || status === 301) {
      return new PublishError('publication', `bucket ${this.options.bucket} is not in region ${this.options.region} (${named ?? `HTTP ${status}`})`);
    }
    if (status === undefined && (e.$metadata !== undefined || this.networkDetail(err) !== 'no answer')) {
      return new PublishError('publication', `could not reach ${this.endpointName}: ${this.networkDetail(err)}`);
    }
    if (status === undefined) return new PublishError('publication', `publishing ${where} failed (${code ?? 'unexpected error'})`);
    return new PublishError('publication', `S3 answered HTTP ${status}${named ? ` ${named}` : ''} while publishing ${where}`);
  }

  /** The local (Node.js) description of a failed connection: its error code, never a server's text. */
  private networkDetail(err: unknown): string {
    const e = (err ?? {}) as S3Failure;
    // The request handler's own time limit (its message names the handler, not the cause), with how
    // many times the request went: up to three (the SDK's retries), once for the committing request.
    const slow = err instanceof AnswerTooSlow;
    if (slow || (e.name === 'TimeoutError' && /requestTimeout/.test(String(e.message ?? '')))) {
      const attempts = e.$metadata?.attempts;
      const sent = attempts === undefined ? '' : attempts === 1 ? ', the request sent once' : `, the request sent ${attempts} times`;
      return `${slow ? 'no whole answer' : 'no answer'} within ${this.options.requestTimeoutMs ?? 120_000} ms (requestTimeout)${sent}`;
    }
    if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) {
      return describeNetworkError(err, { connectTimeoutMs: this.options.connectTimeoutMs ?? 10_000 });
    }
    if (typeof e.name === 'string' && NETWORK_CODES.has(e.name)) return e.name;
    const wrapped = wrappedCode(err);
    if (wrapped) return `${wrapped} (no connection)`;
    return 'no answer';
  }
}

/**
 * The system error code of a failed request: its `code`, or, as the SDK wraps an error from another
 * realm (a test runner's sandbox) into a bare Error whose message is the original's, the code that
 * message names, so that the hub under test reads a lost connection as it does in production.
 */
function systemCode(err: unknown): string | undefined {
  const code = (err as S3Failure | undefined)?.code;
  return typeof code === 'string' ? code : wrappedCode(err);
}

/** The system error code named by the message of an error the SDK wrapped (`systemCode`). */
function wrappedCode(err: unknown): string | undefined {
  return /^AWS SDK error wrapper for .*?\b(E[A-Z]{3,})\b/.exec(String((err as S3Failure | undefined)?.message ?? ''))?.[1];
}

const settled = () => true;

/**
 * Reads a byte stream in parts of `size` bytes: `next()` gives the next part (the last one may be
 * shorter or empty) and whether more bytes follow it. The chunks are copied into two part buffers
 * used in turn, allocated once: a part stays valid until the call after the next one (the upload
 * loop sends one part while it reads the next, and waits for that send before it reads again).
 * Holds the two parts plus the rest of one chunk; nothing of part size becomes garbage, so the
 * process's memory stays at about two parts however long the file (a fresh part buffer per part,
 * concatenated from the chunks, left tens of megabytes of dead buffers between garbage collections).
 */
class PartReader {
  private readonly iterator: AsyncIterator<Buffer | string>;
  private readonly buffers: Buffer[] = [];
  private turn = 0;
  /** What is left of the last chunk read, which did not fit into the previous part. */
  private leftover: Buffer | undefined;
  private ended = false;

  constructor(
    body: Readable,
    private readonly size: number,
  ) {
    // Not destroyed by an early return: BodyWatch.release() decides what happens to the body.
    this.iterator = body.iterator({ destroyOnReturn: false })[Symbol.asyncIterator]();
  }

  /** The next part; `more` is true when at least one byte follows it. */
  async next(): Promise<{ part: Buffer; more: boolean }> {
    let buffer = this.buffers[this.turn];
    if (!buffer) {
      buffer = Buffer.allocUnsafe(this.size);
      this.buffers[this.turn] = buffer;
    }
    this.turn ^= 1;
    let filled = 0;
    for (;;) {
      let chunk = this.leftover;
      this.leftover = undefined;
      if (!chunk) {
        if (this.ended) break;
        const { value, done } = await this.iterator.next();
        if (done) {
          this.ended = true;
          break;
        }
        chunk = typeof value === 'string' ? Buffer.from(value) : value;
        if (chunk.length === 0) continue;
      }
      const room = this.size - filled;
      if (room === 0) {
        // The part is full and at least one byte follows it.
        this.leftover = chunk;
        break;
      }
      if (chunk.length <= room) {
        buffer.set(chunk, filled);
        filled += chunk.length;
      } else {
        buffer.set(chunk.subarray(0, room), filled);
        filled += room;
        this.leftover = chunk.subarray(room);
      }
    }
    return { part: buffer.subarray(0, filled), more: this.leftover !== undefined };
  }
}
