import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import semver from 'semver';
import { packageRoot } from '../../src/package-root.js';

/**
 * The oldest Node.js package.json's `engines` allows (what README asks for and .ci/run checks) is one
 * every installed package accepts: a dependency that declares a newer one makes `npm install` warn
 * (EBADENGINE) on the very Node.js the README promises, or fail there. Ranges are read by `semver`,
 * the parser npm itself uses.
 */
describe('Node.js versions', () => {
  const root = packageRoot();
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string; engines?: { node?: string } | string[] }>;
  };

  it("every locked package accepts the oldest Node.js package.json's engines allows", () => {
    const oldest = semver.minVersion(pkg.engines.node);
    expect(oldest?.version).toBe('20.19.0');
    const refusing = Object.entries(lock.packages).flatMap(([path, entry]) => {
      const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      return path && range && !semver.satisfies(oldest!, range) ? [`${path}@${entry.version}: node ${range}`] : [];
    });
    expect(refusing).toEqual([]);
  });

  it('would notice a package that asks for more', () => {
    // A locked package of cookie 2's kind (node >=22) against the minimum: refused, so the test above can fail.
    expect(semver.satisfies(semver.minVersion(pkg.engines.node)!, '>=22')).toBe(false);
  });
});
