// Jest loads global setup outside its module system, so the TypeScript harness runs through tsx here.
import { tmpdir } from 'node:os';
import { register } from 'tsx/esm/api';

register();
const { startTestPostgres } = await import('./start-postgres.ts');
const { makeRunDir, removeRunDir, sweepStaleRunDirs } = await import('./run-tmpdir.ts');

/**
 * The run's own TMPDIR (test/harness/run-tmpdir.ts), set before the workers start so that they and
 * every process they start inherit it; then the run's PostgreSQL, whose directory is made in it.
 */
export default async function globalSetup() {
  const swept = await sweepStaleRunDirs();
  if (swept.length > 0) console.warn(`removed the temporary directories of ${swept.length} earlier test run(s) that ended without their teardown: ${swept.join(', ')}`);
  const outer = tmpdir();
  const dir = makeRunDir(outer);
  process.env.SVC_TEST_OUTER_TMPDIR = outer;
  process.env.SVC_TEST_RUN_DIR = dir;
  process.env.TMPDIR = dir;
  try {
    await startTestPostgres();
  } catch (err) {
    // Jest runs no teardown after a failed setup.
    removeRunDir(dir);
    process.env.TMPDIR = outer;
    throw err;
  }
}
