import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it, jest } from '@jest/globals';
import { type CryptoKey, exportJWK, generateKeyPair, type JWK, SignJWT } from 'jose';
import { startIssuer, type TestIssuer } from '../../test/harness/tokens.js';
import { Unavailable } from '../errors.js';
import { freePort } from '../db/embedded.js';
import { captureLogs } from '../../test/harness/log-capture.js';
import { loggableText, loggableUrl } from '../observability/url-redaction.js';
import { CLOCK_TOLERANCE_S, TokenRejected, TokenVerifier } from './verifier.js';

/** The token verifier against a real loopback issuer: discovery vs an explicit jwks-uri, algorithms, claims. */

let issuer: TestIssuer;

beforeAll(async () => {
  issuer = await startIssuer();
});

afterAll(async () => {
  await issuer?.close();
});

describe('loggableUrl', () => {
  it('keeps scheme, host, port and path; masks userinfo and every query value; drops a fragment', () => {
    expect(loggableUrl('https://u:p@hooks.example.com:8443/a/b?token=abc&x=1#frag')).toBe('https://***@hooks.example.com:8443/a/b?token=***&x=***');
    expect(loggableUrl('https://hooks.example.com/hook')).toBe('https://hooks.example.com/hook');
    expect(loggableUrl('https://user@x.example/')).toBe('https://***@x.example/');
    expect(loggableUrl('not a url //user:pass@x')).toBe('not a url //***@x');
    expect(loggableText('cannot fetch http://u:p@h.example/k?t=1, then https://h.example/x')).toBe('cannot fetch http://***@h.example/k?t=***, then https://h.example/x');
  });
});

describe('key discovery', () => {
  it('an identity provider that cannot be reached is a 503, not a refused token', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const token = await issuer.mint({ tenant_id: 1 });
    for (const verifier of [new TokenVerifier({ issuer: closed }), new TokenVerifier({ issuer: issuer.issuer, jwksUri: `${closed}/jwks` })]) {
      const err = await verifier.verify(token).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Unavailable);
      expect((err as Unavailable).render()).toEqual({ status: 503, body: { json: { error: 'identity provider unreachable' } } });
    }
  });

  it('an identity provider answering an outage (503, 502 from a proxy, 429) for its discovery document or key set is a 503 too, not a refused token', async () => {
    let status = 503;
    const down = createServer((_req, res) => {
      res.statusCode = status;
      res.end('down');
    });
    await new Promise<void>((resolve) => down.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(down.address() as AddressInfo).port}`;
    try {
      const token = await issuer.mint({ tenant_id: 1 });
      for (status of [503, 502, 429]) {
        for (const verifier of [new TokenVerifier({ issuer: base }), new TokenVerifier({ issuer: issuer.issuer, jwksUri: `${base}/jwks` })]) {
          const err = await verifier.verify(token).catch((e: unknown) => e);
          expect(err).toBeInstanceOf(Unavailable);
          expect((err as Unavailable).render()).toEqual({ status: 503, body: { json: { error: 'identity provider unreachable' } } });
        }
      }
      // A key set URL carrying a credential in its query or userinfo: the log names the host and path, not the credential.
      status = 503;
      const logs = captureLogs('info');
      try {
        const secretive = `http://keys:pw-in-userinfo@127.0.0.1:${(down.address() as AddressInfo).port}/jwks?access_token=tok-in-query&realm=x`;
        await expect(new TokenVerifier({ issuer: issuer.issuer, jwksUri: secretive }).verify(token)).rejects.toThrow(Unavailable);
        const warned = logs.lines().find((l) => l.msg === 'identity provider unreachable');
        // fetch refuses a URL with userinfo, quoting it whole in its message
        expect(warned?.err).toBe(`Request cannot be constructed from a URL that includes credentials: http://***@127.0.0.1:${(down.address() as AddressInfo).port}/jwks?access_token=***&realm=***`);
        const queried = `http://127.0.0.1:${(down.address() as AddressInfo).port}/jwks?access_token=tok-in-query`;
        await expect(new TokenVerifier({ issuer: issuer.issuer, jwksUri: queried }).verify(token)).rejects.toThrow(Unavailable);
        expect(logs.lines().filter((l) => l.msg === 'identity provider unreachable').at(-1)?.err).toBe(`key set http://127.0.0.1:${(down.address() as AddressInfo).port}/jwks?access_token=*** answered 503`);
        expect(logs.raw()).not.toMatch(/tok-in-query|pw-in-userinfo/);
      } finally {
        logs.restore();
      }
      // An answer that will not pass (the wrong URL: 404) stays a refused token.
      status = 404;
      await expect(new TokenVerifier({ issuer: issuer.issuer, jwksUri: `${base}/jwks` }).verify(token)).rejects.toThrow(TokenRejected);
    } finally {
      await new Promise<void>((resolve) => down.close(() => resolve()));
    }
  });

  it('a provider that goes down after the keys were fetched: the keys fetched last verify tokens, asked again every outageRetryMs, and a key they lack is a 503', async () => {
    // The key set as the issuer serves it, but the RS256 key only; `mode` switches the server to an outage.
    const relay = await keySetRelay(['rs-1']);
    const { jwksUri } = relay;
    const logs = captureLogs('info');
    const later = fakeWallClock();
    try {
      const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri, timings: { maxAgeMs: 50, outageRetryMs: 300, staleMaxMs: 60_000 } });
      const rs = () => issuer.mint({ tenant_id: 1 }, { alg: 'RS256' });
      await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(1);

      // Past the key set's age, the provider answers 503: the keys fetched before verify the token.
      relay.mode = 'down';
      later(80);
      await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(2);
      expect(logs.lines().filter((l) => l.msg === 'identity provider unreachable: verifying tokens with the signing keys fetched last')).toHaveLength(1);
      // Within outageRetryMs the provider is not asked again, and each call answers at once.
      for (let i = 0; i < 3; i++) await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(2);
      // A key the set fetched last lacks may be one the provider has added since: 503, not a refused token.
      const es = await issuer.mint({ tenant_id: 1 }, { alg: 'ES256' });
      await expect(verifier.verify(es)).rejects.toThrow(Unavailable);
      // A forged token stays refused.
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'RS256', rogue: true }))).rejects.toThrow(TokenRejected);

      // A provider that does not answer at all: after outageRetryMs one call waits for the fetch to give up, then it goes on.
      relay.mode = 'hang';
      later(350);
      await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(3);

      // Back up: after outageRetryMs the key set is fetched again and used.
      relay.mode = 'up';
      later(350);
      await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(4);
      await expect(verifier.verify(es)).rejects.toThrow(TokenRejected); // up: a key the set lacks is refused (401)

      // Keys fetched longer ago than staleMaxMs stand in for nothing.
      const strict = new TokenVerifier({ issuer: issuer.issuer, jwksUri, timings: { maxAgeMs: 50, outageRetryMs: 300, staleMaxMs: 60 } });
      await expect(strict.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      relay.mode = 'down';
      later(80);
      await expect(strict.verify(await rs())).rejects.toThrow(Unavailable);
    } finally {
      jest.useRealTimers();
      logs.restore();
      await relay.close();
    }
  }, 20_000);

  it('finds the JWKS through <issuer>/.well-known/openid-configuration and fetches it once', async () => {
    const verifier = new TokenVerifier({ issuer: issuer.issuer });
    const before = issuer.jwksFetches();
    const rs = await verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'RS256', subject: 'disc-rs' }));
    const es = await verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'ES256', subject: 'disc-es' }));
    expect(rs).toMatchObject({ iss: issuer.issuer, sub: 'disc-rs', tenant_id: 1 });
    expect(es).toMatchObject({ iss: issuer.issuer, sub: 'disc-es' });
    expect(issuer.jwksFetches() - before).toBe(1);
  });

  it('tolerates a trailing slash on the configured issuer when discovering (but then requires it in iss)', async () => {
    const verifier = new TokenVerifier({ issuer: `${issuer.issuer}/` });
    await expect(verifier.verify(await issuer.mint({}, { issuer: `${issuer.issuer}/` }))).resolves.toMatchObject({ iss: `${issuer.issuer}/` });
    await expect(verifier.verify(await issuer.mint({}))).rejects.toThrow(TokenRejected);
  });

  it('an issuer with no discovery document: discovery fails, an explicit jwks-uri works', async () => {
    const realm = `${issuer.issuer}/realm`;
    const t = await issuer.mint({}, { issuer: realm, alg: 'ES256' });
    const discovering = new TokenVerifier({ issuer: realm });
    await expect(discovering.verify(t)).rejects.toThrow(/OIDC discovery .* answered 404/);
    await expect(discovering.verify(t)).rejects.toThrow(TokenRejected);
    const explicit = new TokenVerifier({ issuer: realm, jwksUri: issuer.jwksUri });
    await expect(explicit.verify(t)).resolves.toMatchObject({ iss: realm });
  });

  it('while discovery fails (503, a 200 that is no JSON), the provider is asked once per back-off, concurrent calls sharing the attempt; calls in between answer the same 503 at once', async () => {
    const down = await startIssuer();
    const logs = captureLogs('info');
    const later = fakeWallClock();
    try {
      for (const mode of ['down', 'garbage'] as const) {
        down.discovery = mode;
        const start = down.discoveryFetches();
        const asked = () => down.discoveryFetches() - start;
        const verifier = new TokenVerifier({ issuer: down.issuer, timings: { unreachableRetryMs: 200, unreachableRetryMaxMs: 500 } });
        const token = await down.mint({ tenant_id: 1 });
        const unavailable = () => expectUnavailable(verifier, token);
        await expectBackOff(unavailable, asked, later);
        // The provider back: after the wait, discovery succeeds and tokens verify; no further discovery request.
        down.discovery = 'up';
        await unavailable();
        later(550);
        await expect(verifier.verify(token)).resolves.toMatchObject({ tenant_id: 1 });
        await expect(verifier.verify(await down.mint({ tenant_id: 2 }))).resolves.toMatchObject({ tenant_id: 2 });
        expect(asked()).toBe(6);
      }
      // One warn line per attempt, not per call.
      expect(logs.lines().filter((l) => l.msg === 'identity provider unreachable')).toHaveLength(10);
    } finally {
      jest.useRealTimers();
      logs.restore();
      await down.close();
    }
  });

  it('while the key set cannot be fetched and no set may stand in (none yet, with svc.oidc.jwks-uri or after discovery; the last older than 24 h), it is asked for once per back-off, concurrent calls sharing the attempt; calls in between answer the same 503 at once', async () => {
    const down = await startIssuer();
    const logs = captureLogs('info');
    const later = fakeWallClock();
    const timings = { unreachableRetryMs: 200, unreachableRetryMaxMs: 500 };
    try {
      const cases = [
        ['svc.oidc.jwks-uri', () => new TokenVerifier({ issuer: down.issuer, jwksUri: down.jwksUri, timings })],
        ['discovery', () => new TokenVerifier({ issuer: down.issuer, timings })],
        ['the last set older than 24 h', () => new TokenVerifier({ issuer: down.issuer, jwksUri: down.jwksUri, timings })],
      ] as const;
      for (const [name, make] of cases) {
        const verifier = make();
        if (name === 'the last set older than 24 h') {
          await expect(verifier.verify(await down.mint({ tenant_id: 9 }))).resolves.toMatchObject({ tenant_id: 9 });
          later(25 * 3_600_000);
        }
        let token = await down.mint({ tenant_id: 1 });
        down.jwks = 'down';
        const start = down.jwksFetches();
        const asked = () => down.jwksFetches() - start;
        const unavailable = () => expectUnavailable(verifier, token);
        await expectBackOff(unavailable, asked, later);
        // The provider back: after the wait, the key set is fetched once and tokens verify.
        down.jwks = 'up';
        await unavailable();
        later(550);
        await Promise.all(Array.from({ length: 5 }, async () => expect(await verifier.verify(token)).toMatchObject({ tenant_id: 1 })));
        await expect(verifier.verify(await down.mint({ tenant_id: 2 }))).resolves.toMatchObject({ tenant_id: 2 });
        expect(asked()).toBe(6);
        // A new outage starts a new run of waits: 200 ms again, not 500. (The set fetched just now stands in
        // for known keys; a token after 24 h has none to stand in.)
        later(25 * 3_600_000);
        token = await down.mint({ tenant_id: 1 });
        down.jwks = 'down';
        await unavailable();
        expect(asked()).toBe(7);
        later(250);
        await unavailable();
        expect(asked()).toBe(8);
        down.jwks = 'up';
      }
      // One warn line per attempt, not per call.
      expect(logs.lines().filter((l) => l.msg === 'identity provider unreachable')).toHaveLength(3 * 7);
    } finally {
      jest.useRealTimers();
      logs.restore();
      await down.close();
    }
  });

  it('while the key set URL refuses (404, 403, a 200 whose JSON is no key set) and every call would fetch it (no set fetched yet, with svc.oidc.jwks-uri or after discovery; the set fetched last due again), it is asked for once per back-off, calls in between answering the same 401 at once', async () => {
    const down = await startIssuer();
    const later = fakeWallClock();
    const timings = { unreachableRetryMs: 200, unreachableRetryMaxMs: 500, maxAgeMs: 5_000 };
    try {
      for (const [mode, answer] of [
        ['missing', 'answered 404'],
        ['forbidden', 'answered 403'],
        ['not-a-key-set', 'answered 200 with JSON that is no key set'],
      ] as const) {
        const cases = [
          ['svc.oidc.jwks-uri', () => new TokenVerifier({ issuer: down.issuer, jwksUri: down.jwksUri, timings })],
          ['discovery', () => new TokenVerifier({ issuer: down.issuer, timings })],
          ['the set fetched last due again', () => new TokenVerifier({ issuer: down.issuer, jwksUri: down.jwksUri, timings })],
        ] as const;
        for (const [name, make] of cases) {
          const verifier = make();
          if (name === 'the set fetched last due again') {
            await expect(verifier.verify(await down.mint({ tenant_id: 9 }))).resolves.toMatchObject({ tenant_id: 9 });
            later(5_000);
          }
          const token = await down.mint({ tenant_id: 1 });
          down.jwks = mode;
          const start = down.jwksFetches();
          const asked = () => down.jwksFetches() - start;
          const refused = () => expectRefused(verifier, token, new RegExp(`^key set ${down.jwksUri} ${answer}$`));
          await expectBackOff(refused, asked, later);
          // The URL answers again: after the wait, the key set is fetched once and tokens verify.
          down.jwks = 'up';
          await refused();
          later(550);
          await Promise.all(Array.from({ length: 5 }, async () => expect(await verifier.verify(token)).toMatchObject({ tenant_id: 1 })));
          await expect(verifier.verify(await down.mint({ tenant_id: 2 }))).resolves.toMatchObject({ tenant_id: 2 });
          expect(asked()).toBe(6);
          // Refused again once the set is due: a new run of waits, 200 ms again, not 500.
          later(5_000);
          down.jwks = mode;
          await refused();
          expect(asked()).toBe(7);
          later(250);
          await refused();
          expect(asked()).toBe(8);
          down.jwks = 'up';
          later(550);
        }
      }
    } finally {
      jest.useRealTimers();
      await down.close();
    }
  });

  it('a key set URL that refuses while the set fetched last is fresh: the keys it holds still verify, a token naming a key it lacks is refused; once the URL answers again a rotated key is picked up as before (jose\'s 30 s)', async () => {
    const relay = await keySetRelay(['rs-1']);
    const later = fakeWallClock();
    try {
      // A back-off longer than jose's cooldown: a refusal must not hold the next fetch back past it.
      const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri, timings: { unreachableRetryMs: 60_000, unreachableRetryMaxMs: 60_000 } });
      const rs = () => issuer.mint({ tenant_id: 1 }, { alg: 'RS256' });
      const es = () => issuer.mint({ tenant_id: 1 }, { alg: 'ES256' });
      await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      relay.mode = 'missing';
      later(31_000);
      await expect(verifier.verify(await es())).rejects.toThrow(TokenRejected);
      expect(relay.hits).toBe(2);
      await expect(verifier.verify(await rs())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(2);
      // The provider rotates its keys and the URL answers again: the new key verifies at the next fetch jose allows.
      relay.mode = 'up';
      relay.kids = ['es-1'];
      later(31_000);
      await expect(verifier.verify(await es())).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(3);
    } finally {
      jest.useRealTimers();
      await relay.close();
    }
  });

  it('a key set answer cut off mid-body, or a 200 whose body is no JSON (a proxy\'s page), is an outage: the keys fetched last stand in, a hub without them answers 503', async () => {
    const relay = await keySetRelay(['rs-1']);
    const later = fakeWallClock();
    try {
      for (const mode of ['cut', 'garbage'] as const) {
        relay.mode = 'up';
        const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri, timings: { maxAgeMs: 50, outageRetryMs: 300, staleMaxMs: 60_000 } });
        await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }))).resolves.toMatchObject({ tenant_id: 1 });
        relay.mode = mode;
        later(80);
        const hits = relay.hits;
        await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { subject: mode }))).resolves.toMatchObject({ sub: mode });
        expect(relay.hits).toBe(hits + 1);
        await expect(new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri }).verify(await issuer.mint({ tenant_id: 1 }))).rejects.toThrow(Unavailable);
      }
    } finally {
      jest.useRealTimers();
      await relay.close();
    }
  });

  it('a key set with two keys under the id a token names: the token verifies with whichever of them signed it; a forged one stays refused', async () => {
    // An issuer rolling its key over may publish the new key under the old one's kid (or keys without a kid at all).
    const relay = await keySetRelay(['rs-1']);
    try {
      const other = await generateKeyPair('RS256', { extractable: true });
      relay.extra = [{ ...(await exportJWK(other.publicKey)), kid: 'rs-1', alg: 'RS256', use: 'sig' }];
      const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri });
      // Signed by the issuer's key, the second of the two: the first one fails, the second verifies.
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { subject: 'second-key' }))).resolves.toMatchObject({ sub: 'second-key' });
      const byOther = await new SignJWT({ tenant_id: 1 }).setProtectedHeader({ alg: 'RS256', kid: 'rs-1' }).setIssuer(issuer.issuer).setSubject('first-key').setIssuedAt().setExpirationTime('5m').sign(other.privateKey);
      await expect(verifier.verify(byOther)).resolves.toMatchObject({ sub: 'first-key' });
      // A key the set does not hold, under the same kid: refused as a bad signature, by neither key.
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { rogue: true }))).rejects.toThrow(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/);
      // The claims are still checked with the key that verified: an expired token is refused as expired.
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { expiresIn: -60 }))).rejects.toThrow(/ERR_JWT_EXPIRED/);
    } finally {
      await relay.close();
    }
  });

  it('a key replaced under the same kid: a signature that fails on a key set older than the cooldown (30 s) fetches it once again and verifies with the new key; a flood of bad signatures fetches once per cooldown, whatever the key set URL answers', async () => {
    const relay = await keySetRelay(['rs-1']);
    const later = fakeWallClock();
    try {
      const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri });
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }))).resolves.toMatchObject({ tenant_id: 1 });
      expect(relay.hits).toBe(1);
      // The provider replaces its key and keeps the kid.
      const replaced = await generateKeyPair('RS256', { extractable: true });
      relay.kids = [];
      relay.extra = [{ ...(await exportJWK(replaced.publicKey)), kid: 'rs-1', alg: 'RS256', use: 'sig' }];
      const byReplaced = (subject: string) =>
        new SignJWT({ tenant_id: 1 }).setProtectedHeader({ alg: 'RS256', kid: 'rs-1' }).setIssuer(issuer.issuer).setSubject(subject).setIssuedAt().setExpirationTime('5m').sign(replaced.privateKey);
      // Within the cooldown of the fetch: refused, nothing fetched (as for a kid the set lacks).
      await expect(verifier.verify(await byReplaced('early'))).rejects.toThrow(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/);
      expect(relay.hits).toBe(1);
      // Past it: fetched again once, the new key verifies; the tokens arriving meanwhile wait for that one fetch.
      later(31_000);
      const [a, b, c] = await Promise.all(['a', 'b', 'c'].map(async (s) => verifier.verify(await byReplaced(s))));
      expect([a!.sub, b!.sub, c!.sub]).toEqual(['a', 'b', 'c']);
      expect(relay.hits).toBe(2);

      // An attacker's flood of bad signatures (and of unknown kids): at most one fetch per cooldown.
      const rogue = () => issuer.mint({ tenant_id: 1 }, { rogue: true });
      const unknownKid = () => new SignJWT({ tenant_id: 1 }).setProtectedHeader({ alg: 'RS256', kid: 'nope' }).setIssuer(issuer.issuer).setSubject('x').setIssuedAt().setExpirationTime('5m').sign(replaced.privateKey);
      const flood = async () => {
        const tokens = await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? rogue() : unknownKid())));
        await Promise.all(tokens.map((t) => expect(verifier.verify(t)).rejects.toThrow(TokenRejected)));
        for (const t of tokens) await expect(verifier.verify(t)).rejects.toThrow(TokenRejected);
      };
      await flood();
      expect(relay.hits).toBe(2);
      for (const [mode, expected] of [['up', 3], ['missing', 4], ['missing', 5], ['up', 6]] as const) {
        relay.mode = mode;
        later(10_000);
        await flood();
        expect(relay.hits).toBe(expected - 1);
        later(21_000);
        await flood();
        expect(relay.hits).toBe(expected);
      }
      // The key set fetched last still verifies.
      await expect(verifier.verify(await byReplaced('after'))).resolves.toMatchObject({ sub: 'after' });
    } finally {
      jest.useRealTimers();
      await relay.close();
    }
  });

  it('two keys under the kid a token names, one of them unusable (RSA under 2048 bits, an EC point off its curve): the token verifies with the other; a forged one stays refused as a bad signature, and a token whose keys are all unusable as before', async () => {
    const relay = await keySetRelay(['rs-1', 'es-1']);
    try {
      const weak = (await crypto.subtle.generateKey({ name: 'RSASSA-PKCS1-v1_5', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' }, true, ['sign', 'verify'])) as { publicKey: CryptoKey };
      const { keys } = (await (await fetch(issuer.jwksUri)).json()) as { keys: JWK[] };
      const esJwk = keys.find((k) => k.kid === 'es-1')!;
      const weakJwk = { ...(await exportJWK(weak.publicKey)), alg: 'RS256', use: 'sig' };
      // The unusable key first: it is the one tried first.
      relay.extra = [
        { ...weakJwk, kid: 'rs-1' },
        { ...esJwk, x: esJwk.y, kid: 'es-1' },
        { ...weakJwk, kid: 'weak-only' },
        { ...weakJwk, kid: 'weak-only', n: `${weakJwk.n}` },
      ];
      const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri });
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'RS256', subject: 'rs' }))).resolves.toMatchObject({ sub: 'rs' });
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'ES256', subject: 'es' }))).resolves.toMatchObject({ sub: 'es' });
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'RS256', rogue: true }))).rejects.toThrow(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/);
      const claims = { tenant_id: 1, iss: issuer.issuer, sub: 's', exp: Math.floor(Date.now() / 1000) + 300 };
      const naming = [{ alg: 'RS256', kid: 'weak-only' }, claims].map((part) => Buffer.from(JSON.stringify(part)).toString('base64url')).concat('c2ln').join('.');
      await expect(verifier.verify(naming)).rejects.toThrow(new TokenRejected('key weak-only of the key set cannot be used: RS256 requires key modulusLength to be 2048 bits or larger'));
    } finally {
      await relay.close();
    }
  });

  it('a key of the key set the hub cannot use (RSA under 2048 bits, no exponent, an EC point off its curve) refuses the tokens naming it (401 naming the key), never an error of the hub nor an outage: a key the provider adds is still fetched', async () => {
    const relay = await keySetRelay(['rs-1', 'es-1']);
    const later = fakeWallClock();
    const logs = captureLogs('warn');
    try {
      const weak = (await crypto.subtle.generateKey({ name: 'RSASSA-PKCS1-v1_5', modulusLength: 1024, publicExponent: new Uint8Array([1, 0, 1]), hash: 'SHA-256' }, true, ['sign', 'verify'])) as { publicKey: CryptoKey };
      const { keys } = (await (await fetch(issuer.jwksUri)).json()) as { keys: JWK[] };
      const [rsJwk, esJwk] = [keys.find((k) => k.kid === 'rs-1')!, keys.find((k) => k.kid === 'es-1')!];
      relay.extra = [
        { ...(await exportJWK(weak.publicKey)), kid: 'weak', alg: 'RS256', use: 'sig' },
        { kty: 'RSA', n: rsJwk.n, kid: 'no-e', alg: 'RS256', use: 'sig' },
        { ...esJwk, x: esJwk.y, kid: 'off-curve' },
      ];
      const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri });
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }))).resolves.toMatchObject({ tenant_id: 1 });
      later(31_000);
      const claims = { tenant_id: 1, iss: issuer.issuer, sub: 's', exp: Math.floor(Date.now() / 1000) + 300 };
      // Refused before its signature is looked at (jose would not sign with the weak key either): any signature will do.
      const naming = (kid: string) => [{ alg: kid === 'off-curve' ? 'ES256' : 'RS256', kid }, claims].map((part) => Buffer.from(JSON.stringify(part)).toString('base64url')).concat('c2ln').join('.');
      for (const [kid, reason] of [
        ['weak', 'RS256 requires key modulusLength to be 2048 bits or larger'],
        ['no-e', 'Invalid keyData'],
        ['off-curve', 'Invalid keyData'],
      ] as const) {
        const err = await verifier.verify(naming(kid)).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(TokenRejected);
        expect((err as Error).message).toBe(`key ${kid} of the key set cannot be used: ${reason}`);
      }
      // Not taken for an outage: a key the provider adds is fetched (jose's cooldown is over), never the 503 of the keys fetched last.
      const added = await generateKeyPair('RS256', { extractable: true });
      relay.extra.push({ ...(await exportJWK(added.publicKey)), kid: 'added', alg: 'RS256', use: 'sig' });
      const byAdded = await new SignJWT({ tenant_id: 1 }).setProtectedHeader({ alg: 'RS256', kid: 'added' }).setIssuer(issuer.issuer).setSubject('s').setIssuedAt().setExpirationTime('5m').sign(added.privateKey);
      await expect(verifier.verify(byAdded)).resolves.toMatchObject({ sub: 's' });
      expect(logs.lines().map((l) => l.msg)).toEqual([]);
    } finally {
      logs.restore();
      jest.useRealTimers();
      await relay.close();
    }
  });

  it('a key set or discovery document of more than 1 MiB is not read further: the token is refused (401), as for a key set that will not do', async () => {
    const relay = await keySetRelay(['rs-1']);
    try {
      relay.mode = 'huge';
      const token = await issuer.mint({ tenant_id: 1 });
      await expect(new TokenVerifier({ issuer: issuer.issuer, jwksUri: relay.jwksUri }).verify(token)).rejects.toThrow(
        new TokenRejected(`key set ${relay.jwksUri} answered 200 with more than 1048576 bytes`),
      );
      const base = relay.jwksUri.replace(/\/jwks$/, '');
      await expect(new TokenVerifier({ issuer: base }).verify(token)).rejects.toThrow(
        new TokenRejected(`OIDC discovery ${base}/.well-known/openid-configuration answered 200 with more than 1048576 bytes`),
      );
    } finally {
      await relay.close();
    }
  });

  it('an explicit jwks-uri is used instead of discovery', async () => {
    // The discovery document of this issuer exists, but the keys are taken from the (wrong) explicit URI.
    const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: `${issuer.issuer}/no-such-jwks` });
    await expect(verifier.verify(await issuer.mint({}))).rejects.toThrow(TokenRejected);
  });
});

describe('refusals', () => {
  const verifier = () => new TokenVerifier({ issuer: issuer.issuer, audience: 'hub' });

  it('a token valid for at most svc.oidc.max-token-lifetime (24 hours unless set) is accepted', async () => {
    await expect(verifier().verify(await issuer.mint({}, { audience: 'hub', expiresIn: 86_400 }))).resolves.toMatchObject({ aud: 'hub' });
    const week = new TokenVerifier({ issuer: issuer.issuer, audience: 'hub', maxLifetimeSeconds: 7 * 86_400 });
    await expect(week.verify(await issuer.mint({}, { audience: 'hub', expiresIn: 6 * 86_400 }))).resolves.toMatchObject({ aud: 'hub' });
    await expect(week.verify(await issuer.mint({}, { audience: 'hub', expiresIn: 8 * 86_400 }))).rejects.toThrow(/604800 s/);
  });

  it('a token issued up to 5 s in the future (clock difference) is accepted', async () => {
    await expect(verifier().verify(await issuer.mint({}, { audience: 'hub', issuedAt: 4 }))).resolves.toMatchObject({ aud: 'hub' });
  });

  it('accepts the right audience', async () => {
    await expect(verifier().verify(await issuer.mint({}, { audience: 'hub' }))).resolves.toMatchObject({ aud: 'hub' });
    await expect(verifier().verify(await issuer.mint({}, { audience: ['other', 'hub'] }))).resolves.toMatchObject({ aud: ['other', 'hub'] });
  });

  it.each([
    ['expired', { audience: 'hub', expiresIn: -120 }, /ERR_JWT_EXPIRED/],
    ['no exp claim', { audience: 'hub', expiresIn: null }, /ERR_JWT_CLAIM_VALIDATION_FAILED.*exp/],
    ['exp in 9999', { audience: 'hub', expiresIn: 253402300799 - Math.floor(Date.now() / 1000) }, /exp is \d+ s ahead, more than svc.oidc.max-token-lifetime \(86400 s\)/],
    ['exp a day and a minute ahead', { audience: 'hub', expiresIn: 86_460 }, /more than svc.oidc.max-token-lifetime/],
    ['iat an hour in the future', { audience: 'hub', issuedAt: 3_600 }, /iat is (3599|3600) s in the future/],
    ['iat a minute in the future', { audience: 'hub', issuedAt: 60 }, /iat is (59|60) s in the future/],
    ['wrong issuer', { audience: 'hub', issuer: 'https://evil.example.com' }, /ERR_JWT_CLAIM_VALIDATION_FAILED.*iss/],
    ['wrong audience', { audience: 'other' }, /ERR_JWT_CLAIM_VALIDATION_FAILED.*aud/],
    ['no audience', {}, /ERR_JWT_CLAIM_VALIDATION_FAILED.*aud/],
    ['rogue RS256 key', { audience: 'hub', rogue: true, alg: 'RS256' }, /ERR_JWS_SIGNATURE_VERIFICATION_FAILED/],
    ['rogue ES256 key', { audience: 'hub', rogue: true, alg: 'ES256' }, /ERR_JWS_SIGNATURE_VERIFICATION_FAILED/],
  ] as const)('%s: TokenRejected', async (_name, options, reason) => {
    const err = await verifier()
      .verify(await issuer.mint({}, options))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(TokenRejected);
    expect((err as Error).message).toMatch(reason);
  });

  it.each([
    ['tenant_id twice', '"tenant_id":3,"tenant_id":2', 'tenant_id'],
    ['tenant_id twice, once escaped', '"tenant_id":3,"tenant_\\u0069d":2', 'tenant_id'],
    ['realm_access twice', '"realm_access":{"roles":["svc_user"]},"realm_access":{"roles":["svc_superadmin"]}', 'realm_access'],
    ['roles twice inside realm_access', '"realm_access":{"roles":["svc_user"],"roles":["svc_superadmin"]}', 'realm_access.roles'],
    ['acting_as_tenant twice', '"tenant_id":1,"acting_as_tenant":3,"acting_as_tenant":2', 'acting_as_tenant'],
    ['exp twice', `"exp":${Math.floor(Date.now() / 1000) + 60}`, 'exp'],
  ])('a payload giving a claim twice (%s): TokenRejected naming it', async (_name, members, claim) => {
    const err = await verifier()
      .verify(await issuer.mintText(`"aud":"hub",${members}`))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(TokenRejected);
    expect((err as Error).message).toBe(`claim ${claim} is given twice`);
  });

  it('a payload whose claims are each given once is accepted, however its keys are escaped', async () => {
    await expect(verifier().verify(await issuer.mintText('"aud":"hub","tenant_\\u0069d":3,"realm_access":{"roles":["a"]},"x":{"tenant_id":1}'))).resolves.toMatchObject({ tenant_id: 3 });
  });

  it.each([
    ['kid twice', 'RS256', '"kid":"rs-1"', 'kid'],
    ['kid twice, once escaped', 'ES256', '"k\\u0069d":"es-1"', 'kid'],
    ['alg twice', 'RS256', '"alg":"RS256"', 'alg'],
    ['alg twice (ES256)', 'ES256', '"alg":"ES256"', 'alg'],
    ['typ twice', 'RS256', '"typ":"at+jwt"', 'typ'],
  ] as const)('a protected header giving a parameter twice (%s): TokenRejected naming it', async (_name, alg, headerMembers, parameter) => {
    const err = await verifier()
      .verify(await issuer.mintText('"aud":"hub","tenant_id":3', { alg, headerMembers }))
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).toBeInstanceOf(TokenRejected);
    expect((err as Error).message).toBe(`header parameter ${parameter} is given twice`);
  });

  it('a protected header whose parameters are each given once is accepted', async () => {
    await expect(verifier().verify(await issuer.mintText('"aud":"hub","tenant_id":3', { headerMembers: '"cty":"k\\u0069d"' }))).resolves.toMatchObject({ tenant_id: 3 });
    await expect(verifier().verify(await issuer.mintText('"aud":"hub","tenant_id":3', { alg: 'ES256' }))).resolves.toMatchObject({ tenant_id: 3 });
  });

  it('garbage: TokenRejected', async () => {
    await expect(verifier().verify('not-a-jwt')).rejects.toThrow(TokenRejected);
    await expect(verifier().verify('a.b.c')).rejects.toThrow(TokenRejected);
  });
});

describe('verified tokens remembered', () => {
  /** Counts the verifications that ran in full (signature, claims, keys given twice): a remembered token runs none. */
  const fullChecks = () => jest.spyOn(TokenVerifier.prototype as unknown as { checked: () => Promise<unknown> }, 'checked');
  /** The token with one character of its signature changed. */
  const forged = (token: string) => {
    const at = token.lastIndexOf('.') + 1;
    return `${token.slice(0, at)}${token[at] === 'A' ? 'B' : 'A'}${token.slice(at + 1)}`;
  };
  /** A verifier whose key set is fetched already (the call that fetches it does not remember its token). */
  const warmVerifier = async (options: Partial<ConstructorParameters<typeof TokenVerifier>[0]> = {}) => {
    const verifier = new TokenVerifier({ issuer: issuer.issuer, jwksUri: issuer.jwksUri, ...options });
    await verifier.verify(await issuer.mint({ tenant_id: 1 }, { subject: 'warm-up' }));
    return verifier;
  };

  afterEach(() => {
    jest.restoreAllMocks();
    jest.useRealTimers();
  });

  it('a token verified again is answered with the same frozen claims without a second check; one differing in a byte of its signature is checked (and refused)', async () => {
    const verifier = await warmVerifier({ jwksUri: undefined });
    const fetches = issuer.jwksFetches();
    const checks = fullChecks();
    const token = await issuer.mint({ tenant_id: 1, realm_access: { roles: ['svc_user'] } }, { subject: 'again' });
    const first = await verifier.verify(token);
    expect(checks).toHaveBeenCalledTimes(1);
    const second = await verifier.verify(token);
    expect(second).toBe(first);
    expect(checks).toHaveBeenCalledTimes(1);
    expect(issuer.jwksFetches()).toBe(fetches);
    // Shared by every use of the token: no caller can change another's claims.
    expect(Object.isFrozen(first) && Object.isFrozen(first.realm_access) && Object.isFrozen((first.realm_access as { roles: string[] }).roles)).toBe(true);

    await expect(verifier.verify(forged(token))).rejects.toThrow(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/);
    expect(checks).toHaveBeenCalledTimes(2);
  });

  it('a remembered token is refused from its exp plus the 5 s clock tolerance on, as one verified anew is', async () => {
    const verifier = await warmVerifier();
    const token = await issuer.mint({ tenant_id: 1 }, { subject: 'short', expiresIn: 2 });
    const claims = await verifier.verify(token);
    const checks = fullChecks();
    const at = fakeWallClock();
    at(((claims.exp as number) + CLOCK_TOLERANCE_S) * 1000 - 1 - Date.now());
    await expect(verifier.verify(token)).resolves.toBe(claims);
    expect(checks).toHaveBeenCalledTimes(0);
    at(1);
    await expect(verifier.verify(token)).rejects.toThrow(/ERR_JWT_EXPIRED/);
    expect(checks).toHaveBeenCalledTimes(1);
  });

  it('a key set fetched again for its age (maxAgeMs) without the key a remembered token was verified with: the token is refused', async () => {
    const relay = await keySetRelay(['rs-1', 'es-1']);
    const later = fakeWallClock();
    try {
      const verifier = await warmVerifier({ jwksUri: relay.jwksUri, timings: { maxAgeMs: 1_000 } });
      const token = await issuer.mint({ tenant_id: 1 }, { subject: 'rotated', alg: 'RS256' });
      const claims = await verifier.verify(token);
      const checks = fullChecks();
      // The provider drops the key: within maxAgeMs of the last fetch the token still holds, as a key set jose keeps would verify it.
      relay.kids = ['es-1'];
      later(999);
      await expect(verifier.verify(token)).resolves.toBe(claims);
      expect(checks).toHaveBeenCalledTimes(0);
      later(1);
      await expect(verifier.verify(token)).rejects.toThrow(/ERR_JWKS_NO_MATCHING_KEY/);
      expect(relay.hits).toBe(2);
    } finally {
      await relay.close();
    }
  });

  it('a key set fetched again for a key id it lacked: the tokens remembered with the set before are verified again', async () => {
    const relay = await keySetRelay(['rs-1']);
    const later = fakeWallClock();
    try {
      const verifier = await warmVerifier({ jwksUri: relay.jwksUri, timings: { maxAgeMs: 600_000 } });
      const token = await issuer.mint({ tenant_id: 1 }, { subject: 'rotated', alg: 'RS256' });
      const claims = await verifier.verify(token);
      await expect(verifier.verify(token)).resolves.toBe(claims);
      // The provider replaces the RS256 key with the ES256 one; a token naming es-1, past jose's 30 s cooldown, has the set fetched again.
      relay.kids = ['es-1'];
      later(31_000);
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { subject: 'new-key', alg: 'ES256' }))).resolves.toMatchObject({ sub: 'new-key' });
      expect(relay.hits).toBe(2);
      await expect(verifier.verify(token)).rejects.toThrow(/ERR_JWKS_NO_MATCHING_KEY/);
    } finally {
      await relay.close();
    }
  });

  it('a key set fetched again that brings the same keys (for a forged signature, a kid it lacks, its age) keeps the tokens remembered with the set before; one bringing other keys forgets them', async () => {
    const relay = await keySetRelay(['rs-1']);
    const later = fakeWallClock();
    try {
      const verifier = await warmVerifier({ jwksUri: relay.jwksUri, timings: { maxAgeMs: 100_000 } });
      const [a, b] = await Promise.all(['a', 'b'].map((subject) => issuer.mint({ tenant_id: 1 }, { subject, alg: 'RS256', expiresIn: 3_600 })));
      const claims = [await verifier.verify(a!), await verifier.verify(b!)];
      const checks = fullChecks();
      /** The full checks `run` makes. */
      const checksOf = async (run: () => Promise<unknown>) => {
        const before = checks.mock.calls.length;
        await run();
        return checks.mock.calls.length - before;
      };
      const bothRemembered = async () => {
        expect(await checksOf(async () => expect(await verifier.verify(a!)).toBe(claims[0]))).toBe(0);
        expect(await checksOf(async () => expect(await verifier.verify(b!)).toBe(claims[1]))).toBe(0);
      };
      // An attacker's token past the cooldown (a signature no key holds, then a kid the set lacks) has the set fetched again: the same keys.
      later(31_000);
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { rogue: true }))).rejects.toThrow(/ERR_JWS_SIGNATURE_VERIFICATION_FAILED/);
      expect(relay.hits).toBe(2);
      await bothRemembered();
      later(31_000);
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'ES256' }))).rejects.toThrow(/ERR_JWKS_NO_MATCHING_KEY/);
      expect(relay.hits).toBe(3);
      await bothRemembered();
      // Past maxAgeMs the token used first takes the whole path (jose fetches the set: the same keys); the other stays remembered.
      later(100_001);
      expect(await checksOf(async () => expect(await verifier.verify(a!)).toEqual(claims[0]))).toBe(1);
      expect(relay.hits).toBe(4);
      expect(await checksOf(async () => expect(await verifier.verify(b!)).toBe(claims[1]))).toBe(0);
      // The provider adds a key: the set fetched for a token naming it is another set, and the tokens remembered before are verified again.
      relay.kids = ['rs-1', 'es-1'];
      later(31_000);
      await expect(verifier.verify(await issuer.mint({ tenant_id: 1 }, { alg: 'ES256', subject: 'new-key' }))).resolves.toMatchObject({ sub: 'new-key' });
      expect(relay.hits).toBe(5);
      expect(await checksOf(async () => expect(await verifier.verify(b!)).toEqual(claims[1]))).toBe(1);
    } finally {
      await relay.close();
    }
  });

  it('while the provider is down, a remembered token is answered as long as the key set fetched last stands in (staleMaxMs)', async () => {
    const relay = await keySetRelay(['rs-1', 'es-1']);
    const later = fakeWallClock();
    try {
      const verifier = await warmVerifier({ jwksUri: relay.jwksUri, timings: { maxAgeMs: 50, outageRetryMs: 300, staleMaxMs: 200 } });
      const token = await issuer.mint({ tenant_id: 1 }, { subject: 'outage' });
      const claims = await verifier.verify(token);
      const checks = fullChecks();
      relay.mode = 'down';
      later(80);
      // The key set is due: the whole path runs, finds the provider down and verifies with the set fetched last (a second check).
      const during = await verifier.verify(token);
      expect(during).toEqual(claims);
      expect(relay.hits).toBe(2);
      expect(checks).toHaveBeenCalledTimes(2);
      // Within outageRetryMs, that set stands in: the token is answered from memory.
      await expect(verifier.verify(token)).resolves.toBe(during);
      expect(checks).toHaveBeenCalledTimes(2);
      // Past staleMaxMs the set stands in for nothing, remembered or not: 503.
      later(150);
      await expect(verifier.verify(token)).rejects.toThrow(Unavailable);
      expect(relay.hits).toBe(3);
    } finally {
      await relay.close();
    }
  });

  it('at most verifiedTokensKept tokens are remembered: past it the one remembered first is verified again', async () => {
    const verifier = await warmVerifier({ verifiedTokensKept: 2 });
    const [a, b, c] = await Promise.all(['a', 'b', 'c'].map((subject) => issuer.mint({ tenant_id: 1 }, { subject })));
    for (const token of [a!, b!, c!]) await verifier.verify(token);
    const checks = fullChecks();
    await verifier.verify(b!);
    await verifier.verify(c!);
    expect(checks).toHaveBeenCalledTimes(0);
    await verifier.verify(a!);
    expect(checks).toHaveBeenCalledTimes(1);
  });
});

/**
 * The wall clock (Date: the verifier's, the key set cache's and the issuer's) made jest's, moved on by
 * hand rather than slept; timers stay real. Returns the mover; jest.useRealTimers() gives the clock back.
 */
function fakeWallClock(): (ms: number) => void {
  jest.useFakeTimers({ now: Date.now(), doNotFake: ['hrtime', 'nextTick', 'performance', 'queueMicrotask', 'setImmediate', 'clearImmediate', 'setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
  return (ms) => jest.setSystemTime(Date.now() + ms);
}

/** `verifier` answers `token` with the 503 of an unreachable provider. */
async function expectUnavailable(verifier: TokenVerifier, token: string): Promise<void> {
  const err = await verifier.verify(token).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(Unavailable);
  expect((err as Unavailable).render()).toEqual({ status: 503, body: { json: { error: 'identity provider unreachable' } } });
}

/** `verifier` refuses `token` (a 401) for `reason`. */
async function expectRefused(verifier: TokenVerifier, token: string, reason: RegExp): Promise<void> {
  const err = await verifier.verify(token).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(TokenRejected);
  expect((err as Error).message).toMatch(reason);
}

/**
 * `unavailable` (a call answered 503) while the provider cannot be had, with a back-off of 200 ms
 * doubled to at most 500 ms: ten calls at once make one request to the provider (`asked` counts them),
 * ten after it none, and from then on one per wait, however many calls there are at once or in a row.
 */
async function expectBackOff(unavailable: () => Promise<void>, asked: () => number, later: (ms: number) => void): Promise<void> {
  await Promise.all(Array.from({ length: 10 }, unavailable));
  expect(asked()).toBe(1);
  for (let i = 0; i < 10; i++) await unavailable();
  expect(asked()).toBe(1);
  // Once the back-off (200 ms) is over, one call asks again; the next wait is doubled (400 ms), then capped (500 ms).
  for (const [wait, expected] of [[250, 2], [250, 2], [200, 3], [450, 3], [100, 4], [550, 5]] as const) {
    later(wait);
    await Promise.all(Array.from({ length: 3 }, unavailable));
    for (let i = 0; i < 3; i++) await unavailable();
    expect(asked()).toBe(expected);
  }
}

/**
 * A key set server on loopback: the test issuer's keys whose ids are in `kids` (changed at will), or,
 * with `mode`, an outage (a 503, no answer at all: jose gives up after 5 s, an answer cut off, a 200
 * that is no JSON) or a refusal (`missing`: a 404), and any `extra` keys
 * before them; `hits` counts its fetches.
 */
async function keySetRelay(kids: string[]) {
  const { keys } = (await (await fetch(issuer.jwksUri)).json()) as { keys: Array<{ kid: string }> };
  const server = createServer((_req, res) => {
    relay.hits++;
    if (relay.mode === 'hang') return;
    if (relay.mode === 'huge') {
      // A key set (or any document) of 2 MiB: its keys, then a member of padding, sent without a length.
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write(`{"keys":${JSON.stringify(keys)},"jwks_uri":"${relay.jwksUri}","padding":"`);
      for (let i = 0; i < 32; i++) res.write('x'.repeat(65_536));
      return res.end('"}');
    }
    if (relay.mode === 'cut' || relay.mode === 'garbage') {
      res.writeHead(200, { 'content-type': relay.mode === 'cut' ? 'application/json' : 'text/html', 'content-length': '1000' });
      // cut: half a key set, then the connection drops; garbage: a proxy's page answered 200.
      if (relay.mode === 'cut') return res.write('{"keys":[{"kty":"RSA","n":"', () => res.destroy());
      return res.end('<html>maintenance</html>'.padEnd(1000));
    }
    res.statusCode = relay.mode === 'up' ? 200 : relay.mode === 'missing' ? 404 : 503;
    res.setHeader('content-type', 'application/json');
    res.end(relay.mode === 'up' ? JSON.stringify({ keys: [...relay.extra, ...keys.filter((k) => relay.kids.includes(k.kid))] }) : 'down');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const relay = {
    kids,
    /** Keys served before the issuer's (other than the issuer's own). */
    extra: [] as JWK[],
    mode: 'up' as 'up' | 'down' | 'missing' | 'hang' | 'cut' | 'garbage' | 'huge',
    hits: 0,
    jwksUri: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return relay;
}
