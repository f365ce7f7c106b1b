import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { DemoCredentials } from './credentials.js';
import type { Partners } from './data.js';

/** Everything a dialect handler needs for one request. */
export interface RequestContext {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  /** `http://<Host header>`: the origin absolute next links are built on. */
  origin: string;
  data: Partners;
  credentials: DemoCredentials;
  /** Per-key request counts of the flaky dialect and the flaky SOAP service; /admin/reset clears it. */
  flaky: Map<string, number>;
  /** The request body, once read (requestBody): the recorder reads it before routing. */
  body?: Promise<string>;
}

/** A refusal with a JSON body `{error, message}`; thrown by handlers, rendered by the server. */
export class HttpError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly headers: OutgoingHttpHeaders = {},
  ) {
    super(message);
  }
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: OutgoingHttpHeaders = {}): void {
  sendText(res, status, 'application/json; charset=utf-8', JSON.stringify(body), headers);
}

export function sendText(res: ServerResponse, status: number, contentType: string, text: string, headers: OutgoingHttpHeaders = {}): void {
  res.writeHead(status, { 'Content-Type': contentType, 'Content-Length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

const MAX_BODY = 1024 * 1024;

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY) throw new HttpError(413, 'payload_too_large', `request bodies are limited to ${MAX_BODY} bytes`);
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/** The request body, read once per request however many times it is asked for. */
export function requestBody(ctx: RequestContext): Promise<string> {
  ctx.body ??= readBody(ctx.req);
  return ctx.body;
}

export const DEFAULT_PAGE_SIZE = 50;
export const MAX_PAGE_SIZE = 500;

/** A non-negative integer parameter; absent or empty gives `fallback`, anything else malformed is a 400. */
export function intParam(raw: string | null | undefined, name: string, fallback: number): number {
  if (raw === null || raw === undefined || raw.trim() === '') return fallback;
  if (!/^\s*\d+\s*$/.test(raw)) throw new HttpError(400, 'bad_request', `${name} must be a non-negative integer, got '${raw}'`);
  return Number(raw);
}

/** A page size: default 50, at least 1, values above 500 are capped at 500. */
export function pageSizeParam(raw: string | null | undefined, name: string): number {
  const size = intParam(raw, name, DEFAULT_PAGE_SIZE);
  if (size < 1) throw new HttpError(400, 'bad_request', `${name} must be at least 1, got '${raw}'`);
  return Math.min(size, MAX_PAGE_SIZE);
}

/** The same path with some query parameters replaced, as an absolute URL (other parameters kept). */
export function linkTo(ctx: RequestContext, changes: Record<string, string | number>): string {
  const params = new URLSearchParams(ctx.url.searchParams);
  for (const [key, value] of Object.entries(changes)) params.set(key, String(value));
  return `${ctx.origin}${ctx.url.pathname}?${params}`;
}
