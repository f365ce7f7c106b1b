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

  const FORM = 'it must be decision. followed by one or more segments separated by dots, each of ASCII letters (A-Z, a-z), digits, _ or - (e.g. decision.big-run)';
  it.each([
    ['decision..x', 'spec.decision has an empty segment (two dots in a row)'],
    ['decision.x.', 'spec.decision has an empty segment (it ends with a dot)'],
    ['decision.x y', 'spec.decision holds " " (U+0020) in segment "x y", which a segment may not hold'],
    ['decision.é', 'spec.decision holds "é" (U+00E9) in segment "é", which a segment may not hold'],
    ['decision.ok.a/b', 'spec.decision holds "/" (U+002F) in segment "a/b", which a segment may not hold'],
    ['Decision.x', 'spec.decision must start with decision. in lower case, not "Decision."'],
    ['alert.x', 'spec.decision must start with decision.'],
    ['decision', 'spec.decision must start with decision.'],
  ])('tells what is wrong with the decision type %s', (decision, fault) => {
    const check = checkProcessManifest({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'p' }, spec: { event: 'connector.run.*', decision } });
    expect(check.errors).toEqual([{ field: 'spec.decision', message: `${fault}: ${FORM}` }]);
  });

  it("refuses the workflow dormancy sweep's decision types (decision.dormant.<workflow>): another's decisions imitated, and the inbox's scope filter misled", () => {
    for (const decision of ['decision.dormant.partner-status', 'decision.dormant', 'decision.dormant.a.b']) {
      const check = checkProcessManifest({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'p' }, spec: { event: 'connector.run.*', decision } });
      expect([decision, check.errors]).toEqual([
        decision,
        [{ field: 'spec.decision', message: `spec.decision ${decision} is a type of the workflows' dormancy decisions (decision.dormant.<workflow>), which only the hub emits: choose another (e.g. decision.big-run)` }],
      ]);
    }
  });

  it('accepts decision types of letters, digits, _ and - in dotted segments', () => {
    for (const decision of ['decision.big-run', 'decision.A_1.b-2', 'decision.x', 'decision.dormancy', 'decision.dormant-partners', 'decision.x.dormant']) {
      expect(checkProcessManifest({ apiVersion: 'apps.svc.io/v1', kind: 'Process', metadata: { name: 'p' }, spec: { event: 'connector.run.*', decision } }).errors).toEqual([]);
    }
  });
});
