import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { parseAllDocuments } from 'yaml';
import pg from 'pg';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { applyConnector, getConnector, listConnectorsJson } from './store.js';

/**
 * The connectors list the API answers is made by the database (`listConnectorsJson`): it must be
 * the text `JSON.stringify` gives for the records `getConnector` reads (without their manifest and
 * spec), in the list's order, byte for byte, for every kind of
 * connector the examples declare (REST, GraphQL, SOAP, each pagination), with watermarks set and
 * not, and with an endpoint disabled.
 */

let hub: TestHub;
let owner: pg.Client;
const EXAMPLES = new URL('../../examples/', import.meta.url);

beforeAll(async () => {
  hub = await startTestHub();
  owner = new pg.Client({ connectionString: hub.ownerUrl });
  await owner.connect();
});

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

async function both(): Promise<{ database: string; stringified: string }> {
  return hub.services.db.withTenant(1, async (tx) => {
    const json = await listConnectorsJson(tx);
    const records = [];
    for (const { name } of JSON.parse(json.text) as Array<{ name: string }>) {
      const { manifest: _m, spec: _s, ...record } = (await getConnector(tx, name))!;
      records.push(record);
    }
    return { database: json.text, stringified: JSON.stringify(records) };
  });
}

describe('listConnectorsJson', () => {
  it('answers [] when the tenant has no connector', async () => {
    expect(await both()).toEqual({ database: '[]', stringified: '[]' });
  });

  it("is getConnector's records as JSON.stringify writes them, for every example connector", async () => {
    const manifests = readdirSync(EXAMPLES)
      .filter((file) => file.endsWith('.yaml'))
      .flatMap((file) => parseAllDocuments(readFileSync(new URL(file, EXAMPLES), 'utf8')).map((doc) => doc.toJS() as { kind?: string }))
      .filter((doc) => doc?.kind === 'Connector');
    expect(manifests.length).toBeGreaterThan(10);
    for (const manifest of manifests) await hub.services.db.withTenant(1, (tx) => applyConnector(tx, manifest));
    const before = await both();
    expect(before.database).toBe(before.stringified);
    expect(JSON.parse(before.database)).toHaveLength(manifests.length);

    // Watermarks with text that needs escaping, a time with microseconds, and one endpoint disabled.
    await owner.query(
      `update connectors.endpoints set watermark = E'2026-12-04T03:25:04Z "quoted" \\\\ back\\nline é 😀', watermark_updated_at = '2026-12-04 03:25:04.123456+00'
        where uuid = (select uuid from connectors.endpoints order by uuid limit 1)`,
    );
    await owner.query(`update connectors.endpoints set watermark = '42', watermark_updated_at = now() where uuid = (select uuid from connectors.endpoints order by uuid desc limit 1)`);
    const manifest = manifests[0] as { spec: { endpoints: Array<Record<string, unknown>> } };
    await hub.services.db.withTenant(1, (tx) =>
      applyConnector(tx, { ...manifest, spec: { ...manifest.spec, endpoints: manifest.spec.endpoints.map((e, i) => (i === 0 ? { ...e, enabled: false } : e)) } }),
    );
    const after = await both();
    expect(after.database).toBe(after.stringified);
    const parsed = JSON.parse(after.database) as Array<{ endpoints: Array<{ watermark: string | null; enabled: boolean }> }>;
    const endpoints = parsed.flatMap((c) => c.endpoints);
    expect(endpoints.filter((e) => e.watermark !== null)).toHaveLength(2);
    expect(endpoints.some((e) => e.enabled === false)).toBe(true);
  });
});
