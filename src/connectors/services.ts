import type { Agent, Dispatcher } from 'undici';
import { type Config, ConfigError } from '../config/config.js';
import { egressPolicy } from '../egress/config.js';
import { egressAgent } from '../egress/dispatcher.js';
import type { EgressPolicy } from '../egress/policy.js';
import { type CredentialSources, createCredentialResolver, credentialSources } from './auth/resolver.js';
import type { Database, Tx } from '../db/database.js';
import type { RoleNames } from '../db/roles.js';
import type { EventWriter } from '../events/outbox.js';
import type { Subscribers } from '../events/subscribers.js';
import type { SecretStore } from '../platform/secrets/store.js';
import type { EngineContext } from './engine/read.js';
import { EnginePageReader, type ReadContext } from './engine/page-reader.js';
import { noIndexer, type RowIndexer } from './indexer.js';
import { logger } from '../observability/logger.js';
import { ConnectorRunner } from './runner.js';
import { failInterrupted, INTERRUPTED_MESSAGE } from './runs/ledger.js';
import { ConnectorScheduler } from './scheduler.js';
import { loadConnector, loadConnectorById } from './store.js';
import { ExtSchema } from './target/ddl.js';
import { type ConnectorTenantServices, connectorTenantServices } from './tenant-services.js';
import type { ConnectorSpec } from './types.js';

/** Everything the connector area offers the rest of the hub (HTTP routes, scheduler, CLI). */
export interface ConnectorServices extends ConnectorTenantServices {
  runner: ConnectorRunner;
  scheduler: ConnectorScheduler;
  reader: EnginePageReader;
  ext: ExtSchema;
  load(tx: Tx, name: string): Promise<ConnectorSpec | undefined>;
  /** The engine context of one connector (credentials of its tenant, its rate-limit bucket, the egress agent). */
  context(connector: ConnectorSpec): EngineContext;
  /** The agent every request made for a tenant outside a connector's context goes through (scaffold). */
  dispatcher: Dispatcher;
  /** Fails the runs of processes that died (no heartbeat for `svc.connectors.run-stale-after`); returns how many. */
  sweepInterrupted(): Promise<number>;
  close(): Promise<void>;
}

export interface ConnectorDeps {
  config: Config;
  db: Database;
  events: EventWriter;
  subscribers: Subscribers;
  secrets: SecretStore;
  ownerUrl: string;
  roles: RoleNames;
  /** The outbound address policy (default: from the configuration). */
  egress?: EgressPolicy;
  indexer?: RowIndexer;
}

/**
 * Wires the connector area. Every named value of a connector (`*_env` credentials, header
 * `value_env`, `{{env:NAME}}`) resolves through one resolver (auth/resolver.ts): the connector
 * tenant's stored secret of that name, then, only for names allowed by `svc.credentials.env-allow`
 * and never for the hub's own settings, an environment variable, then a non-property key of the
 * configuration file. Every request goes through the outbound address policy's agent.
 */
/** Connect timeout of a source request (headers and body: svc.connectors.http.*-timeout). */
const CONNECT_TIMEOUT_MS = 10_000;

/**
 * The agent every request to a tenant's source goes through, through the outbound address policy.
 * An idle connection is closed after at most svc.connectors.http.idle-timeout: undici would keep
 * it as long as the source's `Keep-Alive: timeout=` asks, up to 10 minutes, so a hub reading many
 * tenants' sources held their idle sockets (file descriptors, the sources' connection slots)
 * between runs.
 */
export function sourceAgent(config: Config, egress: EgressPolicy): Agent {
  return egressAgent(egress, { connectTimeoutMs: CONNECT_TIMEOUT_MS, idleTimeoutMs: config.duration('svc.connectors.http.idle-timeout') });
}

export function createConnectorServices(deps: ConnectorDeps): ConnectorServices {
  const { config } = deps;
  const retry = {
    attempts: 5,
    baseDelayMs: config.duration('svc.connectors.retry.base-delay'),
    maxDelayMs: config.duration('svc.connectors.retry.max-delay'),
  };
  const timeouts = {
    headersMs: config.duration('svc.connectors.http.headers-timeout'),
    bodyMs: config.duration('svc.connectors.http.body-timeout'),
    responseMs: config.duration('svc.connectors.http.response-timeout'),
  };
  const sources: CredentialSources = credentialSources(config, deps.secrets);
  const egress = deps.egress ?? egressPolicy(config);
  const dispatcher = sourceAgent(config, egress);
  const readContext = (connector: ConnectorSpec): ReadContext => ({
    resolveCredential: createCredentialResolver(sources, connector.tenantId, `connector:${connector.name}`),
    dispatcher,
    retry,
    timeouts,
    maxPages: config.int('svc.connectors.max-pages'),
  });
  const reader = new EnginePageReader(readContext);
  const ext = new ExtSchema(deps.ownerUrl, deps.roles, config.duration('svc.datasource.close-timeout'));
  const runner = new ConnectorRunner({
    db: deps.db,
    events: deps.events,
    ext,
    reader,
    indexer: deps.indexer ?? noIndexer,
    chunkSize: config.int('svc.connectors.chunk-size'),
    maxDeadLetters: config.int('svc.connectors.max-dead-letters-per-run'),
    subscribers: deps.subscribers,
    heartbeatEvery: config.duration('svc.connectors.heartbeat-every'),
  });
  const staleAfter = config.duration('svc.connectors.run-stale-after');
  if (staleAfter <= config.duration('svc.connectors.heartbeat-every')) {
    throw ConfigError.of('svc.connectors.run-stale-after', 'must be longer than svc.connectors.heartbeat-every, or live runs would be failed as interrupted');
  }
  /** A run failed as interrupted (by the sweep, or by a cancel of a run whose process died): its event, in the transaction that ended it. */
  const emitInterrupted = async (tx: Tx, tenantId: number | undefined, runId: string, connectorId: string) => {
    await deps.events.emit(tx, 'connector.run.failed', { run_id: runId, connector_id: connectorId, error_message: INTERRUPTED_MESSAGE, retryable: true }, tenantId);
  };
  const scheduler = new ConnectorScheduler(deps.db, runner, loadConnectorById);
  return {
    ...connectorTenantServices(deps.db, runner, config.string('svc.profile') === 'dev', { staleAfterMs: staleAfter, emit: emitInterrupted }, egress),
    runner,
    scheduler,
    reader,
    ext,
    load: loadConnector,
    context: (connector) => ({ ...readContext(connector), limiter: reader.limiterFor(connector), maxTokenWaitMs: config.duration('svc.connectors.preflight.max-token-wait') }),
    async sweepInterrupted() {
      const closed = await deps.db.crossTenant('interrupted-runs', (tx) => failInterrupted(tx, staleAfter, (tenantId, runId, connectorId) => emitInterrupted(tx, tenantId, runId, connectorId)));
      for (const run of closed) logger().warn({ runId: run.id, tenantId: run.tenantId, connector: run.connector }, `run ${run.id} of connector ${run.connector} failed as interrupted: no heartbeat for ${staleAfter} ms`);
      return closed.length;
    },
    dispatcher,
    close: async () => {
      // Runs of this process end Failed `interrupted` (a clean stop) before the pools close.
      await runner.close();
      await ext.close();
      await dispatcher.close().catch(() => undefined);
    },
  };
}
