import type { ReadableOptions } from 'node:stream';
import { type CopyToStreamQuery, to as copyToStdout } from 'pg-copy-streams';

/**
 * `COPY … TO STDOUT` read record by record without an object per record.
 *
 * In copy-out mode PostgreSQL sends one CopyData message per row (the protocol says so: "zero or
 * more CopyData messages (always one per row)"), so a record ends where its message ends. The
 * parser copies each chunk's message payloads into one buffer per chunk read from the socket, and
 * counts the records as they pass. pg-copy-streams' own parser makes a slice object for every
 * message and joins them into a second buffer: in a sampling heap profile of an export of a million
 * rows, ≈ 90 MB of short-lived slice objects and a second copy of every byte, which kept V8's young
 * generation growing through a long export.
 *
 * With `crlf` each record's final `\n` (PostgreSQL's record end in every text and CSV format)
 * becomes `\r\n` on the way: an export file's record ends, without looking at the record's bytes.
 */
export class CopyOutParser {
  /** CopyData messages (records) parsed so far. */
  records = 0;
  /** The message header (code and length), gathered across chunks when a chunk cuts it. */
  private readonly head = Buffer.alloc(5);
  private headFill = 0;
  private code = 0;
  /** Payload bytes of the current message not yet read. */
  private remaining = 0;
  /** The last payload byte of the current CopyData message (its record end, for the check). */
  private last = -1;

  constructor(private readonly crlf: boolean) {}

  /**
   * Parses one chunk of the server's bytes. `data`: the records' bytes of this chunk (undefined when
   * none). `end`: `done` after CopyDone (or at a message that belongs to the query's end, which is
   * left unread), `error` at an ErrorResponse; `rest` then holds the bytes from there on, unread, for
   * the connection's own parser. Throws when a record does not end with `\n`.
   */
  feed(chunk: Buffer): { data: Buffer | undefined; end?: 'done' | 'error'; rest?: Buffer } {
    const out = Buffer.allocUnsafe(chunk.length + 1);
    let o = 0;
    let i = 0;
    const length = chunk.length;
    const data = () => (o > 0 ? out.subarray(0, o) : undefined);
    while (i < length) {
      if (this.remaining === 0 && this.headFill < 5) {
        // A message header (its code, then its length), perhaps cut by the end of the chunk.
        if (this.headFill === 0) {
          const code = chunk[i]!;
          if (code === ERROR_RESPONSE) return { data: data(), end: 'error', rest: chunk.subarray(i) };
          // A message of the query's end without CopyDone: left to the connection's parser.
          if (code !== COPY_DATA && code !== COPY_DONE && !PASSED_OVER.has(code)) return { data: data(), end: 'done', rest: chunk.subarray(i) };
        }
        const take = Math.min(5 - this.headFill, length - i);
        chunk.copy(this.head, this.headFill, i, i + take);
        this.headFill += take;
        i += take;
        if (this.headFill < 5) break;
        this.code = this.head[0]!;
        this.remaining = this.head.readUInt32BE(1) - 4;
        if (this.code === COPY_DONE) {
          this.headFill = 0;
          this.remaining = 0;
          return { data: data(), end: 'done', rest: chunk.subarray(i) };
        }
        if (this.remaining === 0) {
          o = this.endMessage(out, o);
          this.headFill = 0;
        }
        continue;
      }
      // The current message's payload: a CopyData one is copied out.
      const n = Math.min(this.remaining, length - i);
      if (this.code === COPY_DATA) {
        chunk.copy(out, o, i, i + n);
        o += n;
        this.last = chunk[i + n - 1]!;
      }
      i += n;
      this.remaining -= n;
      if (this.remaining === 0) {
        o = this.endMessage(out, o);
        this.headFill = 0;
      }
    }
    return { data: data() };
  }

  /** A message read whole: a CopyData one is a record (its end checked, and made CRLF). Answers the output's new length. */
  private endMessage(out: Buffer, o: number): number {
    if (this.code !== COPY_DATA) return o;
    if (this.last !== LF) throw new Error('a COPY record did not end with a newline');
    this.records++;
    this.last = -1;
    if (!this.crlf) return o;
    out[o - 1] = CR;
    out[o] = LF;
    return o + 1;
  }
}

/** Backend messages of the copy-out sub-protocol (and those the server may send at any time). */
const COPY_DATA = 0x64; // d
const COPY_DONE = 0x63; // c
const ERROR_RESPONSE = 0x45; // E
/** Messages read over while copying out: CopyData, CopyOutResponse, and the asynchronous ones (NoticeResponse, NotificationResponse, ParameterStatus). */
const PASSED_OVER = new Set([COPY_DATA, 0x48, 0x4e, 0x41, 0x53]);
const LF = 0x0a;
const CR = 0x0d;

/** What pg-copy-streams' copy-to stream keeps for its subclasses: the unread bytes and the hand-back to the connection. */
interface CopyToInternals {
  _buffer: { push(chunk: Buffer): void };
  _detach(): void;
  _cleanup(): void;
}

// pg-copy-streams exports the stream's factory, not its class: the class is the prototype's.
const CopyToBase = Object.getPrototypeOf(copyToStdout('')).constructor as new (text: string, options?: ReadableOptions) => CopyToStreamQuery;

/**
 * The copy-to stream of pg-copy-streams (its submission, its hand-over of the connection, its error
 * path) with CopyOutParser as its parser: `client.query(new CopyRecords(sql))`. `records` counts
 * the records read so far; `rowCount` is COPY's own count once it has ended.
 */
export class CopyRecords extends CopyToBase {
  private readonly parser: CopyOutParser;

  constructor(text: string, options: { crlf?: boolean } = {}) {
    super(text);
    this.parser = new CopyOutParser(options.crlf === true);
  }

  /** Records read so far. */
  get records(): number {
    return this.parser.records;
  }

  /** Called by the base class for every chunk read from the connection; answers whether to read on. */
  _parse(chunk: Buffer): boolean {
    const self = this as unknown as CopyToInternals;
    let parsed: ReturnType<CopyOutParser['feed']>;
    try {
      parsed = this.parser.feed(chunk);
    } catch (err) {
      this.destroy(err as Error);
      return false;
    }
    if (parsed.end === 'error') {
      // As the base class does: the connection's parser reads the ErrorResponse and fails the query.
      self._buffer.push(parsed.rest!);
      self._detach();
      return false;
    }
    const drained = parsed.data ? this.push(parsed.data) : true;
    if (parsed.end === 'done') {
      self._buffer.push(parsed.rest!);
      self._detach();
      this.push(null);
      self._cleanup();
    }
    return drained;
  }
}
