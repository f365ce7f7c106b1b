import { createHmac } from 'node:crypto';
import { describe, expect, it } from '@jest/globals';
import { FAULT_NO_BEARER_TOKEN, FAULT_NO_HMAC_SECRET } from './model.js';
import { deliveryRequest, standardWebhooksSignature, svcSignature } from './signing.js';

const base = { eventType: 'org.created', eventId: 42, deliveryId: 7, body: '{"orgId":1,"name":"Ünit"}', standardWebhooks: false, now: () => 1_700_000_000 };

describe('delivery requests', () => {
  it('HMAC: the spec\'s headers and sha256=<lower-case hex HMAC of the raw body>', () => {
    const request = deliveryRequest({ ...base, authMode: 'HMAC', secret: 's3cret' });
    expect(request).toEqual({
      headers: {
        'Content-Type': 'application/json',
        'X-Svc-Event': 'org.created',
        'X-Svc-Event-Id': '42',
        'X-Svc-Signature': `sha256=${createHmac('sha256', 's3cret').update(Buffer.from(base.body, 'utf8')).digest('hex')}`,
      },
    });
    expect(svcSignature('s3cret', base.body)).toMatch(/^sha256=[0-9a-f]{64}$/);
  });

  it('BEARER: Authorization only; NONE: no authentication header', () => {
    expect(deliveryRequest({ ...base, authMode: 'BEARER', secret: 'tok' })).toEqual({
      headers: { 'Content-Type': 'application/json', 'X-Svc-Event': 'org.created', 'X-Svc-Event-Id': '42', Authorization: 'Bearer tok' },
    });
    expect(deliveryRequest({ ...base, authMode: 'NONE', secret: 'ignored' })).toEqual({
      headers: { 'Content-Type': 'application/json', 'X-Svc-Event': 'org.created', 'X-Svc-Event-Id': '42' },
    });
  });

  it('no event id on tests', () => {
    const request = deliveryRequest({ ...base, eventId: null, authMode: 'NONE', secret: undefined });
    expect('headers' in request && request.headers['X-Svc-Event-Id']).toBeUndefined();
  });

  it('the fault texts when the mode needs a secret and there is none', () => {
    expect(deliveryRequest({ ...base, authMode: 'HMAC', secret: undefined })).toEqual({ fault: FAULT_NO_HMAC_SECRET });
    expect(deliveryRequest({ ...base, authMode: 'BEARER', secret: '' })).toEqual({ fault: FAULT_NO_BEARER_TOKEN });
    expect(FAULT_NO_HMAC_SECRET).toBe('HMAC mode but no secret configured');
    expect(FAULT_NO_BEARER_TOKEN).toBe('Bearer mode but no token configured');
  });

  it('Standard Webhooks: id, timestamp and v1 signature in HMAC mode; id and timestamp otherwise', () => {
    const hmac = deliveryRequest({ ...base, authMode: 'HMAC', secret: 'plain-secret', standardWebhooks: true });
    expect(hmac).toMatchObject({ headers: { 'webhook-id': '42', 'webhook-timestamp': '1700000000' } });
    const signature = (hmac as { headers: Record<string, string> }).headers['webhook-signature'];
    const expected = createHmac('sha256', 'plain-secret').update(`42.1700000000.${base.body}`).digest('base64');
    expect(signature).toBe(`v1,${expected}`);
    const test = deliveryRequest({ ...base, eventId: null, authMode: 'BEARER', secret: 'tok', standardWebhooks: true });
    expect(test).toMatchObject({ headers: { 'webhook-id': 'test_7', 'webhook-timestamp': '1700000000' } });
    expect((test as { headers: Record<string, string> }).headers['webhook-signature']).toBeUndefined();
  });

  it('Standard Webhooks: a whsec_ secret is its base64 key (the specification\'s test vector)', () => {
    expect(standardWebhooksSignature('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'msg_p5jXN8AQM9LWM0D4loKWxJek', 1614265330, '{"test": 2432232314}')).toBe(
      'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
    );
  });
});
