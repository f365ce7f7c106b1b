/**
 * Child process of the ingest benchmark's COPY ceiling (bench/support/copy-ceiling.ts): receives a
 * CopyRequest on the IPC channel, generates the demo source's rows (same seed, so the very rows the
 * source serves), COPYs them (in one stream or two) and answers the figures.
 */
import { generatePartners } from '../../src/demo-source/data.js';
import { type CopyRequest, copyCeiling } from './copy-ceiling.js';

process.once('message', (message) => {
  const request = message as CopyRequest;
  const rows = generatePartners(request.rows);
  copyCeiling(request.ownerUrl, rows, request.table, { gin: request.gin, streams: request.streams }).then(
    (figures) => process.send!({ ok: true, figures }, () => process.exit(0)),
    (err: Error) => process.send!({ ok: false, error: err.stack ?? err.message }, () => process.exit(1)),
  );
});
