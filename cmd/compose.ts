import { createServer } from 'node:net';
import type Koa from 'koa';
import { type ApiOptions, createApi } from '../apiserver/app.js';
import type { RouteDecl } from '../apiserver/route.js';
import { listen, type RunningServer } from '../apiserver/server.js';
import { createAdminServices } from '../src/admin/services.js';
import { createManifestServices } from '../src/manifests/services.js';
import { Authenticator } from '../src/auth/authenticate.js';
import { Directory } from '../src/auth/directory.js';
import { TokenVerifier } from '../src/auth/verifier.js';
import { type Config, pgMemoryKb } from '../src/config/config.js';
import { MIGRATION_SETS, migrationStatus, readMigrations } from '../src/db/migrations.js';
import { interruptibleStart } from '../src/db/pool.js';
import { StartRefused } from '../src/errors.js';
import { loadCatalog } from '../src/events/catalog.js';
import { AuditRecorder } from '../src/audit/recorder.js';
import { AuditTrail } from '../src/audit/trail.js';
import { ClockRunner, type Now } from '../src/clock/clock.js';
import { OutboxLoop } from '../src/dispatch/outbox-loop.js';
import { Leadership } from '../src/dispatch/leader.js';
import { egressAgent } from '../src/egress/dispatcher.js';
import { chatFromConfig } from '../src/retrieval/chat/from-config.js';
import { embeddingFromConfig } from '../src/retrieval/embedding/from-config.js';
import { pendingIndexer, settlingIndexer } from '../src/retrieval/indexer.js';
import type { VectorSearchMode } from '../src/retrieval/pgvector.js';
import { createRetrievalServices, indexedAnything, MODEL_LEASE_MS } from '../src/retrieval/services.js';
import { platformDocuments } from './platform-corpus.js';
import { HUB_CONSUMERS } from './outbox.js';
import { scheduleHousekeeping } from './housekeeping.js';
import { leaderElector } from './leader.js';
import { DATABASE_SETUP, PendingSteps } from './stop.js';
import { integrationSubscriber } from '../src/webhooks/integrations.js';
import { createWebhookServices } from '../src/webhooks/services.js';
import { operationRoutes } from '../apiserver/routes/operations/operations.js';
import { EmailConsumer } from '../src/email/consumer.js';
import { createMailer } from '../src/email/mailer.js';
import { createEmailServices } from '../src/email/services.js';
import { createEntityServices } from '../src/entities/services.js';
import { PROCESS_CONSUMER, processBatchHandler } from '../src/processes/consumer.js';
import { NO_PROCESSES } from '../src/processes/store.js';
import { createProcessServices } from '../src/processes/services.js';
import { anyProcessWatches } from '../src/processes/store.js';
import { createWorkflowServices } from '../src/workflows/services.js';
import { emailRuleSubscriber, NO_ENABLED_RULES } from '../src/email/rules.js';
import { Subscribers } from '../src/events/subscribers.js';
import { LISTENER_CONNECT_TIMEOUT_MS, OutboxListener } from '../src/events/listener.js';
import { EventWriter } from '../src/events/outbox.js';
import { LiveStream } from '../src/events/stream.js';
import { HookRunner } from '../src/platform/hooks/runner.js';
import { loadMasterKeys } from '../src/platform/secrets/master-key.js';
import { SecretStore } from '../src/platform/secrets/store.js';
import { createConnectorServices } from '../src/connectors/services.js';
import { createExportServices } from '../src/exports/services.js';
import { egressPolicy } from '../src/egress/config.js';
import { logger } from '../src/observability/logger.js';
import { collectProcessMetrics } from '../src/observability/metrics.js';
import { startTracing, stopTracing } from '../src/observability/tracing.js';
import { packageVersion } from '../src/package-root.js';
import { RateLimiter, rateLimitsFrom } from '../src/ratelimit/limiter.js';
import { YamlReader } from '../src/manifests/yaml-reader.js';
import { setupDatabase, type DatabaseSetup } from '../src/runtime/database-setup.js';
import type { AreaServices } from '../src/runtime/services.js';

export interface Hub {
  readonly services: AreaServices;
  readonly server?: RunningServer;
  readonly url?: string;
  /** The worker role's connection URL (leader election's advisory lock, listeners). */
  readonly workerUrl: string;
  stop(): Promise<void>;
  /** The steps of a stop under way that have not ended yet (names, no values), in the order begun. */
  stopPending(): string[];
}

interface StartOptions {
  /** Serve the HTTP API (`all`, `serve`). */
  api: boolean;
  /** Run background consumers and clocks (`all`, `dispatch`); later areas register theirs. */
  background: boolean;
  /** With `api`: serve only the operations routes (/q/health*, /q/metrics), for the probes of `dispatch`. */
  operationsOnly?: boolean;
  /**
   * The caller stops the hub on SIGINT and SIGTERM (the executables): an embedded PostgreSQL then
   * runs in a process group of its own and is stopped after the hub's connections are closed.
   */
  stopsOnSignals?: boolean;
  extraRoutes?: RouteDecl[];
  /** Tests: told of every HTTP answer before it is sent (test/harness/hub.ts holds them to the OpenAPI document). */
  observe?: ApiOptions['observe'];
  /** The time the inbound rate limits count windows by (default `Date.now`; tests move it forward). */
  now?: Now;
  /**
   * A signal during the start (the executable's first SIGTERM, SIGINT or SIGHUP) interrupts it: the
   * embedded PostgreSQL's own start is stopped (its waits for the data directory's lock and for an
   * orphan's stop, initdb, the server's launch: setupDatabase), and
   * every database connection the start made is cut, the pools' included (src/db/pool.ts
   * `interruptibleStart`: the migrations' wait for their lock, the stored secrets' check, the outbox
   * listener's and the leadership's connects); no further step is begun, and the start fails,
   * releasing what it had acquired as any failed start does, without waiting on the database.
   */
  interrupt?: AbortSignal;
  /** Names the start's steps while they run (what an interrupted start that outlasts its limit is still waiting on, cmd/stop.ts). */
  startSteps?: PendingSteps;
}

/**
 * The composition root: database, services, API, and their orderly stop. A start that fails
 * releases what it had acquired (the other way round): the pools closed, the embedded PostgreSQL
 * stopped and its data directory freed, the clocks, listener and leadership stopped. So does a start
 * interrupted by `options.interrupt`.
 */
export function startHub(config: Config, options: StartOptions): Promise<Hub> {
  // The interruption cuts the start's database connections, the pools' too (src/db/pool.ts), so
  // neither a step waiting on them nor the release that follows waits on the database.
  return interruptibleStart(options.interrupt, async () => {
    const acquired: Array<() => unknown> = [];
    try {
      return await composeHub(config, options, (release) => acquired.unshift(release));
    } catch (err) {
      for (const release of acquired) {
        try {
          await release();
        } catch (releaseErr) {
          logger().warn({ err: releaseErr }, 'releasing what a failed start had acquired failed');
        }
      }
      throw err;
    }
  });
}

/**
 * The HTTP port, tried before anything is started: one another process holds (a hub started twice)
 * stops the start at once, not after the embedded PostgreSQL's start and the migrations. Only a
 * check: the port is bound once the hub is ready to serve (`listen`), which fails the same way
 * should the port have been taken meanwhile.
 */
async function checkPortFree(host: string, port: number): Promise<void> {
  if (port === 0) return;
  const probe = createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(port, host, () => resolve());
    });
  } catch (err) {
    throw cannotListen(host, port, err);
  }
  await new Promise((resolve) => probe.close(resolve));
}

function cannotListen(host: string, port: number, err: unknown): StartRefused {
  // A port another process holds is the usual case (a hub started twice): say what to do about it.
  const taken = (err as NodeJS.ErrnoException).code === 'EADDRINUSE' ? ' (another process holds the port, perhaps a svc-hub already running: stop it, or choose another port with PORT)' : '';
  return new StartRefused(`cannot listen on ${host}:${port}: ${(err as Error).message}${taken}`, { cause: err });
}

/** startHub's work; `acquired` is told how to release each thing started, should a later step fail. */
async function composeHub(config: Config, options: StartOptions, acquired: (release: () => unknown) => void): Promise<Hub> {
  const { interrupt } = options;
  /** A step of the start, named while it runs. */
  const starting = <T>(name: string, work: Promise<T>): Promise<T> => (options.startSteps ? options.startSteps.step(name, work) : work);
  /** Where the start goes on no further once interrupted: everything begun so far is in `acquired`. */
  const goOn = () => interrupt?.throwIfAborted();
  if (options.api) await checkPortFree(config.string('svc.http.host'), config.int('svc.http.port'));
  if (config.bool('svc.tracing.enabled')) {
    startTracing({ endpoint: config.string('svc.tracing.endpoint'), serviceName: config.string('svc.tracing.service-name') });
    logger().info({ endpoint: config.string('svc.tracing.endpoint') }, 'exporting traces over OTLP/gRPC');
    acquired(() => stopTracing());
  }
  // Before the database: a malformed svc.secret.master-key (or previous key) stops the start naming the property.
  const masterKey = loadMasterKeys(config);
  // Likewise an unusable svc.mail.from or svc.mail.tls-ca.
  const mailer = createMailer(config);
  acquired(() => mailer.close());
  // And an unusable svc.egress.allow. One outbound address policy for every request made for a tenant.
  const egress = egressPolicy(config);
  // And the model ports (an openai provider without its base URL).
  const embedding = embeddingFromConfig(config, egress);
  const chat = chatFromConfig(config, egressAgent(egress));
  goOn();
  const database: DatabaseSetup = await starting(DATABASE_SETUP, setupDatabase(config, { migrate: config.bool('svc.migrate.on-start'), ownProcessGroup: options.stopsOnSignals, interrupt }));
  acquired(() => database.close());
  goOn();
  const { db } = database;
  const catalog = loadCatalog();
  const events = new EventWriter(catalog);
  const directory = new Directory(db);
  const devBypass = config.bool('svc.security.dev-bypass');
  const verifier = devBypass
    ? undefined
    : new TokenVerifier({
        issuer: config.string('svc.oidc.issuer'),
        jwksUri: config.optional('svc.oidc.jwks-uri'),
        audience: config.optional('svc.oidc.audience'),
        maxLifetimeSeconds: config.duration('svc.oidc.max-token-lifetime') / 1000,
      });
  // Without an audience, every token the issuer signs is taken, those it hands out to other clients
  // (ID tokens of other applications of the same realm) too: said at start in the prod profile.
  if (verifier && config.string('svc.profile') === 'prod' && !config.optional('svc.oidc.audience')) {
    logger().warn('svc.oidc.audience is not set: the hub takes any token its issuer signs, including those issued to other clients of that issuer. Set it to the audience your identity provider puts in the hub\'s access tokens');
  }
  // Integrations and deliveries: the API facade everywhere (replays and tests are sent from the
  // process serving the call), the consumer and the retry sweep in the background roles.
  const webhooks = createWebhookServices(config, { db, catalog, key: masterKey, version: packageVersion(), egress });
  acquired(() => webhooks.stop());
  const secrets = new SecretStore(db, events, masterKey, { cacheTtlMs: config.duration('svc.secret.cache-ttl') });
  // Advisory: a database whose migrations are pending (svc.migrate.on-start off) has no table to try yet.
  const sealedUnder = await starting("the stored secrets' check", secrets.newestSealedUnder().catch(() => undefined));
  goOn();
  if (sealedUnder === 'none') {
    logger().error(
      'svc.secret.master-key does not open the stored secrets, nor does any of svc.secret.previous-master-keys (the newest was sealed with another key): connector runs, pre-flights and exports that use them fail naming the secret. Start with the key they were stored with (as the master key, or among the previous keys), or store them again',
    );
  } else if (sealedUnder === 'previous') {
    logger().info('the newest stored secret is sealed under one of svc.secret.previous-master-keys: run `svc-hub secrets rekey` to re-seal the stored values under svc.secret.master-key, then remove the previous key');
  }
  const subscribers = new Subscribers();
  const connectors = createConnectorServices({
    config,
    db,
    events,
    subscribers,
    secrets,
    ownerUrl: database.ownerUrl,
    roles: database.roles,
    egress,
    indexer: config.bool('svc.retrieval.index-rows') ? pendingIndexer : settlingIndexer,
  });
  acquired(() => connectors.close());
  const admin = createAdminServices({ db, events, directory });
  const exports = createExportServices({ config, db, secrets, egress });
  acquired(() => exports.close());
  const retrieval = createRetrievalServices({
    db,
    embedding,
    chat,
    statementTimeoutMs: config.duration('svc.analytic.statement-timeout'),
    maxAnswerBytes: config.int('svc.analytic.max-answer-bytes'),
    analyticMemory: {
      workMemKb: pgMemoryKb(config.string('svc.analytic.work-mem')),
      statementMemoryKb: pgMemoryKb(config.string('svc.analytic.statement-memory')),
      // Only where the application role may set it (the start warned otherwise).
      tempFileLimitKb: database.tempFileLimitSettable ? pgMemoryKb(config.string('svc.analytic.temp-file-limit')) : undefined,
    },
    analyticConcurrency: { total: config.int('svc.analytic.concurrency'), perTenant: config.int('svc.analytic.concurrency-per-tenant') },
    platformDocuments: () => platformDocuments(catalog),
    memoryBudgetBytes: config.int('svc.retrieval.memory-budget-mb') * 1024 * 1024,
    embedBatch: config.int('svc.embedding.batch'),
    embedClaimMs: config.duration('svc.retrieval.embed-claim'),
    vectorSearch: config.string('svc.retrieval.vector-search') as VectorSearchMode,
    hnswEfSearch: config.int('svc.retrieval.hnsw-ef-search'),
    modelLeaseMs: Math.max(MODEL_LEASE_MS, 10 * config.duration('svc.retrieval.index-every')),
  });
  acquired(() => retrieval.close());
  // The migrations of this build, read once: every readiness probe compares the history with them,
  // and reading and hashing the files each time cost ≈ 2 ms of the event loop per probe (an
  // unauthenticated flood of probes held the process's loop with it).
  const shippedMigrations = readMigrations(MIGRATION_SETS);
  const services: AreaServices = {
    admin,
    manifests: createManifestServices({ db, admin, egress, exportRunStaleAfterMs: config.duration('svc.export.run-stale-after') }),
    email: createEmailServices({ db }),
    entities: createEntityServices({ db }),
    processes: createProcessServices({ db, events }),
    workflows: createWorkflowServices({
      db,
      events,
      sweepBatch: config.int('svc.workflow.sweep.batch'),
      sweepTurn: config.int('svc.workflow.sweep.turn'),
      sweepEvery: config.duration('svc.workflow.sweep.every'),
    }),
    config,
    db,
    directory,
    authenticator: new Authenticator({ devBypass, tenantClaim: config.string('svc.oidc.tenant-claim'), verifier, directory }),
    rateLimiter: new RateLimiter(rateLimitsFrom(config), options.now),
    yamlReader: new YamlReader(),
    modules: catalog.versions(),
    catalog,
    events,
    secrets,
    hooks: new HookRunner(catalog, db, { ttlMs: config.duration('svc.hooks.cache-ttl') }),
    audit: new AuditRecorder(db),
    auditTrail: new AuditTrail(db),
    stream: new LiveStream(db, { pollEvery: config.duration('svc.events.stream.poll-every'), batch: config.int('svc.events.stream.batch') }),
    ping: () => db.ping(config.duration('svc.health.database-timeout')),
    migrationStatus: (timeoutMs) => migrationStatus((sql) => (timeoutMs === undefined ? db.app.query(sql) : db.answerWithin(sql, timeoutMs)), MIGRATION_SETS, shippedMigrations),
    readinessChecks: [],
    subscribers,
    connectors,
    exports,
    mailer,
    integrations: webhooks.integrations,
    retrieval,
  };
  services.subscribers.register(emailRuleSubscriber);
  services.subscribers.register(integrationSubscriber);
  services.subscribers.register(anyProcessWatches);

  // Per-process clocks: the audit flush wherever calls are served; in the background roles the
  // retrieval indexing and the schedulers, then (below) the housekeeping and the leader's jobs.
  const clocks = new ClockRunner();
  clocks.schedule('audit-flush', { every: config.duration('svc.audit.dispatch-every') }, async () => {
    await services.audit.flush();
  });
  if (options.background) {
    // Written rows become chunks and vectors after their run commits; the platform corpus is built
    // once per start. Pending work is claimed row by row, so several processes may index at once.
    clocks.schedule('retrieval-index', { every: config.duration('svc.retrieval.index-every') }, async () => {
      const done = await retrieval.indexPass(clocks.stopSignal);
      if (indexedAnything(done)) logger().debug(done, 'retrieval indexed');
    });
    retrieval.reindex();
    if (config.bool('svc.scheduler.enabled')) {
      // Slots are claimed in the database, so several processes may tick: each slot still runs once.
      clocks.schedule('connector-scheduler', { every: config.duration('svc.scheduler.tick') }, async () => {
        await connectors.scheduler.tick();
      });
      clocks.schedule('export-scheduler', { every: config.duration('svc.scheduler.tick') }, async () => {
        await exports.scheduler.tick();
      });
    }
  }
  clocks.start();
  acquired(() => clocks.stop());

  const listener = new OutboxListener(database.workerUrl, LISTENER_CONNECT_TIMEOUT_MS, config.duration('svc.datasource.close-timeout'));
  await starting("the outbox listener's start", listener.start());
  acquired(() => listener.stop());
  goOn();
  listener.onEvent(() => services.stream.wake());
  // The cursor consumers and sweeps run in one process at a time: jobs on `leaderClocks` tick only
  // while this process holds the leadership (a Kubernetes Lease or a PostgreSQL advisory lock,
  // `svc.leader.backend`; cmd/leader.ts).
  let leadership: Leadership | undefined;
  if (options.background) {
    leadership = new Leadership(leaderElector(config, database.workerUrl), { checkEvery: config.duration('svc.leader.check-every') });
    acquired(() => leadership?.stop());
    const leaderClocks = leadership.gate(clocks);
    // The daily purges (on the leader only) and the outbox lag gauge (cmd/housekeeping.ts).
    scheduleHousekeeping(clocks, leaderClocks, { db, config });
    // Declared hooks run for every event, in priority order (services.hooks is read per event, so
    // a replaced runner takes effect).
    const hookLoop = new OutboxLoop(db, {
      name: HUB_CONSUMERS.hooks,
      every: config.duration('svc.hooks.sweep-every'),
      setAsideAfter: config.int('svc.events.set-aside-after'),
      batch: 500,
      handle: async (event) => (await services.hooks.run({ tenantId: event.tenantId, type: event.type, payload: event.payload, id: event.id })).length > 0,
      // With no hook declared (the shipped modules declare none), the events are passed unread.
      idle: () => !services.hooks.hasHooks(),
    });
    await hookLoop.start(leaderClocks, listener);
    // E-mail rules: one message per matching event and rule, best effort (services.mailer is read
    // per event, so a replaced mailer takes effect).
    const email = new EmailConsumer(db, () => services.mailer, undefined, {
      recipientsPerMinute: config.int('svc.mail.recipients-per-minute'),
      backoffMs: config.duration('svc.mail.backoff'),
    });
    const emailLoop = new OutboxLoop(db, {
      name: HUB_CONSUMERS.email,
      every: config.duration('svc.email.sweep-every'),
      setAsideAfter: config.int('svc.events.set-aside-after'),
      batch: 100,
      handle: async (event) => (await email.handle(event)).length > 0,
      // With no enabled rule in any tenant, the events are passed unread (checked in the same snapshot).
      idleWhen: NO_ENABLED_RULES,
    });
    await emailLoop.start(leaderClocks, listener);
    if (mailer.mode === 'mocked') logger().info('e-mail rules: svc.mail.host is not set, messages are logged as mocked and not sent');
    // Processes: decisions emitted in the transaction that advances the consumer's cursor
    // (docs/processes.md), so none is lost or doubled across a crash.
    const processLoop = new OutboxLoop(db, {
      name: PROCESS_CONSUMER,
      every: config.duration('svc.process.sweep-every'),
      setAsideAfter: config.int('svc.events.set-aside-after'),
      batch: 200,
      handleBatchInTx: processBatchHandler(events),
      // With no process in any tenant, the events are passed unread (checked in the same snapshot).
      idleWhen: NO_PROCESSES,
    });
    await processLoop.start(leaderClocks, listener);
    // Webhooks: the outbox consumer (first attempts) and the retry sweep.
    await webhooks.start(leaderClocks, listener);
    // Connector runs whose process died (no heartbeat): failed within a minute, by the leader only.
    // Export runs likewise (spec 3: detected within a minute, at start and on every tick).
    leaderClocks.schedule('export-interrupted-runs', { every: config.duration('svc.export.interrupted-sweep-every') }, async () => {
      await exports.sweepInterrupted();
    });
    leaderClocks.schedule('connector-interrupted-runs', { every: config.duration('svc.connectors.interrupted-sweep-every') }, async () => {
      await connectors.sweepInterrupted();
    });
    // Workflow dormancy: one decision per record and spell (spells are marked in the emitting transaction).
    leaderClocks.schedule('workflow-dormancy', { every: config.duration('svc.workflow.sweep.every') }, async () => {
      // A tick ends early once this process stops leading or stops: the next leader's tick goes on.
      const done = await services.workflows.sweep(() => leaderClocks.running());
      if (done.emitted || done.ended) logger().debug(done, 'workflow dormancy sweep');
    });
    await starting("the leader election's start", leadership.start());
    goOn();
  }

  let server: RunningServer | undefined;
  if (options.api) {
    collectProcessMetrics();
    if (!options.operationsOnly) services.stream.start();
    acquired(() => services.stream.stop());
    const api: Koa = createApi(services, {
      version: packageVersion(),
      extraRoutes: options.extraRoutes,
      routes: options.operationsOnly ? operationRoutes : undefined,
      observe: options.observe,
    });
    try {
      server = await starting('the HTTP listen', listen(api, config.string('svc.http.host'), config.int('svc.http.port')));
    } catch (err) {
      throw cannotListen(config.string('svc.http.host'), config.int('svc.http.port'), err);
    }
  }

  let stopping: Promise<void> | undefined;
  // The steps of the stop begun and not ended: what a stop that outlasts its time limit names (cmd/stop.ts).
  const steps = new PendingSteps();
  const step = <T>(name: string, work: Promise<T>): Promise<T> => steps.step(name, work);
  return {
    services,
    server,
    url: server?.url,
    workerUrl: database.workerUrl,
    stopPending: () => steps.list(),
    stop() {
      stopping ??= (async () => {
        // Export runs of this process end Failed `interrupted` at once (their temporary files
        // removed), not after the requests' grace: begun first, waited for before the pools close.
        const exportsClosed = step('the export runs\' end', exports.close());
        // Connector runs likewise (Failed `interrupted: the hub stopped during the run`, rows read so far written).
        const connectorRunsClosed = step('the connector runs\' end', connectors.runner.close());
        // YAML bodies being read or waiting are answered at once (503, the hub is stopping), not after the grace.
        await step('the YAML bodies\' end', services.yamlReader.close());
        // Event streams never end by themselves: end them first so the listener can close.
        await step('the event streams\' end', services.stream.stop());
        await step('the in-flight requests', server?.close(config.duration('svc.http.shutdown-grace')) ?? Promise.resolve());
        // The clocks stop ticking at once; the outbox consumers end after the batch in hand (a
        // backlog is left to the next leader). In-flight deliveries are aborted (their leases bring
        // them back) and a batch waiting for room in a slow endpoint's queue gives its rows to the
        // retry sweep, so that batch ends promptly too; then another dispatcher may take the
        // leadership at once.
        const clocksStopped = step('the clocks\' last ticks (outbox batches in hand)', clocks.stop());
        await step('the webhook deliveries\' end', webhooks.stop());
        await clocksStopped;
        await step('the leadership\'s release', leadership?.stop() ?? Promise.resolve());
        services.mailer.close();
        await step('the final audit flush', services.audit.flush()).catch((err: unknown) => logger().error({ err }, 'final audit flush failed'));
        await step('the outbox listener\'s close', listener.stop());
        await step('the search indexer\'s close', retrieval.close());
        await exportsClosed;
        await connectorRunsClosed;
        await step('the connectors\' close', connectors.close());
        await step('the database\'s close (pools, embedded PostgreSQL)', database.close());
        await step('the last trace spans', stopTracing());
      })();
      return stopping;
    },
  };
}

/** What a person needs to call the hub that just started. */
export function announce(config: Config, url: string): void {
  if (config.bool('svc.security.dev-bypass')) {
    logger().warn(
      `DEV BYPASS ON: no token is checked; every caller has every role. Listening on ${url} (loopback only). Never run this in production.`,
    );
    logger().info(`svc-hub ready at ${url} — try: curl -H 'X-Tenant-ID: 1' ${url}/api/bff/v1/me   (API console: ${url}/q/swagger-ui/)`);
  } else {
    logger().info(
      `svc-hub ready at ${url} — call it with 'Authorization: Bearer <token>' issued by ${config.string('svc.oidc.issuer')} (API console: ${url}/q/swagger-ui/)`,
    );
  }
}
