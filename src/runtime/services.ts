import type { AuditRecorder } from '../audit/recorder.js';
import type { Authenticator } from '../auth/authenticate.js';
import type { ConnectorServices } from '../connectors/services.js';
import type { Directory } from '../auth/directory.js';
import type { Config } from '../config/config.js';
import type { Database } from '../db/database.js';
import type { SchemaStatus } from '../db/migrations.js';
import type { Catalog } from '../events/catalog.js';
import type { EventWriter } from '../events/outbox.js';
import type { HookRunner } from '../platform/hooks/runner.js';
import type { SecretStore } from '../platform/secrets/store.js';
import type { LiveStream } from '../events/stream.js';
import type { Subscribers } from '../events/subscribers.js';
import type { Mailer } from '../email/mailer.js';
import type { IntegrationHub } from '../webhooks/service.js';

/** What the apiserver's handlers are given: the composition root builds it once (src/runtime/hub.ts). */
export interface HubServices {
  config: Config;
  db: Database;
  directory: Directory;
  authenticator: Authenticator;
  /** Installed modules and their versions (`/api/platform/health`). */
  modules: Record<string, string>;
  /** The event catalog and hooks loaded from the module declarations. */
  catalog: Catalog;
  /** Writes events into the outbox inside a caller's transaction. */
  events: EventWriter;
  /** The live event stream's shared poller. */
  stream: LiveStream;
  /** Connector runs, schedules, pre-flight (src/connectors). */
  connectors: ConnectorServices;
  /** Buffers audit entries of mutating calls and data egress. */
  audit: AuditRecorder;
  migrationStatus(): Promise<SchemaStatus[]>;
  /** The connector credential store; `resolveSecret(tenantId, 'secret:NAME')` for connectors. */
  secrets: SecretStore;
  /** Declared hooks, the tenants' overrides, and the runner of their handlers. */
  hooks: HookRunner;
  /** Who listens to an event type (integrations, e-mail rules, processes register checks). */
  subscribers: Subscribers;
  /** Where e-mail rule messages go: SMTP when `svc.mail.host` is set, else mocked (read per message, so a test may replace it). */
  mailer: Mailer;
  /** The integration hub: integrations, the delivery journal, replays and tests (src/hub). */
  integrations: IntegrationHub;
}
