import { createLocalJWKSet, createRemoteJWKSet, customFetch, decodeProtectedHeader, errors as joseErrors, type ExportedJWKSCache, jwksCache, jwtVerify, type JWTPayload, type JWTVerifyGetKey, type JWTVerifyOptions } from 'jose';
import { Unavailable } from '../errors.js';
import { readStart } from '../http-body.js';
import { mayPass } from '../http-status.js';
import { logger } from '../observability/logger.js';
import { loggableText, loggableUrl } from '../observability/url-redaction.js';
import { duplicateJsonKey, scanJsonText } from '../validation/input-limits.js';

export interface VerifierOptions {
  issuer: string;
  jwksUri?: string;
  audience?: string;
  /**
   * Seconds a token may still be valid for (its `exp` ahead of now); one valid for longer is refused
   * as one without `exp` is: a token valid until 9999 is a token valid forever. Default 24 hours.
   */
  maxLifetimeSeconds?: number;
  /** Tests: shorter times than the key set's (KEY_SET_TIMINGS). */
  timings?: Partial<KeySetTimings>;
  /** Tests: fewer verified tokens remembered than VERIFIED_TOKENS_KEPT. */
  verifiedTokensKept?: number;
}

/** How long a fetched key set is used, and how the verifier rides out a provider it cannot reach. */
export interface KeySetTimings {
  /** A key set older than this is fetched again before its next use. */
  maxAgeMs: number;
  /** After a fetch failed for an outage, the last key set answers alone for this long before a fetch is tried again. */
  outageRetryMs: number;
  /** The last key set stands in for the provider at most this long after it was fetched. */
  staleMaxMs: number;
  /**
   * After the discovery document could not be had, or the key set could not be fetched with no set fetched
   * before to stand in, calls answer as that attempt did for this long before it is tried again; doubled per
   * failure in a row.
   */
  unreachableRetryMs: number;
  /** The longest wait between two tries of the discovery document, or of a key set with none to stand in. */
  unreachableRetryMaxMs: number;
  /**
   * A token the key set fetched last cannot verify (a key id it lacks, a signature none of its keys
   * holds) has it fetched again only when no fetch was made or tried for this long: once per cooldown.
   */
  cooldownMs: number;
}

export const KEY_SET_TIMINGS: KeySetTimings = {
  maxAgeMs: 10 * 60_000,
  outageRetryMs: 30_000,
  staleMaxMs: 24 * 3_600_000,
  unreachableRetryMs: 2_000,
  unreachableRetryMaxMs: 60_000,
  cooldownMs: 30_000,
};

/** The answer of the last of a run of failed attempts, until when it stands (ms since the epoch), and the wait that led to it. */
interface Failing {
  answer: Error;
  until: number;
  waitMs: number;
}

/** The answer of a failed attempt whose wait is not over yet, for a call to give at once; undefined once another attempt may be made. */
function stillFailing(failed: Failing | undefined): Error | undefined {
  return failed && Date.now() < failed.until ? failed.answer : undefined;
}

/** Seconds of clock skew allowed between the issuer and the hub, on every time claim. */
export const CLOCK_TOLERANCE_S = 5;

/**
 * How many verified tokens are remembered at most: past it the one remembered first is forgotten, so
 * a flood of distinct valid tokens costs a verification each, never memory without end.
 */
export const VERIFIED_TOKENS_KEPT = 10_000;

/** A token that verified, as remembered: its claims, until when they hold, and the key set that verified it. */
interface Verified {
  /** The claims, frozen: every later use of the token is handed this same object. */
  payload: JWTPayload;
  /** `exp` plus the clock tolerance, in ms since the epoch: from then on jose refuses the token as expired. */
  until: number;
  /** The key set that verified it, as currentKeySet() names it. */
  jwks: Jwks;
}

type Jwks = ExportedJWKSCache['jwks'];

/** Why a token was refused; logged, never sent to the caller (who gets a plain 401). */
export class TokenRejected extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = 'TokenRejected';
  }
}

/**
 * The identity provider answered the discovery document or the key set with a status that may pass
 * (503 while it restarts, 502 from a proxy in front of it, 429, …): an outage, not a refused token.
 */
class ProviderOutage extends Error {
  constructor(what: string, status: number, how?: string) {
    super(`${what} answered ${status}${how ? ` ${how}` : ''}`);
    this.name = 'ProviderOutage';
  }
}

/**
 * The key set's URL refused it: an answer that will not pass (404, 403, a redirect, which jose does
 * not follow) or a 200 whose JSON is no key set. Every token is refused (401) while it lasts.
 */
class KeySetRefused extends TokenRejected {}

/**
 * fetch could not reach the key set, or lost it mid-body (fetch's TypeError): an outage. Wrapped so that
 * it is told apart from the TypeErrors jose throws for a key of the set it cannot use.
 */
class KeySetUnreachable extends Error {
  constructor(cause: Error) {
    super(cause.message, { cause });
    this.name = 'KeySetUnreachable';
  }
}

/** `err` as KeySetUnreachable when it is fetch's TypeError (checked by name: it may come from another realm); as it came otherwise. */
function unreached(err: unknown): never {
  throw (err as Error | undefined)?.name === 'TypeError' ? new KeySetUnreachable(err as Error) : err;
}

/**
 * fetch for jose's key set: an answer that may pass is an outage (jose would make any non-200 a
 * JOSEError, so a 401). So is a 200 whose body is cut off (the connection dropped: fetch's TypeError)
 * or is no JSON (a proxy's or a restarting provider's page): jose would refuse every token on it
 * ("Failed to parse the JSON Web Key Set"), where the keys fetched last can stand in. Any other
 * answer but a key set is KeySetRefused (jose would make it a JOSEError the verifier cannot tell from
 * a refused token's).
 */
async function keySetFetch(url: string, init: RequestInit): Promise<Response> {
  const response = await fetch(url, init).catch(unreached);
  if (mayPass(response.status)) throw new ProviderOutage(`key set ${loggableUrl(url)}`, response.status);
  if (response.status !== 200) throw new KeySetRefused(`key set ${loggableUrl(url)} answered ${response.status}`);
  const text = await bodyWithin(response).catch(unreached);
  if (text === undefined) throw new KeySetRefused(`key set ${loggableUrl(url)} answered 200 with more than ${MAX_DOCUMENT_BYTES} bytes`);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ProviderOutage(`key set ${loggableUrl(url)}`, 200, 'with a body that is no JSON');
  }
  // jose's own test of a key set (isJwkSet), which it would fail as JWKSInvalid
  const keys = (body as { keys?: unknown } | null)?.keys;
  if (typeof body !== 'object' || Array.isArray(body) || !Array.isArray(keys) || !keys.every((k) => typeof k === 'object' && k !== null && !Array.isArray(k))) {
    throw new KeySetRefused(`key set ${loggableUrl(url)} answered 200 with JSON that is no key set`);
  }
  return new Response(text, { status: 200, headers: response.headers });
}

/**
 * The most of a key set or discovery document the hub reads. A provider's key set holds a few keys (a
 * few KiB, tens with certificate chains): past this it is no key set, and read whole it cost memory
 * without end (a key set of 600 MB was 1.5 GB of the hub's memory, then an internal error: measured).
 */
const MAX_DOCUMENT_BYTES = 1_048_576;

/** `response`'s body as text (UTF-8), or undefined, read no further, once it holds more than MAX_DOCUMENT_BYTES. */
async function bodyWithin(response: Response): Promise<string | undefined> {
  // One byte past the bound tells a body of exactly MAX_DOCUMENT_BYTES from a longer one.
  const { bytes } = await readStart(response.body ?? [], MAX_DOCUMENT_BYTES + 1);
  return bytes.length > MAX_DOCUMENT_BYTES ? undefined : new TextDecoder().decode(bytes);
}

/**
 * A key one segment of the token (0: its protected header, 1: its payload) writes twice in one
 * object, as a path (`kid`, `tenant_id`, `realm_access.roles`), or undefined. The segment is read as
 * the JSON text the issuer signed (base64url-decoded, as jose decodes it): `JSON.parse` keeps the
 * last of two keys without a word, and JSON readers differ on which one wins, so
 * `{"tenant_id":3,"tenant_id":2}` (or `"tenant_\u0069d":2`) would act as tenant 2 here and maybe as 3
 * elsewhere, and `{"alg":"RS256","kid":"a","kid":"b"}` picks key `b` here and maybe `a` elsewhere.
 */
function keyGivenTwice(token: string, segment: 0 | 1, parsed: object): string | undefined {
  const text = new TextDecoder().decode(Buffer.from(token.split('.')[segment] ?? '', 'base64url'));
  const { keys } = scanJsonText(text, Number.POSITIVE_INFINITY);
  // `parsed` is jose's parse of this same text: its keys against those the text writes.
  const path = duplicateJsonKey(text, parsed, keys, 'token');
  return path?.replace(/^token\.?/, '');
}

/**
 * Verifies bearer JWTs against the issuer's JWKS (RS256 and ES256), checking issuer, expiry (a token
 * must carry `exp`, at most `maxLifetimeSeconds` ahead; an `iat` must not lie in the future) and, when
 * configured, audience. Once the signature holds, a protected header giving a parameter twice, or a
 * payload giving a claim twice (at any depth), is refused too. The key set is fetched lazily and
 * cached by jose for `maxAgeMs` (10 minutes), which refetches it then; it is fetched again too when it
 * cannot verify a token (an unknown key id, a signature none of its keys holds), at most once per
 * `cooldownMs` (30 s). When such a fetch finds the provider down (no connection, no answer
 * within 5 s, a status that may pass), the key set fetched last verifies tokens instead, for up to
 * `staleMaxMs` (24 hours) after it was fetched, trying the provider again every `outageRetryMs` (30 s);
 * a token naming a key that set lacks is the outage's 503. The discovery document, while it cannot be
 * had, and the key set, while it cannot be fetched and no set fetched before may stand in (none yet,
 * or the last older than `staleMaxMs`) or while its URL refuses it (404, 403, a 200 that is no key
 * set) and no set fetched is younger than `maxAgeMs`, are asked for once per `unreachableRetryMs` (2 s, doubled per
 * failure in a row up to `unreachableRetryMaxMs`, 60 s), calls in between answering at once as the
 * last attempt did.
 *
 * A token that verified is remembered (by its exact text, signature included), and its next uses are
 * answered with the same claims without verifying it again, while all of these hold: it has not
 * expired (`exp` plus the clock tolerance, as jose checks it); the key set that verified it is still
 * the one fetched last (a fetch, for its age or for a token it could not verify, that brings other keys forgets
 * every token; one that brings the same keys keeps them); and that
 * set is younger than `maxAgeMs`, or, while the provider is down, is the set standing in for it
 * (younger than `staleMaxMs`). Otherwise the token takes the whole path again, so jose fetches a key
 * set that is due, and a key the provider removed stops verifying within `maxAgeMs` as before. A
 * refused token is never remembered.
 */
export class TokenVerifier {
  private keys: Promise<RemoteKeys> | undefined;
  /** The key set as last fetched, with when (jose writes both after every fetch that succeeds). */
  private readonly lastFetched: Partial<ExportedJWKSCache> = {};
  /** While a fetch failed for an outage lately: until when the last key set answers alone (ms since the epoch). */
  private outageUntil = 0;
  /** The key set fetched last as jose's local set, made when first needed. */
  private stale: StaleKeys | undefined;
  private readonly timings: KeySetTimings;
  /** Tokens that verified, by their text, oldest first; all verified with the key set currentKeySet() names, or unused. */
  private readonly verified = new Map<string, Verified>();
  /**
   * The key set fetched last as jose wrote it (`fetched`), the text of its keys, and the set the
   * remembered tokens know it as (`set`: the first of a run of fetches that brought those same keys).
   */
  private known: { fetched: Jwks; keys: string; set: Jwks } | undefined;
  /**
   * While discovery fails: the answer of the last attempt (a 503, or the 401 of a document that will
   * not do), until when it stands (ms since the epoch), and the wait that led to it.
   */
  private discoveryFailed: Failing | undefined;
  /**
   * While the key set cannot be fetched and none fetched before may stand in (the 503 of the last
   * attempt), or its URL refuses it and none fetched is fresh (the 401): that answer, until when it
   * stands, and the wait that led to it. Cleared by the next fetch that succeeds.
   */
  private keySetFailed: Failing | undefined;
  /** When a token the key set could not verify last had it fetched again (ms since the epoch). */
  private refetchedAt = 0;
  /** That fetch while it runs: the tokens arriving meanwhile wait for it rather than fetch again. */
  private refetching: Promise<void> | undefined;

  constructor(private readonly options: VerifierOptions) {
    this.timings = { ...KEY_SET_TIMINGS, ...options.timings };
  }

  async verify(token: string): Promise<JWTPayload> {
    const remembered = this.remembered(token);
    if (remembered) return remembered;
    // A failed discovery rejects with the answer for the caller (made and logged once per attempt).
    const keys = await this.keySet();
    const stale = this.staleKeys();
    // The provider could not be reached a moment ago: the last key set answers without asking again.
    if (stale && Date.now() < this.outageUntil) return this.verifyStale(token, stale, undefined);
    // The key set could not be fetched a moment ago, with none to stand in (its 503), or its URL refused it
    // while every call fetched it (its 401): that answer, without asking again (jose would: it fetches on
    // every call while it holds no fresh set).
    const keySetAnswer = stillFailing(this.keySetFailed);
    if (keySetAnswer) throw keySetAnswer;
    // The key set fetched last, before jose fetches one (if it does, what it verifies is not remembered:
    // it may have taken the key from either set).
    const fetched = this.currentKeySet();
    try {
      return this.remember(token, await this.checkedOrRefetched(token, keys), fetched);
    } catch (err) {
      if (!isOutage(err)) {
        // The key set's URL refused it while jose fetches it on every call (no set yet, or the last one
        // due): the back-off of an outage without a set, so load on the hub is no flood of requests
        // at the provider. A refused fetch for a token a fresh set could not verify is that token's alone.
        if (err instanceof KeySetRefused && !this.keySetFresh()) throw this.keySetFailing(() => err);
        throw refusal(err, token);
      }
      if (!stale) throw this.keySetFailing(() => this.unreachable(err));
      // The key set was due again (or the token names a key it lacks) and the provider is down: the
      // keys fetched before still verify what they signed, so calls go on rather than all answer 503.
      logger().warn(
        { err: loggableText((err as Error).message), issuer: loggableUrl(this.options.issuer), fetchedAt: new Date(this.lastFetched.uat!).toISOString() },
        'identity provider unreachable: verifying tokens with the signing keys fetched last',
      );
      this.outageUntil = Date.now() + this.timings.outageRetryMs;
      return this.verifyStale(token, stale, err);
    }
  }

  /**
   * A token verified with the key set fetched last, while the provider is down. A key it lacks may be
   * one the provider has since added: that is the outage's 503, not a refused token.
   */
  private async verifyStale(token: string, stale: StaleKeys, outage: unknown): Promise<JWTPayload> {
    try {
      return this.remember(token, await this.checked(token, stale.keys), stale.set);
    } catch (err) {
      if (err instanceof joseErrors.JWKSNoMatchingKey) throw this.unreachable(outage ?? err);
      throw refusal(err, token);
    }
  }

  /** The key set fetched last, while it may stand in for an unreachable provider; undefined otherwise. */
  private staleKeys(): StaleKeys | undefined {
    const { jwks, uat } = this.lastFetched;
    if (!jwks || uat === undefined || Date.now() - uat > this.timings.staleMaxMs) return undefined;
    // One local set per fetch: it keeps the keys it imported.
    if (this.stale?.jwks !== jwks) this.stale = { jwks, keys: createLocalJWKSet(jwks), set: this.currentKeySet()! };
    return this.stale;
  }

  /**
   * The key set fetched last as the remembered tokens know it: while every fetch since a set brought
   * the same keys (in the same order), that set, so a fetch for its age, or one an attacker's forged
   * tokens cause once per cooldown, does not have every remembered token verified again; else the set
   * fetched last. Its keys are compared once per fetch, at the first call after it.
   */
  private currentKeySet(): Jwks | undefined {
    const { jwks } = this.lastFetched;
    const known = this.known;
    if (!jwks) return undefined;
    if (jwks === known?.fetched) return known.set;
    const keys = JSON.stringify(jwks.keys);
    this.known = { fetched: jwks, keys, set: known?.keys === keys ? known.set : jwks };
    return this.known.set;
  }

  /**
   * The claims of a token that verified before, while its verification still holds (see the class);
   * undefined when it must be verified again. The checks that only get easier with time (`nbf`, an
   * `iat` not in the future, `exp` at most svc.oidc.max-token-lifetime ahead) passed then and still
   * pass; issuer and audience are the verifier's own; only expiry and the key set need a look.
   */
  private remembered(token: string): JWTPayload | undefined {
    const entry = this.verified.get(token);
    if (!entry) return undefined;
    const now = Date.now();
    if (now >= entry.until || entry.jwks !== this.currentKeySet()) {
      this.verified.delete(token);
      return undefined;
    }
    const age = now - this.lastFetched.uat!;
    // Past maxAgeMs the whole path runs, for jose to fetch the key set again (or, the provider being
    // down, to start an outage); during one the set fetched last stands in, as staleKeys() lets it.
    if (age < this.timings.maxAgeMs || (now < this.outageUntil && age <= this.timings.staleMaxMs)) return entry.payload;
    return undefined;
  }

  /**
   * `payload`, frozen (each later use of the token shares it), remembered as verified by `jwks` while
   * that is still the key set fetched last (a fetch during the verification that brought other keys:
   * not remembered).
   */
  private remember(token: string, payload: JWTPayload, jwks: Jwks | undefined): JWTPayload {
    freezeDeep(payload);
    if (!jwks || jwks !== this.currentKeySet()) return payload;
    // A token remembered with another key set can no longer be used: forgotten all at once.
    const first = this.verified.values().next().value;
    if (first && first.jwks !== jwks) this.verified.clear();
    this.verified.delete(token); // re-verified (it was due): remembered anew, as the newest
    if (this.verified.size >= (this.options.verifiedTokensKept ?? VERIFIED_TOKENS_KEPT)) {
      this.verified.delete(this.verified.keys().next().value!);
    }
    this.verified.set(token, { payload, until: ((payload.exp as number) + CLOCK_TOLERANCE_S) * 1000, jwks });
    return payload;
  }

  /**
   * The token checked with jose's remote set, and when that set cannot verify it (a key id it lacks, or
   * a signature none of its keys holds: a provider may replace a key and keep its kid), checked again
   * once the set is fetched anew, at most once per `cooldownMs` (counted from the last fetch made or
   * tried) whatever tokens arrive: a flood of made-up kids or signatures costs the provider one
   * request per cooldown. jose's own refetch for an unknown kid is off (its cooldown never ends): it
   * counts from the last fetch that succeeded only, so a key set URL that refuses was asked once per token.
   */
  private async checkedOrRefetched(token: string, keys: RemoteKeys): Promise<JWTPayload> {
    const before = this.lastFetched.jwks;
    try {
      return await this.checked(token, keys);
    } catch (err) {
      if (!(err instanceof joseErrors.JWKSNoMatchingKey || err instanceof joseErrors.JWSSignatureVerificationFailed)) throw err;
      // A set fetched while this token was checked with the one before: checked with it, nothing fetched.
      if (this.lastFetched.jwks === before) {
        if (!this.refetching) {
          const since = Math.max(this.lastFetched.uat ?? 0, this.refetchedAt);
          if (Date.now() - since < this.timings.cooldownMs) throw err;
          this.refetchedAt = Date.now();
          this.refetching = keys.reload().finally(() => {
            this.refetching = undefined;
          });
        }
        await this.refetching;
      }
      return this.checked(token, keys);
    }
  }

  /** The signature and claims checked with `keys`; jose's refusals and outages are thrown as they come. */
  private async checked(token: string, keys: JWTVerifyGetKey): Promise<JWTPayload> {
    const { payload, protectedHeader } = await verifiedWithAnyKey(token, keys, {
      issuer: this.options.issuer,
      audience: this.options.audience,
      algorithms: ['RS256', 'ES256'],
      clockTolerance: CLOCK_TOLERANCE_S,
      // A token without an expiry would be valid forever: refused like an expired one.
      requiredClaims: ['exp'],
    });
    const lifetime = this.options.maxLifetimeSeconds ?? 86_400;
    const now = Math.floor(Date.now() / 1000);
    const ahead = (payload.exp as number) - now;
    if (ahead > lifetime + CLOCK_TOLERANCE_S) {
      throw new TokenRejected(`exp is ${ahead} s ahead, more than svc.oidc.max-token-lifetime (${lifetime} s)`);
    }
    // jose checks `iat` only against a maximum age; a token issued in the future comes from an
    // issuer whose clock is wrong, or was made to outlive the lifetime bound from its issue time.
    if (typeof payload.iat === 'number' && payload.iat - now > CLOCK_TOLERANCE_S) {
      throw new TokenRejected(`iat is ${payload.iat - now} s in the future`);
    }
    const parameter = keyGivenTwice(token, 0, protectedHeader);
    if (parameter) throw new TokenRejected(`header parameter ${parameter} is given twice`);
    const claim = keyGivenTwice(token, 1, payload);
    if (claim) throw new TokenRejected(`claim ${claim} is given twice`);
    return payload;
  }

  /**
   * The key set could not be fetched with none to stand in (`answer` the 503), or its URL refused it
   * with none fresh (the 401): the answer calls get at once until the back-off is over. Calls that
   * shared the failed fetch get the one answer (made, and logged, once; one wait).
   */
  private keySetFailing(answer: () => Error): Error {
    const failed = this.keySetFailed;
    const standing = stillFailing(failed);
    if (standing) return standing;
    this.keySetFailed = this.failedAgain(failed, answer());
    return this.keySetFailed.answer;
  }

  /** Whether jose holds a key set younger than `maxAgeMs` (it fetches one before every call otherwise). */
  private keySetFresh(): boolean {
    const { uat } = this.lastFetched;
    return uat !== undefined && Date.now() - uat < this.timings.maxAgeMs;
  }

  /** A failed attempt after `previous` (the run it continues): its answer stands for the next wait, doubled per failure in a row. */
  private failedAgain(previous: Failing | undefined, answer: Error): Failing {
    const waitMs = previous ? Math.min(previous.waitMs * 2, this.timings.unreachableRetryMaxMs) : this.timings.unreachableRetryMs;
    return { answer, until: Date.now() + waitMs, waitMs };
  }

  /** The identity provider cannot be reached: a 503, not the caller's fault. */
  private unreachable(err: unknown): Unavailable {
    // the message may quote a URL (fetch refuses one with userinfo, quoting it whole): its credentials stay out of the log
    logger().warn({ err: loggableText((err as Error).message), issuer: loggableUrl(this.options.issuer) }, 'identity provider unreachable');
    return new Unavailable('identity provider unreachable');
  }

  /**
   * jose's remote key set, once discovery (if any) found it. One discovery runs at a time, every call
   * meanwhile waiting for it. When it fails, its answer (TokenRejected, or the outage's Unavailable,
   * logged once) is every call's until `unreachableRetryMs` has passed, doubled per failure in a row up
   * to `unreachableRetryMaxMs`, so a provider that is down is asked once per wait, not once per call.
   */
  private keySet(): Promise<RemoteKeys> {
    if (this.keys) return this.keys;
    const failed = this.discoveryFailed;
    const answer = stillFailing(failed);
    if (answer) return Promise.reject(answer);
    const keys = this.resolveJwksUri()
      .then((uri) =>
        createRemoteJWKSet(new URL(uri), {
          // Never: checkedOrRefetched fetches again for a token the set cannot verify, once per cooldownMs.
          cooldownDuration: Number.POSITIVE_INFINITY,
          timeoutDuration: 5_000,
          cacheMaxAge: this.timings.maxAgeMs,
          [customFetch]: async (url: string, init: RequestInit) => {
            const response = await keySetFetch(url, init);
            this.keySetFailed = undefined; // the provider answered: a later failure starts a new run of waits
            return response;
          },
          [jwksCache]: this.lastFetched as ExportedJWKSCache,
        }),
      )
      .then(
        (found) => {
          this.discoveryFailed = undefined;
          return found;
        },
        (err: unknown) => {
          const answer = err instanceof TokenRejected ? err : this.unreachable(err);
          this.discoveryFailed = this.failedAgain(failed, answer);
          this.keys = undefined; // tried again once the wait is over
          throw answer;
        },
      );
    this.keys = keys;
    return keys;
  }

  private async resolveJwksUri(): Promise<string> {
    if (this.options.jwksUri) return this.options.jwksUri;
    const discovery = `${this.options.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    const response = await fetch(discovery, { signal: AbortSignal.timeout(5_000) });
    if (mayPass(response.status)) throw new ProviderOutage(`OIDC discovery ${loggableUrl(discovery)}`, response.status);
    if (!response.ok) throw new TokenRejected(`OIDC discovery ${loggableUrl(discovery)} answered ${response.status}`);
    const text = await bodyWithin(response);
    if (text === undefined) throw new TokenRejected(`OIDC discovery ${loggableUrl(discovery)} answered ${response.status} with more than ${MAX_DOCUMENT_BYTES} bytes`);
    const document = JSON.parse(text) as { jwks_uri?: string };
    if (!document.jwks_uri) throw new TokenRejected(`OIDC discovery ${loggableUrl(discovery)} names no jwks_uri`);
    logger().info({ jwksUri: loggableUrl(document.jwks_uri) }, 'signing keys located through OIDC discovery');
    return document.jwks_uri;
  }
}

/**
 * jwtVerify with `keys`, and when the set holds more than one key the token may name (two under its
 * `kid`, or keys without one and a token without one: an issuer rolling its key over may publish
 * both), with each of them in turn: the first whose signature holds verifies it. jose leaves that to
 * its caller (it throws JWKSMultipleMatchingKeys, iterable over the candidates), so every token of
 * such an issuer was refused. A signature none of them verifies is refused as a bad signature; any
 * other refusal (an expired token, a wrong issuer) as it came from the key that verified.
 */
async function verifiedWithAnyKey(token: string, keys: JWTVerifyGetKey, options: JWTVerifyOptions) {
  try {
    return await jwtVerify(token, keys, options);
  } catch (err) {
    if (!(err instanceof joseErrors.JWKSMultipleMatchingKeys)) throw err;
    // A candidate the hub cannot use (an RSA key under 2048 bits) is passed over: another may verify.
    let unusable: unknown;
    let usable = false;
    for await (const key of err) {
      try {
        return await jwtVerify(token, key, options);
      } catch (candidate) {
        if (unusableKey(candidate)) unusable ??= candidate;
        else if (candidate instanceof joseErrors.JWSSignatureVerificationFailed) usable = true;
        else throw candidate;
      }
    }
    // None verified: a bad signature, unless no candidate could be used at all (refused naming the key).
    throw unusable && !usable ? unusable : new joseErrors.JWSSignatureVerificationFailed();
  }
}

/** jose's remote key set: it fetches the set when due, and again when asked (reload). */
type RemoteKeys = ReturnType<typeof createRemoteJWKSet>;

/** A key set fetched last as jose's local set, for verifying while the provider is down. */
interface StaleKeys {
  jwks: Jwks;
  keys: JWTVerifyGetKey;
  /** `jwks` as currentKeySet() named it. */
  set: Jwks;
}

/** `value` and every object and array in it made read-only, without recursion (a payload may nest deep). */
function freezeDeep(value: object): void {
  const stack: object[] = [value];
  while (stack.length) {
    const v = stack.pop()!;
    if (Object.isFrozen(v)) continue;
    Object.freeze(v);
    for (const child of Object.values(v)) if (typeof child === 'object' && child !== null) stack.push(child);
  }
}

/** A key jose or WebCrypto cannot use (jose's TypeError for an RSA key under 2048 bits, WebCrypto's DataError for parameters that make no key). */
function unusableKey(err: unknown): boolean {
  const name = (err as Error | undefined)?.name;
  return name === 'TypeError' || name === 'DataError' || name === 'NotSupportedError';
}

/** The provider could not be reached, or answered an outage: no connection, no answer in time, a status that may pass. */
function isOutage(err: unknown): boolean {
  return err instanceof joseErrors.JWKSTimeout || err instanceof ProviderOutage || err instanceof KeySetUnreachable;
}

/**
 * A failed verification of `token` as the caller's refusal (TokenRejected, a 401); anything else as it
 * came. A key of the set the token names that jose cannot use is refused too: an RSA key shorter than
 * 2048 bits (jose's TypeError), parameters that make no key (WebCrypto's DataError). It was a 500 for
 * whoever named it, and a TypeError was taken for an outage (the keys fetched last standing in).
 */
function refusal(err: unknown, token: string): unknown {
  if (err instanceof TokenRejected) return err;
  if (err instanceof joseErrors.JOSEError) return new TokenRejected(`${err.code}: ${err.message}`);
  if (unusableKey(err)) {
    const { kid } = decodeProtectedHeader(token);
    return new TokenRejected(`key ${kid === undefined ? 'without a kid' : loggableText(String(kid))} of the key set cannot be used: ${(err as Error).message}`);
  }
  return err;
}
