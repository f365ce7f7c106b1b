import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from '@jest/globals';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { captureLogs } from '../test/harness/log-capture.js';
import { startIssuer, type TestIssuer } from '../test/harness/tokens.js';

/** A prod hub without svc.oidc.audience says at start that it takes every token its issuer signs. */

let issuer: TestIssuer;
const hubs: TestHub[] = [];

beforeAll(async () => {
  issuer = await startIssuer();
});

afterAll(async () => {
  for (const hub of hubs) await hub.stop();
  await issuer?.close();
});

const AUDIENCE_WARNING = /svc\.oidc\.audience is not set: the hub takes any token its issuer signs/;

it('warns at start in the prod profile when no audience is set, and not when one is', async () => {
  const prod = { 'svc.profile': 'prod', 'svc.oidc.issuer': issuer.issuer, 'svc.secret.master-key': randomBytes(32).toString('hex'), 'svc.http.host': '127.0.0.1' };
  const logs = captureLogs('warn');
  try {
    const without = await startTestHub(prod);
    hubs.push(without);
    const warned = logs.lines().filter((l) => AUDIENCE_WARNING.test(String(l.msg)));
    expect(warned).toHaveLength(1);
    expect(warned[0]!.level).toBe('warn');
    const before = logs.lines().length;
    hubs.push(await startTestHub({ ...prod, 'svc.oidc.audience': 'svc-hub', 'svc.datasource.url': without.ownerUrl, 'svc.migrate.on-start': false }));
    expect(logs.lines().slice(before).filter((l) => AUDIENCE_WARNING.test(String(l.msg)))).toEqual([]);
  } finally {
    logs.restore();
  }
});
