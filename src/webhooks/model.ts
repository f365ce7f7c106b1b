/**
 * The integration hub's shapes and fixed texts (spec 1 "Integration", "Test result", "Delivery
 * record", Events rule 6, Errors; CONTRACTS.md sections 4 and 5).
 */

/** Preset labels: they affect a UI only, the backend treats all integrations alike (CONTRACTS.md section 5). */
export const PLATFORMS = ['generic', 'zapier', 'make', 'n8n'] as const;
export type Platform = (typeof PLATFORMS)[number];

export const AUTH_MODES = ['HMAC', 'BEARER', 'NONE'] as const;
export type AuthMode = (typeof AUTH_MODES)[number];

/** Recorded on a delivery whose integration has no secret to sign or authenticate with (spec 1 Events rule 6). */
export const FAULT_NO_HMAC_SECRET = 'HMAC mode but no secret configured';
export const FAULT_NO_BEARER_TOKEN = 'Bearer mode but no token configured';

/** Closes a delivery whose integration was disabled, deleted or stopped matching between attempts (spec 1 Errors). */
export const CLOSED_REASON = 'endpoint gone, unsubscribed, or entity_filter no longer matches — retries stopped';

/**
 * Closes an open delivery of a deactivated tenant (docs/integrations.md): its retries stop, and
 * nothing more of the tenant is sent.
 */
export const TENANT_INACTIVE_REASON = 'tenant inactive: the tenant was deactivated — retries stopped';

/**
 * Closes a test delivery whose process stopped (died) before its outcome was recorded: tests are
 * never retried, so the retry sweep closes it once its lease has run out.
 */
export const TEST_INTERRUPTED_REASON = 'test send interrupted: the process sending it stopped before its outcome was recorded — not retried';

/**
 * Closes a delivery that failed every attempt `svc.webhook.max-attempts` allows: nothing will send it
 * again (a replay will), and closed it leaves the open rows the retry sweep reads at every claim.
 */
export const RETRIES_EXHAUSTED_REASON = 'retries exhausted: every attempt svc.webhook.max-attempts allows failed — replay it to send it again';

/** Stored response bodies are cut at this many characters (spec 1 Limits). */
export const RESPONSE_BODY_MAX = 2000;

/** The integration record the API returns: never the secret. */
export interface Integration {
  id: number;
  name: string;
  targetUrl: string;
  platform: Platform;
  authMode: AuthMode;
  hasSecret: boolean;
  eventTypes: string[];
  enabled: boolean;
  /** Also send the Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`). */
  standardWebhooks: boolean;
  createdAt: string;
  updatedAt: string;
  /** Set once the integration is deleted (it then answers only the single lookup and its history). */
  deletedAt: string | null;
}

export interface IntegrationInput {
  name: string;
  targetUrl: string;
  eventTypes: string[];
  platform?: Platform;
  authMode?: AuthMode;
  secret?: string | null;
  enabled?: boolean;
  standardWebhooks?: boolean;
}

export type IntegrationPatch = Partial<IntegrationInput>;

export type DeliveryKind = 'event' | 'replay' | 'test';

/**
 * A delivery record: spec 1's fields (snake case, as the spec names them) plus CONTRACTS.md
 * section 4's (camel case), plus `kind`, `replayOf` and `createdAt`.
 */
export interface DeliveryRecord {
  id: number;
  integrationId: number;
  eventType: string;
  /** The outbox event's id (the `X-Svc-Event-Id` header); null for test deliveries. */
  eventId: number | null;
  kind: DeliveryKind;
  /** The delivery this one replays. */
  replayOf: number | null;
  attempts: number;
  succeeded: boolean;
  closedReason: string | null;
  http_status: number | null;
  response_body: string | null;
  error: string | null;
  duration_ms: number | null;
  attempted_at: string | null;
  createdAt: string;
}

/** One attempt of a delivery (the journal behind a record's latest outcome). */
export interface AttemptRecord {
  attempt: number;
  http_status: number | null;
  response_body: string | null;
  error: string | null;
  duration_ms: number;
  attempted_at: string;
}

/** The response of the test operation (spec 1 "Test result"). */
export interface TestResult {
  ok: boolean;
  /** null when no response came (transport failure, or the fault of a missing secret). */
  httpStatus: number | null;
  responseBody: string | null;
  error: string | null;
  durationMs: number;
}

/** What one attempt produced. */
export interface AttemptOutcome {
  ok: boolean;
  httpStatus: number | null;
  responseBody: string | null;
  error: string | null;
  durationMs: number;
  attemptedAt: Date;
}
