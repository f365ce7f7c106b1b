import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from '@jest/globals';
import { packageRoot } from '../../src/package-root.js';

/**
 * The oldest Node.js package.json's `engines` allows (what README asks for and .ci/run checks) is one
 * every installed package accepts: a dependency that declares a newer one makes `npm install` warn
 * (EBADENGINE) on the very Node.js the README promises, or fail there.
 */

type Version = [number, number, number];

const compare = (a: Version, b: Version) => a[0] - b[0] || a[1] - b[1] || a[2] - b[2];

/** Whether `version` satisfies an npm range of the forms package-lock.json's `engines.node` holds. */
function satisfies(version: Version, range: string): boolean {
  return range.split('||').some((alternative) => {
    const comparators = [...alternative.matchAll(/(<=|>=|<|>|=|\^|~)?\s*v?(\d+|[x*])(?:\.(\d+|[x*]))?(?:\.(\d+|[x*]))?/g)];
    if (alternative.trim() === '' || alternative.trim() === '*') return true;
    return comparators.every(([, op = '', ...parts]) => {
      const wild = parts.findIndex((p) => p === undefined || p === 'x' || p === '*');
      const given = (wild === -1 ? 3 : wild) as 0 | 1 | 2 | 3;
      const low = [0, 1, 2].map((i) => (i < given ? Number(parts[i]) : 0)) as Version;
      // The first version past the range a partial or caret/tilde version stands for.
      const bump = (i: number): Version => [0, 1, 2].map((j) => (j < i ? low[j]! : j === i ? low[j]! + 1 : 0)) as Version;
      const high = op === '^' ? bump(low[0] > 0 || given === 1 ? 0 : low[1] > 0 || given === 2 ? 1 : 2) : op === '~' ? bump(given > 1 ? 1 : 0) : given === 0 ? undefined : bump(given - 1);
      const c = compare(version, low);
      switch (op) {
        case '>=':
          return c >= 0;
        case '>':
          return given === 3 ? c > 0 : !high || compare(version, high) >= 0;
        case '<=':
          return given === 3 ? c <= 0 : !high || compare(version, high) < 0;
        case '<':
          return c < 0;
        default: // `=`, none, `^`, `~`: from low up to (not including) high
          return given === 0 || (c >= 0 && (given === 3 && op !== '^' && op !== '~' ? c === 0 : compare(version, high!) < 0));
      }
    });
  });
}

describe('Node.js versions', () => {
  const root = packageRoot();
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { engines: { node: string } };
  const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string; engines?: { node?: string } | string[] }>;
  };

  it('reads the ranges npm writes', () => {
    const v = (s: string) => s.split('.').map(Number) as Version;
    expect(satisfies(v('20.19.0'), '>=20.19.0')).toBe(true);
    expect(satisfies(v('20.18.9'), '>=20.19.0')).toBe(false);
    expect(satisfies(v('20.19.0'), '>=22')).toBe(false);
    expect(satisfies(v('20.19.0'), '^20.19.0 || ^22.13.0 || >=23.5.0')).toBe(true);
    expect(satisfies(v('21.0.0'), '^20.19.0 || ^22.13.0 || >=23.5.0')).toBe(false);
    expect(satisfies(v('20.19.0'), '>= 20.16.0')).toBe(true);
    expect(satisfies(v('20.19.0'), '18 || 20 || >=22')).toBe(true);
    expect(satisfies(v('21.1.0'), '18 || 20 || >=22')).toBe(false);
    expect(satisfies(v('20.19.0'), '>=16 || 14 >=14.17')).toBe(true);
    expect(satisfies(v('14.16.0'), '>=16 || 14 >=14.17')).toBe(false);
    expect(satisfies(v('20.19.0'), '10.* || >= 12.*')).toBe(true);
    expect(satisfies(v('20.19.0'), '>=v12.22.7')).toBe(true);
    expect(satisfies(v('20.19.0'), '*')).toBe(true);
    expect(satisfies(v('20.19.0'), '>=14.0.0 <15')).toBe(false);
    expect(satisfies(v('20.19.0'), '~20.18.0')).toBe(false);
    expect(satisfies(v('20.19.0'), '^0.1.0')).toBe(false);
  });

  it("every locked package accepts the oldest Node.js package.json's engines allows", () => {
    const minimum = pkg.engines.node.match(/^>=(\d+)\.(\d+)(?:\.(\d+))?$/);
    expect(minimum).not.toBeNull();
    const oldest = [Number(minimum![1]), Number(minimum![2]), Number(minimum![3] ?? 0)] as Version;
    const refusing = Object.entries(lock.packages).flatMap(([path, entry]) => {
      const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      return path && range && !satisfies(oldest, range) ? [`${path}@${entry.version}: node ${range}`] : [];
    });
    expect(refusing).toEqual([]);
  });
});
