import { register } from 'tsx/esm/api';

register();
const { stopTestPostgres } = await import('./start-postgres.ts');
const { removeRunDir } = await import('./run-tmpdir.ts');

/** The run's PostgreSQL stopped; then its TMPDIR removed, and the run failed when a test left something in it. */
export default async function globalTeardown() {
  const failures = [];
  try {
    await stopTestPostgres();
  } catch (err) {
    failures.push(err);
  }
  const dir = process.env.SVC_TEST_RUN_DIR;
  if (dir) {
    const left = removeRunDir(dir);
    if (process.env.SVC_TEST_OUTER_TMPDIR) process.env.TMPDIR = process.env.SVC_TEST_OUTER_TMPDIR;
    if (left.length > 0) {
      failures.push(
        new Error(
          `the run's tests left ${left.length} temporary file(s) or directory(ies) in its TMPDIR ${dir} (removed now; a test removes what it makes in afterAll or a finally, a harness in its stop): ${left.join(', ')}`,
        ),
      );
    }
  }
  if (failures.length === 1) throw failures[0];
  if (failures.length > 1) throw new AggregateError(failures, failures.map((f) => f.message).join('\n'));
}
