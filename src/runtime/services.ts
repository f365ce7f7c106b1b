import type { YamlReader } from '../manifests/yaml-reader.js';
import type { AdminServices } from '../admin/services.js';
import type { AuditRecorder } from '../audit/recorder.js';
import type { AuditTrail } from '../audit/trail.js';
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
import type { EmailServices } from '../email/services.js';
import type { EntityServices } from '../entities/services.js';
import type { ProcessServices } from '../processes/services.js';
import type { IntegrationService } from '../webhooks/service.js';
import type { ManifestServices } from '../manifests/services.js';
import type { RateLimiter } from '../ratelimit/limiter.js';
import type { RetrievalServices } from '../retrieval/services.js';
import type { ExportServices } from '../exports/services.js';
import type { WorkflowServices } from '../workflows/services.js';

/**
 * The set of area services the composition root (cmd/compose.ts) builds once and hands to the API,
 * `svc-hub run` and the operator. An area's service methods take the tenant and open their own
 * transaction; callers never open one for them and never write SQL (docs/architecture.md).
 */
export interface AreaServices {
  // The areas.
  /** Tenancy administration: tenants, organisations, users, roles, scopes (src/admin). */
  admin: AdminServices;
  /** Connectors: manifests, runs, dead letters, schedules, pre-flight (src/connectors). */
  connectors: ConnectorServices;
  /** Entities: canonical columns over ext tables, several sources fused on one key (src/entities). */
  entities: EntityServices;
  /** Processes (reactions to events that emit decisions) and the decision inbox (src/processes). */
  processes: ProcessServices;
  /** Exports: manifests, runs, the scheduler, the one-shot download (src/exports). */
  exports: ExportServices;
  /** Workflows: the lifecycle of an entity's records and the dormancy sweep (src/workflows). */
  workflows: WorkflowServices;
  /** Manifests applied by the operator through each kind's handler (src/manifests). */
  manifests: ManifestServices;
  /** E-mail rules (src/email). */
  email: EmailServices;
  /** Webhooks: integrations, the delivery journal, replays and tests (src/webhooks). */
  integrations: IntegrationService;
  /** Retrieval: chunks, vectors, search, scopes and corpora, the platform corpus (src/retrieval). */
  retrieval: RetrievalServices;
  /** The connector credential store; `resolveSecret(tenantId, 'secret:NAME')` for connectors. */
  secrets: SecretStore;
  /** Declared hooks, the tenants' overrides, and the runner of their handlers. */
  hooks: HookRunner;
  /** The event catalog and hooks loaded from the module declarations. */
  catalog: Catalog;
  /** The live event stream's shared poller. */
  stream: LiveStream;
  /** Buffers audit entries of mutating calls and data egress. */
  audit: AuditRecorder;
  /** Reads a tenant's own audit trail (`GET /api/platform/audit`). */
  auditTrail: AuditTrail;
  /** Where e-mail rule messages go: SMTP when `svc.mail.host` is set, else mocked (read per message, so a test may replace it). */
  mailer: Mailer;

  // What the areas are built from.
  config: Config;
  /**
   * The connections, for the composition root, background jobs and tests. Routes, the operator and
   * `svc-hub run` go through an area's service instead (a test in apiserver/ checks the routes).
   */
  db: Database;
  directory: Directory;
  authenticator: Authenticator;
  /** Reads tenants' YAML (manifest bodies, OpenAPI documents) on a thread of its own; closed when the hub stops. */
  yamlReader: YamlReader;
  /** Inbound rate limits of the routes that declare a bucket (counts in memory, per process; read per request, so a test may replace it). */
  rateLimiter: RateLimiter;
  /** Installed modules and their versions (`/api/platform/health`). */
  modules: Record<string, string>;
  /** Writes events into the outbox inside a caller's transaction. */
  events: EventWriter;
  /** Who listens to an event type (integrations, e-mail rules, processes register checks). */
  subscribers: Subscribers;
  /** Answers when the database does (health checks). */
  ping(): Promise<void>;
  /** Each schema's migrations; with `timeoutMs`, given up when the database has not answered by then (the health checks). */
  migrationStatus(timeoutMs?: number): Promise<SchemaStatus[]>;
  /**
   * Readiness checks a role adds to the database and migration checks of `/q/health/ready` (the
   * operator: reconciling while it leads). Registered once at start; each answers quickly.
   */
  readinessChecks: ReadinessCheck[];
}

/** One entry of `/q/health/ready`'s `checks`. */
export type ReadinessCheck = () => { name: string; status: 'UP' | 'DOWN'; data?: Record<string, unknown> };
