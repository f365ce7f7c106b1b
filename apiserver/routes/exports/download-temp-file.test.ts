import { readdirSync, readlinkSync } from 'node:fs';
import { request } from 'node:http';
import type { IncomingMessage } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import type pg from 'pg';
import { devClient, ownerClient } from '../../../test/harness/api-client.js';
import { startTestHub, type TestHub } from '../../../test/harness/hub.js';
import { ITEM_ENTITY } from '../../../test/harness/export-manifests.js';
import { until } from '../../../test/harness/until.js';

/**
 * The one-shot CSV download is written to a temporary file first (docs/exports.md): that file has
 * no name from the moment it is opened, so a hub that stops or dies while it writes or sends it
 * leaves nothing behind in the temporary directory; an answer ended early closes it.
 */

const A = 1;
const ROWS = 60_000;
let hub: TestHub;
let owner: pg.Client;

/**
 * The hub's open temporary downloads (this process's files: the hub runs in it), as the kernel names
 * them: `<path> (deleted)` once the file has no name. Other test files' hubs, in other workers, may
 * download into the same directory meanwhile; only this process's files are looked at.
 */
function openDownloads(): string[] {
  return readdirSync('/proc/self/fd')
    .map((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`);
      } catch {
        return '';
      }
    })
    .filter((target) => target.includes('svc-hub-download-'));
}

beforeAll(async () => {
  hub = await startTestHub();
  owner = await ownerClient(hub.ownerUrl);
  await hub.services.connectors.ext.ensureTable(A, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  await owner.query(
    `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
     select 1, 'k' || i, 'h' || i, '{}', '00000000-0000-0000-0000-0000000000c7', '00000000-0000-0000-0000-0000000000e7', repeat('x', 100)
     from generate_series(1, ${ROWS}) as i`,
  );
  expect((await devClient(hub.url, A).post('/api/entities/apply', ITEM_ENTITY)).status).toBe(201);
}, 60_000);

afterAll(async () => {
  await owner?.end();
  await hub?.stop();
});

describe('the temporary file of the one-shot download', () => {
  it('has no name once the CSV is written, and its content is read whole from the start', async () => {
    const file = await hub.services.exports.download(A, undefined, 'item');
    // Was: svc-hub-download-<uuid>.csv in the temporary directory until the answer was sent (for
    // ever, had the hub died meanwhile), and no file open.
    expect(openDownloads()).toEqual([expect.stringMatching(/ \(deleted\)$/)]);
    const chunks: Buffer[] = [];
    for await (const chunk of file.body) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    expect(Buffer.byteLength(text)).toBe(file.bytes);
    expect(text.startsWith('"id","label"\r\n"k1","xxx')).toBe(true);
    expect(file.rows).toBe(ROWS);
    await until('the file to be closed', () => openDownloads().length === 0);
  }, 60_000);

  it('not read, it is closed by dispose()', async () => {
    const file = await hub.services.exports.download(A, undefined, 'item');
    expect(openDownloads()).toEqual([expect.stringMatching(/ \(deleted\)$/)]);
    await file.dispose();
    await until('the file to be closed', () => openDownloads().length === 0);
  }, 60_000);

  it('an answer the client stops reading halfway: nothing named meanwhile, the file closed once the client goes', async () => {
    const url = new URL(`${hub.url}/api/exports/entities/item/download`);
    const res = await new Promise<IncomingMessage>((resolve, reject) => {
      const req = request(url, { headers: { 'X-Tenant-ID': String(A) } }, resolve);
      req.on('error', reject);
      req.end();
    });
    expect(res.statusCode).toBe(200);
    expect(Number(res.headers['content-length'])).toBeGreaterThan(5_000_000);
    // One chunk read, the rest held back (the hub's stream waits on the socket).
    await new Promise((resolve) => res.once('data', resolve));
    res.pause();
    expect(openDownloads()).toEqual([expect.stringMatching(/ \(deleted\)$/)]);
    res.destroy();
    await until('the file to be closed', () => openDownloads().length === 0, 10_000);
  }, 60_000);

  it('an entity that cannot be read (404) leaves nothing open or named', async () => {
    await expect(hub.services.exports.download(A, undefined, 'nobody')).rejects.toThrow('entity nobody not found');
    expect(openDownloads()).toEqual([]);
  });
});
