import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/** The fixed test credentials of the demo source (CONTRACTS.md section 1). */
export interface DemoCredentials {
  username: string;
  password: string;
  bearerToken: string;
  apiKey: string;
}

const DEFAULT_CREDENTIALS: Readonly<DemoCredentials> = {
  username: 'demo',
  password: 'demo-password',
  bearerToken: 'demo-bearer-token',
  apiKey: 'demo-api-key',
};

/** Defaults overridden by DEMO_USERNAME, DEMO_PASSWORD, DEMO_BEARER_TOKEN, DEMO_API_KEY (empty = unset). */
export function credentialsFromEnv(env: NodeJS.ProcessEnv = process.env): DemoCredentials {
  return {
    username: env.DEMO_USERNAME || DEFAULT_CREDENTIALS.username,
    password: env.DEMO_PASSWORD || DEFAULT_CREDENTIALS.password,
    bearerToken: env.DEMO_BEARER_TOKEN || DEFAULT_CREDENTIALS.bearerToken,
    apiKey: env.DEMO_API_KEY || DEFAULT_CREDENTIALS.apiKey,
  };
}

export type AuthKind = 'basic' | 'bearer' | 'api-key' | 'none';

function same(given: string, expected: string): boolean {
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Whether the request carries the credential `kind` asks for. */
export function authorized(kind: AuthKind, req: IncomingMessage, query: URLSearchParams, creds: DemoCredentials): boolean {
  const header = req.headers.authorization ?? '';
  switch (kind) {
    case 'none':
      return true;
    case 'basic': {
      const match = /^Basic\s+(\S+)\s*$/i.exec(header);
      if (!match) return false;
      const decoded = Buffer.from(match[1]!, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      return colon >= 0 && same(decoded.slice(0, colon), creds.username) && same(decoded.slice(colon + 1), creds.password);
    }
    case 'bearer': {
      const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
      return match !== null && same(match[1]!, creds.bearerToken);
    }
    case 'api-key': {
      const key = req.headers['x-api-key'];
      const given = typeof key === 'string' ? key : query.get('api_key');
      return given !== null && same(given, creds.apiKey);
    }
  }
}

/** The WWW-Authenticate challenge sent with a 401, where the scheme has one. */
export function challenge(kind: AuthKind): Record<string, string> {
  if (kind === 'basic') return { 'WWW-Authenticate': 'Basic realm="demo-source"' };
  if (kind === 'bearer') return { 'WWW-Authenticate': 'Bearer realm="demo-source"' };
  return {};
}

export function refusal(kind: AuthKind): string {
  if (kind === 'basic') return 'basic credentials missing or wrong';
  if (kind === 'bearer') return 'bearer token missing or wrong';
  return 'api key missing or wrong (header X-API-Key)';
}
