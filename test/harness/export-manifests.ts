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
