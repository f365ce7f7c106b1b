import { isUtf8 } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';
import { createBrotliDecompress, createUnzip } from 'node:zlib';
import type { Context } from 'koa';
import { firstUndecodable } from '../src/validation/undecodable.js';

/** The media types a request body is read in as text (the others are not read: a route answers 415). */
export const TEXT_BODY_TYPES = ['text/*', 'application/yaml', 'application/x-yaml', 'application/json', 'application/*+json'];

/** Why a body could not be read, in the words and status of the body parser it replaces (koa-body's raw-body). */
class BodyReadError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/**
 * Reads a request's body as bytes as they arrive, each chunk handed to `onChunk` and dropped: every route's body (a
 * route whose body may be as large as svc.http.body-limit, the CSV ingest, decodes each as it comes). It replaces the
 * body parser (koa-body), which read a text body whole as one latin1 string the router turned back into bytes, and
 * waited without end for a compressed body whose client was gone mid-way. Reads what that parser read (the media
 * types of TEXT_BODY_TYPES; undefined for another, or no body) and refuses as it did, through `refuse` (its `onError`): a
 * Content-Length past `limit` before anything is read, a body past it (decompressed, for a gzip, deflate or br
 * Content-Encoding, named in any case, where that parser took lower case only) once it gets there, an unknown
 * Content-Encoding, bytes that do not inflate, a client gone before the end (`request aborted`). Resolves with the bytes read once the body has ended; nothing of the request is
 * listened to after it settles.
 */
export function bodyBytesReader(limit: number, refuse: (err: Error, ctx: Context) => never) {
  return async (ctx: Context, onChunk: (chunk: Buffer) => void, cap?: BodyCap): Promise<number | undefined> => {
    if (!ctx.is(TEXT_BODY_TYPES)) return undefined;
    try {
      return await readBytes(ctx.req, limit, onChunk, cap);
    } catch (err) {
      // What the client still sends of a body refused before its end is not read: the connection is closed after
      // the answer, which says so, so that no client sends its next request behind those bytes or on a socket the
      // server is about to close (a kept-alive client met ECONNRESET on its next request).
      if (!ctx.req.complete) ctx.set('Connection', 'close');
      if (!(err instanceof BodyReadError)) throw err;
      return refuse(err, ctx);
    }
  };
}

/**
 * A route's own bound below the limit (a JSON or YAML body's 1 MiB): a body past it is refused with `refusal()` as
 * soon as its Content-Length or its bytes read (decompressed) say so, not once the whole body, up to the limit, has
 * been read and held.
 */
export interface BodyCap {
  bytes: number;
  refusal: () => Error;
}

/**
 * Bytes read between two turns of the event loop (one turn's reads of a fast socket are megabytes), and gathered
 * before they are decoded (a body sent a few bytes at a time is still a few pieces of text): about a millisecond of
 * decoding. The text of a piece this large is made among V8's large objects, never copied by the collections of the
 * young generation: in pieces of 64 KiB, the text of 10 MB made each collection copy it, 10 to 55 ms at a time.
 */
const PIECE_BYTES = 256 * 1024;

function readBytes(req: IncomingMessage, limit: number, onChunk: (chunk: Buffer) => void, cap: BodyCap | undefined): Promise<number> {
  const encoding = req.headers['content-encoding'] || 'identity';
  // A content-coding's name is case-insensitive (RFC 9110): `GZIP` is gzip.
  const coding = encoding.toLowerCase();
  const inflater = coding === 'gzip' || coding === 'deflate' ? createUnzip() : coding === 'br' ? createBrotliDecompress() : undefined;
  if (!inflater && coding !== 'identity') return Promise.reject(new BodyReadError(`Unsupported Content-Encoding: ${encoding}`, 415));
  const given = req.headers['content-length'];
  const length = given && !inflater ? Math.trunc(Number(given)) : undefined;
  if (length !== undefined && length > limit) return Promise.reject(new BodyReadError('request entity too large', 413));
  if (length !== undefined && cap && length > cap.bytes) return Promise.reject(cap.refusal());
  const source: Readable = inflater ? req.pipe(inflater) : req;
  return new Promise<number>((resolve, reject) => {
    let received = 0;
    let settled = false;
    let sinceTurn = 0;
    const settle = (err: Error | undefined) => {
      if (settled) return;
      settled = true;
      req.off('aborted', onAborted).off('close', onClose).off('error', onError);
      source.off('data', onData).off('end', onEnd).off('error', onError);
      if (err) {
        // Nothing more is read: what the client still sends stays in the socket (as the body parser left it).
        req.unpipe();
        req.pause();
        inflater?.destroy();
        reject(err);
      } else {
        resolve(received);
      }
    };
    const onAborted = () => settle(new BodyReadError('request aborted', 400));
    // Closed before its body ended (a body that ended is still inflated to its end).
    const onClose = () => {
      if (!req.complete) onAborted();
    };
    const onError = (err: Error) => settle(new BodyReadError(err.message, 400));
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limit) return settle(new BodyReadError('request entity too large', 413));
      if (cap && received > cap.bytes) return settle(cap.refusal());
      onChunk(chunk);
      // A turn of the event loop after each piece's worth.
      sinceTurn += chunk.length;
      if (sinceTurn >= PIECE_BYTES) {
        sinceTurn = 0;
        source.pause();
        setImmediate(() => settled || source.resume());
      }
    };
    const onEnd = () => settle(length !== undefined && received !== length ? new BodyReadError('request size did not match content length', 400) : undefined);
    req.on('aborted', onAborted).on('close', onClose).on('error', onError);
    source.on('data', onData).on('end', onEnd).on('error', onError);
    // Gone already (the read began late: the middleware before it, a busy machine): its `aborted` and `close` came
    // and went, and a destroyed request emits nothing more, not even the rest of a body that had arrived whole.
    if (req.destroyed) onAborted();
  });
}

/** A body's text as it was decoded, in pieces (never joined into one string: that copies it whole), and its size in bytes. */
export interface StreamedText {
  pieces: readonly string[];
  bytes: number;
}

/**
 * UTF-8 bytes decoded as they arrive, each byte once, 64 KiB at a time (a chunk as the socket hands it over) cut
 * between two characters (one across two cuts is decoded whole with the next): the text in pieces (`pieces`, and
 * joined without a copy, `text`), whether it holds a NUL (found in the bytes: UTF-8 writes U+0000 as a zero byte and
 * nothing else as one) and its size. A leading byte order mark is dropped, as TextDecoder drops it. Past the first
 * byte sequence that is not UTF-8 nothing more is decoded or held: `invalidAt` is the offset a strict decoder of the
 * whole body refuses at (firstUndecodable), the body's length when it ends inside a character. The text can hold no
 * unpaired surrogate: UTF-8 encodes none.
 */
export class Utf8Pieces {
  readonly pieces: string[] = [];
  /** The pieces joined (a rope of them: nothing is copied until it is read). */
  text = '';
  bytes = 0;
  nul = false;
  invalidAt: number | undefined;
  /** Bytes decoded so far: where `pending` starts. */
  private decoded = 0;
  private pending: Buffer[] = [];
  private pendingBytes = 0;

  /** `pieceBytes`: the bytes gathered before they are decoded (tests cut a body finer). */
  constructor(private readonly pieceBytes = PIECE_BYTES) {}

  write(chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.invalidAt !== undefined) return;
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes >= this.pieceBytes) this.decodePending(false);
  }

  /** The body has ended: what is pending is decoded, a character it ends inside of refused. */
  end(): this {
    if (this.invalidAt === undefined) this.decodePending(true);
    return this;
  }

  private decodePending(last: boolean): void {
    const bytes = this.pending.length === 1 ? this.pending[0]! : Buffer.concat(this.pending, this.pendingBytes);
    const end = last ? bytes.length : wholeCharactersEnd(bytes);
    // The start of a character whose end has not arrived (at most three bytes), copied: the chunk is not held for it.
    this.pending = end < bytes.length ? [Buffer.from(bytes.subarray(end))] : [];
    this.pendingBytes = bytes.length - end;
    if (end === 0) return;
    const whole = bytes.subarray(0, end);
    if (!isUtf8(whole)) {
      // Everything before was UTF-8 and `whole` starts a character: a decoder's state there is its first.
      this.invalidAt = this.decoded + (firstUndecodable('utf-8', whole) ?? whole.length);
      this.pieces.length = 0;
      this.text = '';
      this.pending = [];
      return;
    }
    const start = this.decoded === 0 && whole[0] === 0xef && whole[1] === 0xbb && whole[2] === 0xbf ? 3 : 0;
    if (!this.nul && whole.indexOf(0, start) !== -1) this.nul = true;
    const piece = whole.toString('utf8', start);
    this.pieces.push(piece);
    this.text += piece;
    this.decoded += end;
  }
}

/** Where the last whole character of UTF-8 bytes ends: before the lead byte of one cut short at the end, if any. */
function wholeCharactersEnd(bytes: Buffer): number {
  // A character has at most three continuation bytes (10xxxxxx) after its lead byte.
  for (let at = bytes.length - 1; at >= 0 && at >= bytes.length - 4; at--) {
    const byte = bytes[at]!;
    if ((byte & 0xc0) === 0x80) continue;
    const size = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return at + size > bytes.length ? at : bytes.length;
  }
  return bytes.length;
}
