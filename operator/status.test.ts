import { describe, expect, it } from '@jest/globals';
import { EgressPolicy } from '../src/egress/policy.js';
import { appliedMessage, appliedPartOf, condition, CRONJOB_NOT_WRITTEN, NOT_SCHEDULED, otherWarnings } from './status.js';

/**
 * The Ready message of an applied resource: the outbound address policy's warnings are told from the
 * apply's others by their text, so that a reconcile that applies nothing can put the policy in force
 * in their place (operator/reconciler.test.ts shows it end to end).
 */
describe('an applied Ready message', () => {
  const denying = new EgressPolicy({ denyPrivate: true });
  const policy = `spec.base_url: ${denying.applyWarning('10.0.0.5')}`;
  const loopback = `spec.destination.endpoint: ${denying.applyWarning('127.0.0.1')}`;
  // Another warning with '; ' in it, and one on the same field as a policy warning.
  const token = 'spec.auth.token_value: token_value is for development only; name a secret in token_env instead';
  const plain = 'spec.destination.endpoint: a plain http endpoint sends the file unencrypted';

  it('names the tenant, then the apply’s other warnings, the policy’s last', () => {
    expect(appliedMessage('acme', '', [])).toBe('applied to tenant acme');
    expect(appliedMessage('acme', '', [policy])).toBe(`applied to tenant acme; warnings: ${policy}`);
    expect(appliedMessage('acme', `${token}; ${plain}`, [loopback])).toBe(`applied to tenant acme; warnings: ${token}; ${plain}; ${loopback}`);
  });

  it('gives back the other warnings as written, wherever the policy’s stood (an older operator put them in between)', () => {
    expect(otherWarnings('applied to tenant acme')).toBe('');
    expect(otherWarnings(appliedMessage('acme', '', [policy]))).toBe('');
    expect(otherWarnings(appliedMessage('acme', token, []))).toBe(token);
    expect(otherWarnings(appliedMessage('acme', `${token}; ${plain}`, [loopback, policy]))).toBe(`${token}; ${plain}`);
    expect(otherWarnings(`applied to tenant acme; warnings: ${policy}; ${token}; ${loopback}; ${plain}`)).toBe(`${token}; ${plain}`);
  });

  it('is the message an apply under the new policy would give, once the policy’s warnings are put back', () => {
    const admitting = new EgressPolicy({ denyPrivate: true, allow: ['10.0.0.0/8'] });
    const before = appliedMessage('acme', token, [policy]);
    expect(admitting.applyWarning('10.0.0.5')).toBeUndefined();
    expect(appliedMessage('acme', otherWarnings(before), [])).toBe(`applied to tenant acme; warnings: ${token}`);
    expect(appliedMessage('acme', otherWarnings(appliedMessage('acme', token, [])), [policy])).toBe(before);
  });

  it('is read back from a Ready the CronJob left False or Unknown after the apply, and from no other that is not Applied', () => {
    const now = new Date();
    const applied = appliedMessage('acme', token, [policy]);
    const ready = (status: 'True' | 'False' | 'Unknown', reason: string, message: string) => condition(now, 'Ready', status, reason, message, 2);
    expect(appliedPartOf(ready('True', 'Applied', applied), 'acme')).toBe(applied);
    expect(appliedPartOf(ready('Unknown', 'CronJobFailed', `${applied}${CRONJOB_NOT_WRITTEN}HTTP 500: scripted`), 'acme')).toBe(applied);
    expect(appliedPartOf(ready('False', 'CronJobConflict', `${applied}${NOT_SCHEDULED}CronJob svc/x exists`), 'acme')).toBe(applied);
    expect(appliedPartOf(ready('False', 'NoRunTemplate', `applied to tenant acme${NOT_SCHEDULED}no pod template`), 'acme')).toBe('applied to tenant acme');
    // Another tenant's, or a Ready that holds no applied message.
    expect(appliedPartOf(ready('True', 'Applied', applied), 'other')).toBeUndefined();
    expect(appliedPartOf(ready('False', 'Invalid', 'spec.color: invisible is not a colour'), 'acme')).toBeUndefined();
    expect(appliedPartOf(ready('Unknown', 'HubUnavailable', 'the hub is unavailable: applied to tenant acme'), 'acme')).toBeUndefined();
    expect(appliedPartOf(undefined, 'acme')).toBeUndefined();
  });
});
