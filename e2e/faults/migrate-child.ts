import { migrate } from '../../src/db/migrations.js';

/**
 * The hub's migration runner (src/db/migrations.ts, what every `svc-hub` start runs first) in a
 * process of its own, on a test migration set: `migrate-child.ts <owner url> <schema> <folder>`.
 * The executable only knows the product's sets; the fault suite kills this one mid `-- svc:no-transaction` build.
 */
const [url, schema, dir] = process.argv.slice(2);
const applied = await migrate(url!, null, [{ schema: schema!, dir: dir! }]);
process.stdout.write(`applied ${applied}\n`);
