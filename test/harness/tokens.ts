import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT, type JWK, type JWTPayload, type CryptoKey } from 'jose';

/**
 * A real OIDC issuer on loopback for tests: it serves a discovery document and a JWKS with one RS256
 * and one ES256 key, and mints tokens signed by them (or by a key it does not publish).
 */
export interface TestIssuer {
  issuer: string;
  jwksUri: string;
  /** How many times the JWKS was fetched. */
  jwksFetches(): number;
  /** How many times the discovery document was asked for. */
  discoveryFetches(): number;
  /**
   * What the discovery document answers: `up` (the document), `down` (503), `garbage` (a 200 whose
   * body is a proxy's HTML page, no JSON). Default `up`.
   */
  discovery: 'up' | 'down' | 'garbage';
  /**
   * What the JWKS answers: `up` (the keys), `down` (503), `missing` (404), `forbidden` (403),
   * `not-a-key-set` (a 200 whose JSON holds no key set). Default `up`.
   */
  jwks: 'up' | 'down' | 'missing' | 'forbidden' | 'not-a-key-set';
  mint(claims: JWTPayload, options?: MintOptions): Promise<string>;
  /**
   * A token whose payload is JSON text written as given: `members` (`"tenant_id":3,"tenant_id":2`)
   * after the issuer's `iss`, `sub`, `iat` and `exp`, signed as `mint` signs. For payloads no JSON
   * serialiser writes (a key given twice, escapes in a key). The protected header is written the same
   * way: `{"alg":…,"kid":…,"typ":"JWT"}`, then `options.headerMembers` when given.
   */
  mintText(members: string, options?: MintOptions): Promise<string>;
  close(): Promise<void>;
}

export interface MintOptions {
  alg?: 'RS256' | 'ES256';
  /** Seconds from now; negative for an expired token; null for a token without `exp`. Default 300. */
  expiresIn?: number | null;
  /** `iat` in seconds from now (default −10: issued ten seconds ago). */
  issuedAt?: number;
  issuer?: string;
  audience?: string | string[];
  subject?: string;
  /** Sign with a key the JWKS does not contain (a forged token). */
  rogue?: boolean;
  /** mintText only: members written after the protected header's own (`"kid":"rs-1"` gives `kid` twice). */
  headerMembers?: string;
}

type KeyPair = { privateKey: CryptoKey; publicKey: CryptoKey; kid: string };

export async function startIssuer(): Promise<TestIssuer> {
  const rs = await pair('RS256', 'rs-1');
  const es = await pair('ES256', 'es-1');
  const rogueRs = await pair('RS256', 'rs-1');
  const rogueEs = await pair('ES256', 'es-1');
  const jwks = { keys: [await publicJwk(rs, 'RS256'), await publicJwk(es, 'ES256')] };
  let fetches = 0;
  let discoveries = 0;
  let base = '';
  const server: Server = createServer((req, res) => {
    if (req.url === '/.well-known/openid-configuration') {
      discoveries++;
      if (testIssuer.discovery === 'down') {
        res.statusCode = 503;
        return res.end('down');
      }
      res.setHeader('Content-Type', testIssuer.discovery === 'up' ? 'application/json' : 'text/html');
      res.end(testIssuer.discovery === 'up' ? JSON.stringify({ issuer: base, jwks_uri: `${base}/jwks` }) : '<html>maintenance</html>');
    } else if (req.url === '/jwks') {
      fetches++;
      if (testIssuer.jwks === 'down' || testIssuer.jwks === 'missing' || testIssuer.jwks === 'forbidden') {
        res.statusCode = { down: 503, missing: 404, forbidden: 403 }[testIssuer.jwks];
        return res.end(testIssuer.jwks);
      }
      res.setHeader('Content-Type', 'application/json');
      res.end(JSON.stringify(testIssuer.jwks === 'up' ? jwks : { error: 'realm not found' }));
    } else {
      res.statusCode = 404;
      res.end();
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const testIssuer: TestIssuer = {
    issuer: base,
    jwksUri: `${base}/jwks`,
    jwksFetches: () => fetches,
    discoveryFetches: () => discoveries,
    discovery: 'up',
    jwks: 'up',
    async mint(claims, options = {}) {
      const alg = options.alg ?? 'RS256';
      const key = alg === 'RS256' ? (options.rogue ? rogueRs : rs) : options.rogue ? rogueEs : es;
      const now = Math.floor(Date.now() / 1000);
      let jwt = new SignJWT({ ...claims })
        .setProtectedHeader({ alg, kid: key.kid, typ: 'JWT' })
        .setIssuer(options.issuer ?? base)
        .setSubject(options.subject ?? (claims.sub as string | undefined) ?? 'user-1')
        .setIssuedAt(now + (options.issuedAt ?? -10));
      if (options.expiresIn !== null) jwt = jwt.setExpirationTime(now + (options.expiresIn ?? 300));
      if (options.audience) jwt = jwt.setAudience(options.audience);
      return jwt.sign(key.privateKey);
    },
    async mintText(members, options = {}) {
      const alg = options.alg ?? 'RS256';
      const key = alg === 'RS256' ? (options.rogue ? rogueRs : rs) : options.rogue ? rogueEs : es;
      const now = Math.floor(Date.now() / 1000);
      const standard: JWTPayload = { iss: options.issuer ?? base, sub: options.subject ?? 'user-1', iat: now - 10 };
      if (options.expiresIn !== null) standard.exp = now + (options.expiresIn ?? 300);
      if (options.audience) standard.aud = options.audience;
      const text = `${JSON.stringify(standard).slice(0, -1)}${members ? `,${members}` : ''}}`;
      const header = `${JSON.stringify({ alg, kid: key.kid, typ: 'JWT' }).slice(0, -1)}${options.headerMembers ? `,${options.headerMembers}` : ''}}`;
      // Signed by hand, not with jose's CompactSign, which writes the header from an object.
      const input = `${Buffer.from(header).toString('base64url')}.${Buffer.from(text).toString('base64url')}`;
      const algorithm = alg === 'RS256' ? { name: 'RSASSA-PKCS1-v1_5' } : { name: 'ECDSA', hash: 'SHA-256' };
      const signature = await crypto.subtle.sign(algorithm, key.privateKey, new TextEncoder().encode(input));
      return `${input}.${Buffer.from(signature).toString('base64url')}`;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return testIssuer;
}

async function pair(alg: 'RS256' | 'ES256', kid: string): Promise<KeyPair> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  return { privateKey, publicKey, kid };
}

async function publicJwk(key: KeyPair, alg: string): Promise<JWK> {
  return { ...(await exportJWK(key.publicKey)), kid: key.kid, alg, use: 'sig' };
}
