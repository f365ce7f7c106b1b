import { createHmac } from 'node:crypto';
import { type AuthMode, FAULT_NO_BEARER_TOKEN, FAULT_NO_HMAC_SECRET } from './model.js';

/**
 * The request of one delivery attempt: its headers (spec 1 Events rule 5, plus the opt-in Standard
 * Webhooks set) or, when the integration has no secret for its mode, the fault text to record
 * instead of sending (rule 6).
 */

interface DeliveryRequestInput {
  eventType: string;
  /** The outbox event id; null on test deliveries (no `X-Svc-Event-Id`). */
  eventId: number | null;
  /** For Standard Webhooks' `webhook-id` when there is no event id (tests). */
  deliveryId: number;
  body: string;
  authMode: AuthMode;
  secret: string | undefined;
  standardWebhooks: boolean;
  /** Seconds since the epoch (`webhook-timestamp`). */
  now?: () => number;
}

type DeliveryRequest = { headers: Record<string, string> } | { fault: string };

/** `sha256=<lower-case hex HMAC-SHA256 of the raw body keyed with the secret>` */
export function svcSignature(secret: string, body: string): string {
  return `sha256=${createHmac('sha256', secret).update(body, 'utf8').digest('hex')}`;
}

/**
 * The Standard Webhooks key: a `whsec_<base64>` secret is the base64 key the libraries expect;
 * any other secret is used as its UTF-8 bytes (the libraries' raw-key form).
 */
function standardWebhooksKey(secret: string): Buffer {
  if (secret.startsWith('whsec_')) {
    const key = Buffer.from(secret.slice('whsec_'.length), 'base64');
    if (key.length > 0) return key;
  }
  return Buffer.from(secret, 'utf8');
}

/** `v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">` */
export function standardWebhooksSignature(secret: string, id: string, timestamp: number, body: string): string {
  return `v1,${createHmac('sha256', standardWebhooksKey(secret)).update(`${id}.${timestamp}.${body}`, 'utf8').digest('base64')}`;
}

export function deliveryRequest(input: DeliveryRequestInput): DeliveryRequest {
  const secret = input.secret === undefined || input.secret === '' ? undefined : input.secret;
  if (input.authMode === 'HMAC' && !secret) return { fault: FAULT_NO_HMAC_SECRET };
  if (input.authMode === 'BEARER' && !secret) return { fault: FAULT_NO_BEARER_TOKEN };
  const headers: Record<string, string> = {
    'Content-Type': 'application/json',
    'X-Svc-Event': input.eventType,
  };
  if (input.eventId !== null) headers['X-Svc-Event-Id'] = String(input.eventId);
  if (input.authMode === 'HMAC') headers['X-Svc-Signature'] = svcSignature(secret!, input.body);
  if (input.authMode === 'BEARER') headers.Authorization = `Bearer ${secret}`;
  if (input.standardWebhooks) {
    const id = input.eventId !== null ? String(input.eventId) : `test_${input.deliveryId}`;
    const timestamp = Math.floor((input.now ?? (() => Date.now() / 1000))());
    headers['webhook-id'] = id;
    headers['webhook-timestamp'] = String(timestamp);
    // Signed with the integration's secret in HMAC mode, like X-Svc-Signature.
    if (input.authMode === 'HMAC') headers['webhook-signature'] = standardWebhooksSignature(secret!, id, timestamp, input.body);
  }
  return { headers };
}
