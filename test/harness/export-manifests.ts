/**
 * Manifests the export suites share: entity `item` (scope crm, over `ext.items`: `external_id` as
 * id, the promoted `label`) and a CSV snapshot export of it to an S3 endpoint, its credentials the
 * tenant's secrets `S3_KEY` and `S3_SECRET`.
 */

export const ITEM_ENTITY = {
  apiVersion: 'apps.svc.io/v1',
  kind: 'Entity',
  metadata: { name: 'item' },
  spec: { scope: 'crm', key: 'id', columns: [{ name: 'id', type: 'text' }, { name: 'label', type: 'text' }], sources: [{ table: 'ext.items', key: 'external_id', columns: { id: 'external_id', label: 'label' } }] },
};

/** Export `name` of entity `item` to bucket `drops` at `endpoint`, file `<name>.csv`. */
export function itemS3Export(name: string, endpoint: string) {
  return {
    apiVersion: 'apps.svc.io/v1',
    kind: 'Export',
    metadata: { name },
    spec: {
      scope: 'crm',
      source: { entity: 'item' },
      columns: ['id', 'label'],
      order: ['id'],
      format: { kind: 'csv' },
      destination: { kind: 's3', bucket: 'drops', filename: `${name}.csv`, endpoint, region: 'eu-west-3', access_key_env: 'S3_KEY', secret_key_env: 'S3_SECRET' },
      mode: 'snapshot',
    },
  };
}

/**
 * Tenant 1 of `hub` ready to export entity `item`: `rows` rows in `ext.items` (`k1`… with labels
 * `label 1`…), the S3 secrets of `s3`, and the entity applied.
 */
export async function seedItemExports(
  hub: { services: { connectors: { ext: { ensureTable(tenant: number, table: string, promote: Array<{ name: string; path: string; type: 'text' }>): Promise<unknown> } } } },
  owner: { query(text: string, values?: unknown[]): Promise<unknown> },
  api: { post(path: string, body: unknown): Promise<{ status: number }> },
  s3: { accessKeyId: string; secretAccessKey: string },
  rows: number,
): Promise<void> {
  await hub.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  await owner.query(
    `insert into ext_t1.items (tenant_id, external_id, row_hash, data, connector_id, endpoint_id, label)
       select 1, 'k' || i, 'h' || i, '{}', '00000000-0000-0000-0000-0000000000c5', '00000000-0000-0000-0000-0000000000e5', 'label ' || i from generate_series(1, $1::int) as i`,
    [rows],
  );
  for (const [name, value] of [['S3_KEY', s3.accessKeyId], ['S3_SECRET', s3.secretAccessKey]]) {
    const stored = await api.post('/api/platform/secrets', { name, value });
    if (stored.status !== 201) throw new Error(`storing secret ${name}: HTTP ${stored.status}`);
  }
  const applied = await api.post('/api/entities/apply', ITEM_ENTITY);
  if (applied.status !== 201) throw new Error(`applying entity item: HTTP ${applied.status}`);
}

/**
 * Tenant 1 of `hub` ready to export entity `item` to an S3 endpoint that is never reached: `ext.items`
 * made (no rows), the S3 secrets `S3_KEY` and `S3_SECRET` stored, the entity applied.
 */
export async function prepareItemExports(
  hub: { services: { connectors: { ext: { ensureTable(tenant: number, table: string, promote: Array<{ name: string; path: string; type: 'text' }>): Promise<unknown> } } } },
  api: { post(path: string, body: unknown): Promise<{ status: number }> },
): Promise<void> {
  await hub.services.connectors.ext.ensureTable(1, 'ext.items', [{ name: 'label', path: '$.label', type: 'text' }]);
  for (const [name, value] of [['S3_KEY', 'key-id'], ['S3_SECRET', 'secret-key']]) {
    const stored = await api.post('/api/platform/secrets', { name, value });
    if (stored.status !== 201) throw new Error(`secret ${name}: ${stored.status}`);
  }
  const applied = await api.post('/api/entities/apply', ITEM_ENTITY);
  if (applied.status !== 201) throw new Error(`entity item: ${applied.status}`);
}
