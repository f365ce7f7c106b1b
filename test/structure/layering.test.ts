import { describe, expect, it } from '@jest/globals';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The transaction rule (docs/architecture.md): routes, the operator, `svc-hub run` and `svc-hub secrets` call an area's service,
 * whose methods open their own transaction; they never reach the database or write SQL themselves.
 * Handler inputs are typed from their schemas (apiserver/route.ts), so no non-null casts either.
 */

const root = fileURLToPath(new URL('../..', import.meta.url));

function sources(dir: string): string[] {
  return readdirSync(join(root, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !e.name.endsWith('.test.ts'))
    .map((e) => relative(root, join(e.parentPath, e.name)));
}

const callers = [...sources('apiserver/routes'), ...sources('operator'), 'cmd/run.ts', 'cmd/operator.ts', 'cmd/secrets.ts'];

describe('layering', () => {
  it('finds the route files', () => {
    expect(callers.length).toBeGreaterThan(15);
  });

  it.each(callers)('%s opens no transaction and writes no SQL', (file) => {
    const text = readFileSync(join(root, file), 'utf8');
    expect(text).not.toMatch(/services\.db\b/);
    expect(text).not.toMatch(/\bdb\.(app|worker|owner)\b|options\.db\b/);
    expect(text).not.toMatch(/\.(withTenant|withoutTenant|crossTenant|query)\(/);
    expect(text).not.toMatch(/\b(select|insert into|update|delete from)\b[^'`]*\b(from|set|values|where)\b.*[a-z_]+\.[a-z_]+/i);
  });

  it.each(sources('apiserver/routes'))('%s takes its inputs as typed (no `params.x!`, `query.x as`, `body as`)', (file) => {
    const text = readFileSync(join(root, file), 'utf8');
    expect(text).not.toMatch(/\b(params|query)\.\w+!/);
    expect(text).not.toMatch(/\b(params|query)\.\w+ as /);
    expect(text).not.toMatch(/\(body as /);
  });
});
