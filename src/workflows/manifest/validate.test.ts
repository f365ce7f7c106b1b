import { describe, expect, it } from '@jest/globals';
import { durationInterval } from '../duration.js';
import { checkWorkflowManifest } from './validate.js';

const manifest = (spec: Record<string, unknown> = {}) => ({
  apiVersion: 'apps.svc.io/v1',
  kind: 'Workflow',
  metadata: { name: 'Partner-Status' },
  spec: { entity: 'partner', stateColumn: 'status', states: ['prospect', 'active', 'closed'], ...spec },
});

describe('durations of spec.dormancy.after', () => {
  it.each([
    ['90s', '90 seconds'],
    ['15m', '15 minutes'],
    ['2h', '2 hours'],
    ['30d', '30 days'],
    ['P30D', 'P30D'],
    ['PT15M', 'PT15M'],
    ['P1Y2M', 'P1Y2M'],
    ['P2W', 'P2W'],
    ['PT0.5S', 'PT0.5S'],
    ['36600d', '36600 days'],
    ['P100Y', 'P100Y'],
  ])('%s is %s', (text, interval) => {
    expect(durationInterval(text)).toBe(interval);
  });

  it.each(['', '30', 'd', '30x', '0d', '0s', 'P', 'PT', 'P0D', 'PT0S', '30 d', '-1d', 'p30d', 'P1DT', '36601d', 'P101Y', '999999999d', 'P1H', 'P0.5D'])('%j is refused', (text) => {
    expect(durationInterval(text)).toBeUndefined();
  });
});

describe('checkWorkflowManifest', () => {
  it('names a misspelt key first, before the required key it stands for', () => {
    const { stateColumn: _given, ...spec } = manifest().spec;
    const check = checkWorkflowManifest({ ...manifest(), spec: { ...spec, statecolumn: 'status' } });
    expect(check.errors[0]).toEqual({ field: 'spec.statecolumn', message: 'spec.statecolumn is not a known field' });
    expect(check.errors).toContainEqual({ field: 'spec.stateColumn', message: 'spec.stateColumn is required' });
  });

  it('normalises: the name lower-case, dormancy states default to all, duplicate transitions warned', () => {
    const check = checkWorkflowManifest(manifest({ transitions: [{ from: 'prospect', to: 'active' }, { from: 'prospect', to: 'active' }], dormancy: { after: '30d' } }));
    expect(check.errors).toEqual([]);
    expect(check.warnings).toEqual([{ field: 'spec.transitions[1]', message: 'transition prospect -> active is declared twice' }]);
    expect(check.workflow).toEqual({
      name: 'partner-status',
      entity: 'partner',
      stateColumn: 'status',
      states: ['prospect', 'active', 'closed'],
      transitions: [{ from: 'prospect', to: 'active' }],
      dormancy: { after: '30d', states: ['prospect', 'active', 'closed'] },
    });
  });

  it('names every field at fault', () => {
    const check = checkWorkflowManifest(manifest({ transitions: [{ from: 'lead', to: 'gone' }], dormancy: { after: '1y', states: ['asleep'] } }));
    expect(check.errors.map((e) => e.field)).toEqual(['spec.transitions[0].from', 'spec.transitions[0].to', 'spec.dormancy.after', 'spec.dormancy.states[0]']);
  });

  it('refuses a non-object and text PostgreSQL cannot store', () => {
    expect(checkWorkflowManifest('kind: Workflow').errors[0]!.field).toBe('');
    expect(checkWorkflowManifest(manifest({ states: ['a\u0000b'] })).errors[0]!.field).toBe('spec.states[0]');
  });
});
