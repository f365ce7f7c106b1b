import { createServer, type IncomingMessage, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import fc from 'fast-check';
import Koa from 'koa';
import { HttpMethodEnum, koaBody } from 'koa-body';
import { firstUndecodable } from '../src/validation/undecodable.js';
import { deferred } from '../test/harness/deferred.js';
import { bodyBytesReader, TEXT_BODY_TYPES, Utf8Pieces } from './body-bytes.js';

/**
 * The hub's body reader (apiserver/body-bytes.ts): UTF-8 decoded as it arrives (the CSV ingest), cut anywhere, gives
 * the text a decoder of the whole body gives and refuses it at the same offset; the bytes read, and each refusal, are
 * those of the body parser it replaced (koa-body); a client gone mid-body, or cut by the server's request timeout,
 * ends the read with nothing of it left listening on the request.
 */

describe('Utf8Pieces', () => {
  const pieces = (bytes: Uint8Array, cuts: number[], pieceBytes: number) => {
    const decoding = new Utf8Pieces(pieceBytes);
    let at = 0;
    for (const cut of [...cuts].sort((a, b) => a - b)) {
      decoding.write(Buffer.from(bytes.subarray(at, Math.max(at, cut))));
      at = Math.max(at, cut);
    }
    decoding.write(Buffer.from(bytes.subarray(at)));
    return decoding.end();
  };
  const cuts = (n: number) => fc.array(fc.nat({ max: n }), { maxLength: 12 });

  it('decodes UTF-8 cut anywhere as a decoder of the whole body does, a leading byte order mark dropped, a NUL found', () => {
    const text = fc.tuple(fc.boolean(), fc.string({ unit: 'binary', maxLength: 60 }), fc.boolean()).map(([bom, t, nul]) => `${bom ? '\ufeff' : ''}${t}${nul ? '\u0000x' : ''}`);
    fc.assert(
      fc.property(
        text.chain((t) => fc.tuple(fc.constant(Buffer.from(t)), cuts(Buffer.byteLength(t)), fc.integer({ min: 1, max: 9 }))),
        ([bytes, at, pieceBytes]) => {
          const read = pieces(bytes, at, pieceBytes);
          const whole = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
          expect({ joined: read.pieces.join(''), text: read.text, nul: read.nul, invalidAt: read.invalidAt, bytes: read.bytes }).toEqual({
            joined: whole,
            text: whole,
            nul: whole.includes('\u0000'),
            invalidAt: undefined,
            bytes: bytes.length,
          });
        },
      ),
      { numRuns: 500 },
    );
  });

  it('refuses bytes that are not UTF-8 at the offset a strict decoder of the whole body refuses them, holding no text', () => {
    const valid = fc.string({ unit: 'binary', maxLength: 20 }).map((t) => Buffer.from(t));
    // Text with bytes put in that UTF-8 refuses (a lone continuation, an overlong form, a surrogate, a character cut short).
    const junk = fc.constantFrom([0x80], [0xc0, 0xaf], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xff], [0xe2, 0x82], [0xf0, 0x9f, 0x98]);
    const body = fc.tuple(valid, junk, valid).map(([a, j, b]) => Buffer.concat([a, Buffer.from(j), b]));
    fc.assert(
      fc.property(
        body.chain((b) => fc.tuple(fc.constant(b), cuts(b.length), fc.integer({ min: 1, max: 9 }))),
        ([bytes, at, pieceBytes]) => {
          const read = pieces(bytes, at, pieceBytes);
          expect({ invalidAt: read.invalidAt, pieces: read.pieces, text: read.text }).toEqual({ invalidAt: firstUndecodable('utf-8', bytes) ?? bytes.length, pieces: [], text: '' });
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('bodyBytesReader over HTTP', () => {
  const LIMIT = 64 * 1024;
  // How the hub answers a body it cannot read (apiserver/app.ts): the same for both readers.
  const refuse = (err: Error, ctx: Koa.Context): never => ctx.throw(/too large/i.test(err.message) ? 413 : 400, /too large/i.test(err.message) ? 'too large' : `body is not valid: ${err.message}`);
  const readBody = koaBody({ json: false, text: true, urlencoded: false, multipart: false, encoding: 'latin1', textLimit: LIMIT, textTypes: TEXT_BODY_TYPES, parsedMethods: [HttpMethodEnum.POST], onError: refuse });
  const readBytes = bodyBytesReader(LIMIT, refuse);
  const LISTENED = ['data', 'end', 'error', 'close', 'aborted'] as const;
  const listeners = (req: IncomingMessage) => LISTENED.map((name) => req.listenerCount(name));
  /** What the last read by bodyBytesReader ended with, and the request's listeners before and after it. */
  let ended = deferred<{ outcome: string; before: number[]; after: number[] }>();
  let server: Server;
  let port: number;

  beforeAll(async () => {
    const app = new Koa();
    app.silent = true; // a client gone, a request timed out: expected here
    app.use(async (ctx) => {
      try {
        if (ctx.path === '/parser') {
          await readBody(ctx, async () => undefined);
          const sent = (ctx.request as { body?: unknown }).body;
          ctx.body = { read: typeof sent === 'string' ? Buffer.from(sent, 'latin1').toString('base64') : null };
          return;
        }
        // The read begins only once the client is gone (a hub slow to get to the body: its middleware, a busy machine).
        if (ctx.path === '/late' && !ctx.req.destroyed) await new Promise((resolve) => ctx.req.once('close', resolve));
        const before = listeners(ctx.req);
        const chunks: Buffer[] = [];
        try {
          const bytes = await readBytes(ctx, (chunk) => chunks.push(chunk));
          ctx.body = { read: bytes === undefined ? null : Buffer.concat(chunks).toString('base64'), bytes };
          ended.resolve({ outcome: 'read', before, after: listeners(ctx.req) });
        } catch (err) {
          ended.resolve({ outcome: `${(err as { status: number }).status} ${(err as Error).message}`, before, after: listeners(ctx.req) });
          throw err;
        }
      } catch (err) {
        ctx.status = (err as { status?: number }).status ?? 500;
        ctx.body = { error: (err as Error).message };
      }
    });
    // The request timeout shortened (Node's default is 300 s): a body sent too slowly is cut by the server.
    server = createServer({ requestTimeout: 1_000, headersTimeout: 1_000, connectionsCheckingInterval: 50 }, app.callback());
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });

  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  type Sent = { headers: Record<string, string | number>; body?: Buffer };
  const send = (path: string, { headers, body }: Sent) =>
    new Promise<{ status: number; body: unknown }>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, method: 'POST', headers: { ...headers, connection: 'close' } }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString()) }));
      });
      req.on('error', reject);
      req.end(body);
    });

  it('reads what the body parser reads and refuses what it refuses, in its words', async () => {
    const text = Buffer.from(`id,name\n1,Åsa € 😀 日本語\n${'2,x\n'.repeat(3000)}`);
    const over = Buffer.alloc(LIMIT + 1, 'a');
    const cases: Record<string, Sent> = {
      plain: { headers: { 'Content-Type': 'text/csv', 'Content-Length': text.length }, body: text },
      chunked: { headers: { 'Content-Type': 'text/csv; charset=utf-8', 'Transfer-Encoding': 'chunked' }, body: text },
      gzip: { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': 'gzip' }, body: gzipSync(text) },
      deflate: { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': 'deflate' }, body: deflateSync(text) },
      br: { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': 'br' }, body: brotliCompressSync(text) },
      unknownEncoding: { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': 'compress' }, body: text },
      notGzip: { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': 'gzip' }, body: text },
      lengthOverLimit: { headers: { 'Content-Type': 'text/csv', 'Content-Length': over.length }, body: over },
      chunkedOverLimit: { headers: { 'Content-Type': 'text/csv', 'Transfer-Encoding': 'chunked' }, body: over },
      inflatedOverLimit: { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': 'gzip' }, body: gzipSync(over) },
      json: { headers: { 'Content-Type': 'application/json' }, body: Buffer.from('{"a":1}') },
      notText: { headers: { 'Content-Type': 'application/octet-stream' }, body: text },
      noType: { headers: {}, body: text },
      empty: { headers: { 'Content-Type': 'text/csv', 'Content-Length': 0 } },
    };
    const seen: Record<string, unknown> = {};
    const expected: Record<string, unknown> = {};
    for (const [name, sent] of Object.entries(cases)) {
      expected[name] = await send('/parser', sent);
      seen[name] = await send('/bytes', sent);
      if ((expected[name] as { status: number }).status === 200) delete (seen[name] as { body: { bytes?: number } }).body.bytes;
    }
    // Under jest an error zlib makes is not an instance of the test's Error, and koa-body writes its properties instead
    // of its message: its words are the reader's (`incorrect header check`) when the hub runs.
    expect(seen.notGzip).toEqual({ status: 400, body: { error: 'body is not valid: incorrect header check' } });
    expect({ ...seen, notGzip: (expected.notGzip as { status: number }).status }).toEqual({ ...expected, notGzip: 400 });
    // What the cases cover: read as sent (inflated), and each refusal.
    expect(expected.gzip).toEqual({ status: 200, body: { read: text.toString('base64') } });
    expect([expected.lengthOverLimit, expected.chunkedOverLimit, expected.inflatedOverLimit]).toEqual(Array(3).fill({ status: 413, body: { error: 'too large' } }));
    expect(expected.unknownEncoding).toEqual({ status: 400, body: { error: 'body is not valid: Unsupported Content-Encoding: compress' } });
    expect(expected.notText).toEqual({ status: 200, body: { read: null } });
  });

  it('takes a content-coding\'s name in any case (RFC 9110: they are case-insensitive), as the body parser did not; an unknown one is refused as before', async () => {
    const text = Buffer.from(`id,name\n1,Åsa € 😀 日本語\n${'2,x\n'.repeat(300)}`);
    const read = { status: 200, body: { read: text.toString('base64') } };
    const sent = (encoding: string, body: Buffer) => send('/bytes', { headers: { 'Content-Type': 'text/csv', 'Content-Encoding': encoding }, body }).then(({ status, body: answer }) => {
      delete (answer as { bytes?: number }).bytes;
      return { status, body: answer };
    });
    expect(await sent('GZIP', gzipSync(text))).toEqual(read);
    expect(await sent('Deflate', deflateSync(text))).toEqual(read);
    expect(await sent('BR', brotliCompressSync(text))).toEqual(read);
    expect(await sent('Identity', text)).toEqual(read);
    expect(await sent('COMPRESS', text)).toEqual({ status: 400, body: { error: 'body is not valid: Unsupported Content-Encoding: COMPRESS' } });
  });

  /** Sends the headers and `part` of a body of `length` bytes, then what `then` does with the request. */
  const partly = (headers: Record<string, string | number>, part: Buffer, then: (req: ReturnType<typeof request>) => void, path = '/bytes') => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', headers });
    const answered = new Promise<number | string>((resolve) => {
      req.on('response', (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.on('error', (err) => resolve((err as NodeJS.ErrnoException).code ?? err.message));
    });
    req.flushHeaders();
    req.write(part, () => then(req));
    return answered;
  };

  it.each([
    ['identity', {}, Buffer.from('id,name\n1,Åsa €'.repeat(100))],
    ['gzip', { 'Content-Encoding': 'gzip' }, gzipSync(Buffer.from('id,name\n1,Åsa €'.repeat(1000))).subarray(0, 100)],
  ])('a client gone mid-body (%s): the read ends as aborted, nothing of it left listening on the request', async (_name, encoding, part) => {
    ended = deferred();
    const answered = partly({ 'Content-Type': 'text/csv', 'Content-Length': part.length * 3, ...encoding }, part, (req) => req.destroy());
    const read = await ended.promise;
    expect(read).toEqual({ outcome: '400 body is not valid: request aborted', before: read.before, after: read.before });
    expect(await answered).toBe('ECONNRESET');
  });

  it.each([
    ['identity', {}, Buffer.from('id,name\n1,Åsa €'.repeat(100)), 3],
    ['gzip', { 'Content-Encoding': 'gzip' }, gzipSync(Buffer.from('id,name\n1,Åsa €'.repeat(1000))).subarray(0, 100), 3],
    ['identity, its body sent whole', {}, Buffer.from('id,name\n1,Åsa €'.repeat(100)), 1],
  ])('a client gone before the read begins (%s): the read ends as aborted at once, not waiting for events that came and went', async (_name, encoding, part, parts) => {
    ended = deferred();
    const answered = partly({ 'Content-Type': 'text/csv', 'Content-Length': part.length * parts, ...encoding }, part, (req) => req.destroy(), '/late');
    const read = await ended.promise;
    expect(read).toEqual({ outcome: '400 body is not valid: request aborted', before: read.before, after: read.before });
    expect(await answered).toBe('ECONNRESET');
  });

  it('a body sent too slowly is cut by the server\'s request timeout (a 408): the read ends as aborted, nothing left listening', async () => {
    ended = deferred();
    const part = Buffer.from('id,name\n1,Åsa');
    const answered = partly({ 'Content-Type': 'text/csv', 'Content-Length': 1000 }, part, () => undefined);
    const read = await ended.promise;
    expect(read).toEqual({ outcome: '400 body is not valid: request aborted', before: read.before, after: read.before });
    expect(await answered).toBe(408);
  });
});
