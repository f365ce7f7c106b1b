import { readFileSync } from 'node:fs';
import { describe, expect, it } from '@jest/globals';
import pg from 'pg';
import { createTestDatabase } from '../../../test/harness/database.js';
import { queryCredentials, redactQueryCredentials } from './stated-credentials.js';

describe('credentials stated in a query', () => {
  it('are the values under a credential\'s whole name, or of a well-known key\'s form, decoded as a URL reader decodes them', () => {
    expect(queryCredentials('/items?limit=10&api_key=k%2F1&token=&x=sk_live_abc&Sig=a+b')).toEqual([
      { name: 'api_key', value: 'k/1', raw: 'k%2F1', at: 1 },
      { name: 'x', value: 'sk_live_abc', raw: 'sk_live_abc', at: 3 },
      { name: 'Sig', value: 'a b', raw: 'a+b', at: 4 },
    ]);
    expect(queryCredentials('/items?sort_key=a&page_token=b&tokens=c&authority=d&keyword=e')).toEqual([]);
    expect(queryCredentials('/items')).toEqual([]);
    // Not valid percent-encoding: taken as written.
    expect(queryCredentials('/items?password=%zz')).toEqual([{ name: 'password', value: '%zz', raw: '%zz', at: 0 }]);
  });

  it('are written [REDACTED] where shown, every other part of the path as written', () => {
    expect(redactQueryCredentials('/v1/items?limit=10&api_key=k%2F1&q=a%20b&X-Amz-Security-Token=t')).toBe('/v1/items?limit=10&api_key=[REDACTED]&q=a%20b&X-Amz-Security-Token=[REDACTED]');
    expect(redactQueryCredentials('/v1/items?limit=10')).toBe('/v1/items?limit=10');
    expect(redactQueryCredentials('/v1/items')).toBe('/v1/items');
  });
});

describe('paths stored before apply redacted them (migration connectors V8)', () => {
  it('are redacted by the migration as apply redacts them now, by the credential names as written', async () => {
    const paths = [
      '/a?api_key=k-1&limit=10',
      '/a?limit=10&apiKey=k&ApiKey=K',
      '/a?x-api-key=1&X-Amz-Signature=ff&X-Amz-Security-Token=t&X-Goog-Signature=g',
      '/a?access_token=t&refresh_token=r&id_token=i&token=tt&auth=a&jwt=j',
      '/a?client_secret=s&clientSecret=s2&secret=s3&password=p&passwd=p2&pwd=p3&pass=p4',
      '/a?sig=abc%2Fdef&signature=x&credential=c&credentials=c2&key=k',
      '/a?sort_key=a&page_token=b&tokens=c&authority=d&keyword=e&token=&key',
      '/a',
      '/a?',
    ];
    const url = await createTestDatabase('v8');
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query('create temp table endpoints (n int, path text)');
      await client.query('insert into endpoints select n, p from unnest($1::text[]) with ordinality as x(p, n)', [paths]);
      const migration = readFileSync(new URL('../migrations/connectors/V8__endpoint_path_credentials.sql', import.meta.url), 'utf8');
      expect(migration).toContain('update connectors.endpoints');
      await client.query(migration.replace('update connectors.endpoints', 'update pg_temp.endpoints'));
      const { rows } = await client.query<{ path: string }>('select path from endpoints order by n');
      expect(rows.map((r) => r.path)).toEqual(paths.map(redactQueryCredentials));
      expect(rows.map((r) => r.path).join('\n')).toContain('[REDACTED]');
    } finally {
      await client.end();
    }
  });
});
