import { describe, expect, it } from '@jest/globals';
import { parseDocument } from 'yaml';
import { KUBECTL_YAML } from '../../manifests/yaml.js';
import { checkProcessManifest } from './validate.js';

describe('checkProcessManifest', () => {
  it('names the key YAML 1.1 read as a boolean (`on:` for `event:`) first, saying why, before the missing event', () => {
    const text = 'apiVersion: apps.svc.io/v1\nkind: Process\nmetadata: {name: big-runs}\nspec:\n  on: connector.run.*\n  decision: decision.big-run\n';
    const check = checkProcessManifest(parseDocument(text, KUBECTL_YAML).toJS());
    expect(check.errors[0]).toEqual({
      field: 'spec.true',
      message: 'spec.true is not a known field (YAML 1.1 reads an unquoted on, off, yes or no as a boolean: quote the key, or check its name)',
    });
    expect(check.errors).toContainEqual({ field: 'spec.event', message: 'spec.event is required' });
  });

  it('says only "not a known field" for any other unknown key', () => {
    const check = checkProcessManifest({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'p' }, spec: { event: 'connector.run.*', decision: 'decision.big-run', when2: 'true' } });
    expect(check.errors).toEqual([{ field: 'spec.when2', message: 'spec.when2 is not a known field' }]);
  });
});
