/**
 * Every configuration property of the hub, in one table. The loader validates against it,
 * docs/configuration.md is generated from it (`npm run docs:config`), and a test keeps the two equal.
 * Later areas add their properties here, beside the clocks they configure.
 */

/** `pg-memory`: an amount of memory as PostgreSQL writes one (`4MB`, `64kB`), its min and max in kilobytes. */
export type PropertyKind = 'string' | 'int' | 'bool' | 'duration' | 'url' | 'enum' | 'secret' | 'size' | 'pg-memory';
export type PropertyValue = string | number | boolean | undefined;

/** Reads another property while a default is being computed. */
export type Lookup = (name: string) => PropertyValue;

export interface PropertyDef {
  readonly name: string;
  readonly kind: PropertyKind;
  readonly description: string;
  /** A value, or a function of other properties (profile-dependent defaults). */
  readonly default?: PropertyValue | ((get: Lookup) => PropertyValue);
  /** Shown in the docs instead of the computed default. */
  readonly defaultText?: string;
  /** Environment variables read besides the canonical `SVC_A_B_C` form, in order of precedence after it. */
  readonly aliases?: readonly string[];
  readonly values?: readonly string[];
  readonly min?: number;
  readonly max?: number;
  /** For `url`: the schemes accepted (without the colon); default any. */
  readonly schemes?: readonly string[];
  readonly group: string;
}

const p = (def: PropertyDef): PropertyDef => def;

/** The default of a bound on work that holds a pool connection each (exports, analytic queries): 4, leaving the rest of the hub 2. */
const POOL_SHARE = {
  default: (get: Lookup) => Math.min(4, (get('svc.datasource.pool-size') as number) - 2),
  defaultText: '4 (at most `svc.datasource.pool-size` − 2)',
} as const;

/** The log levels `svc.log.level` takes (pino's). */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

export const PROPERTIES: readonly PropertyDef[] = [
  // Runtime
  p({ group: 'Runtime', name: 'svc.profile', kind: 'enum', values: ['dev', 'prod'], default: 'dev',
    description: '`dev` (readable logs, the dev bypass by default when no issuer is set) or `prod` (JSON logs, the bypass refused, master key required).' }),
  p({ group: 'Runtime', name: 'svc.config', kind: 'string', default: './application.yaml',
    description: 'Path of the optional YAML configuration file (read from the environment only).' }),
  p({ group: 'Runtime', name: 'svc.data-dir', kind: 'string', default: './.svc',
    description: 'Where the embedded PostgreSQL keeps its data and the hub its local state.' }),
  p({ group: 'Runtime', name: 'svc.embedded.port', kind: 'int', min: 0, max: 65535, default: 0,
    description: 'Port of the embedded PostgreSQL on 127.0.0.1 (no `svc.datasource.url`); 0: a free one, chosen at each start.' }),
  p({ group: 'Runtime', name: 'svc.log.level', kind: 'enum', values: LOG_LEVELS, default: 'info',
    description: 'Minimum log level.' }),

  // HTTP
  p({ group: 'HTTP', name: 'svc.http.port', kind: 'int', min: 0, max: 65535, default: 8080, aliases: ['PORT'],
    description: 'Port of the HTTP API (0 picks a free port).' }),
  p({ group: 'HTTP', name: 'svc.http.host', kind: 'string',
    default: (get) => (get('svc.security.dev-bypass') ? '127.0.0.1' : '0.0.0.0'),
    defaultText: '`127.0.0.1` with the dev bypass on, else `0.0.0.0`',
    description: 'Interface the HTTP API listens on. With the dev bypass on only a loopback address is accepted.' }),
  p({ group: 'HTTP', name: 'svc.http.shutdown-grace', kind: 'duration', default: '10s',
    description: 'How long a stopping process waits for in-flight requests before closing them.' }),
  p({ group: 'HTTP', name: 'svc.http.body-limit', kind: 'size', default: '10mb',
    description: 'Largest accepted request body: a positive size in bytes, `kb`, `mb` or `gb` (`512kb`, `10mb`); a larger body answers 413. A JSON or YAML body is held to 1 MiB below it; only the CSV ingest reads bodies up to this limit.' }),
  p({ group: 'HTTP', name: 'svc.http.yaml-read-timeout', kind: 'duration', default: '10s',
    description: 'How long the hub reads one YAML text (a manifest body sent as YAML, an OpenAPI document to draft from) before it gives up with a 413 whose hint is to send JSON. YAML is read on a thread of its own, one text at a time, tenants taking turns, two texts of a tenant at once (a third is a 429 with this time as `Retry-After`), so reading never holds the API; the limit bounds how long one text holds the reader from other tenants\' texts. A manifest of a few kilobytes takes milliseconds; 1 MiB (the most the hub reads) takes one to a few seconds, texts built to be slow longer.' }),

  // Database
  p({ group: 'Database', name: 'svc.datasource.url', kind: 'url', schemes: ['postgres', 'postgresql'], aliases: ['DATABASE_URL'],
    description: 'External PostgreSQL (`postgres://owner:password@host:5432/db`), connected as the owner that runs migrations. Unset: an embedded PostgreSQL under `svc.data-dir`.' }),
  p({ group: 'Database', name: 'svc.datasource.app-url', kind: 'url', schemes: ['postgres', 'postgresql'],
    description: 'Connection for the application role (subject to row-level security). Unset: the hub creates role `svc.datasource.app-role` with a password derived from the owner credentials, whose password must then be in `svc.datasource.url` (in its user part or as `?password=`): a URL without one (the password from PGPASSWORD or a password file) is refused at start, as the roles\' passwords would follow from the user, host and port alone.' }),
  p({ group: 'Database', name: 'svc.datasource.worker-url', kind: 'url', schemes: ['postgres', 'postgresql'],
    description:
      'Connection for the cross-tenant worker role. Unset: derived like `svc.datasource.app-url`. A role of an administrator\'s needs `plan_cache_mode = force_custom_plan` set on it (docs/operations.md, "Starting and stopping"; the hub warns at start without it).' }),
  p({ group: 'Database', name: 'svc.datasource.app-role', kind: 'string', default: 'svc_app',
    description: 'Name of the application database role (no BYPASSRLS, not an owner).' }),
  p({ group: 'Database', name: 'svc.datasource.worker-role', kind: 'string', default: 'svc_worker',
    description: 'Name of the cross-tenant worker role (BYPASSRLS, used only by background work that must see every tenant).' }),
  p({ group: 'Database', name: 'svc.datasource.analytic-role', kind: 'string', default: 'svc_analytic',
    description: 'Name of the role the analytic chat\'s model-written SQL runs as (NOLOGIN, taken by the application role with `SET LOCAL ROLE`; it may read the tenants\' ext tables only). The hub creates it with the other roles; where an administrator makes the roles (`svc.datasource.app-url` and `worker-url` set), create it too (docs/operations.md, "Starting and stopping").' }),
  p({ group: 'Database', name: 'svc.health.database-timeout', kind: 'duration', default: '2s',
    description: 'How long readiness (`/q/health/ready`) waits for the database to answer each of its reads (`select 1`, then the migration history): no answer in time is a 503 naming the wait, so a database that accepts connections but does not answer (a hung server, a network path lost without a reset) takes the hub out of service instead of holding the probe.' }),
  p({ group: 'Database', name: 'svc.datasource.pool-size', kind: 'int', min: 3, max: 1000, default: 10,
    description: 'Connections per pool (application and worker pools each); at least 3: a streaming export run holds one, and the rest of the hub needs 2 beside it (`svc.export.concurrency`). Work that holds a connection for long (the chunk transactions of all connector runs of a process, each run writing up to three chunks at once; export streams; analytic queries) takes at most this many less 2 at once together (one at least), so the API keeps two; further work waits, tenants taking turns.' }),
  p({ group: 'Database', name: 'svc.datasource.connect-timeout', kind: 'duration', default: '10s',
    description: 'How long a unit of work (a request\'s transaction, a background step) waits for a database connection: a free one of its pool, or a new one to open. None in time fails the unit as the database being unavailable (the API answers 503, background work tries again), so a database that does not answer, or a pool whose connections all wait on it, fails further requests instead of holding them without end. Nothing of the unit was sent yet: no outcome is left unknown.' }),
  p({ group: 'Database', name: 'svc.migrate.on-start', kind: 'bool', default: true,
    description: 'Apply pending migrations when a hub process starts (under an advisory lock).' }),

  // Security
  p({ group: 'Security', name: 'svc.oidc.issuer', kind: 'url',
    description: 'Issuer (`iss`) that tokens must carry. Required unless the dev bypass is on.' }),
  p({ group: 'Security', name: 'svc.oidc.jwks-uri', kind: 'url',
    defaultText: "the `jwks_uri` of the issuer's `/.well-known/openid-configuration`",
    description: 'Where the signing keys are fetched (RS256 and ES256 are accepted).' }),
  p({ group: 'Security', name: 'svc.oidc.audience', kind: 'string',
    description: 'When set, tokens must name it in `aud`. Unset, any token the issuer signs is taken (those it issues to other clients too): a prod hub warns at start.' }),
  p({ group: 'Security', name: 'svc.oidc.max-token-lifetime', kind: 'duration', default: '24h',
    description: 'How far ahead a token\'s `exp` may be: a token still valid for longer (a year, or 9999) is refused (401) as one without `exp` is. Raise it for an issuer that hands out longer-lived access tokens.' }),
  p({ group: 'Security', name: 'svc.oidc.tenant-claim', kind: 'string', default: 'tenant_id',
    description: 'Claim that carries the numeric tenant id.' }),
  p({ group: 'Security', name: 'svc.security.dev-bypass', kind: 'bool',
    default: (get) => get('svc.profile') === 'dev' && !get('svc.oidc.issuer'),
    defaultText: 'true in the `dev` profile when `svc.oidc.issuer` is unset, else false',
    description: 'Development only: no token; tenant, user and impersonation come from the headers `X-Tenant-ID`, `X-User-ID`, `X-Impersonate-Tenant`, and every role is active. Refused in the `prod` profile.' }),
  p({ group: 'Security', name: 'svc.secret.master-key', kind: 'secret',
    description: 'Key that encrypts stored secrets (32 bytes as base64 or 64 hex characters). Required in the `prod` profile; in `dev` one is generated once into the data directory.' }),
  p({ group: 'Security', name: 'svc.secret.previous-master-keys', kind: 'secret',
    description: 'Earlier master keys during a rotation, comma-separated, each written as `svc.secret.master-key` is: a stored value that the master key does not open is tried with each of them in order. `svc-hub secrets rekey` re-seals such values under the master key, after which they can be removed (docs/secrets-and-hooks.md, Rotating the master key).' }),
  p({ group: 'Security', name: 'svc.secret.cache-ttl', kind: 'duration', default: '30s',
    description: 'How long a resolved secret value stays in memory; a rotation or delete clears it at once in the process that made it, other processes follow within this time.' }),

  p({ group: 'Security', name: 'svc.egress.deny-private', kind: 'bool',
    default: (get) => get('svc.webhook.deny-private-targets') ?? get('svc.profile') === 'prod',
    defaultText: 'true in the `prod` profile, false in `dev` (or the value of the deprecated `svc.webhook.deny-private-targets`)',
    description: 'The outbound address policy (docs/security.md): every request the hub makes for a tenant (webhook deliveries and tests, connector runs, pre-flight, draft, scaffold) is refused, before any packet is sent, when it would connect to a loopback, private, shared (CGNAT), link-local, unique-local, unspecified, multicast or reserved address, an IPv4-mapped or translated IPv6 address, a cloud metadata address, or the names `localhost`, `*.localhost` and `metadata.google.internal`. Checked when connecting, after name resolution.' }),
  p({ group: 'Security', name: 'svc.egress.allow', kind: 'string',
    description: 'Comma-separated destinations the outbound address policy lets through although they are not public: CIDRs (`10.20.0.0/16`, `fd12:3456::/32`), single addresses (`127.0.0.2`) and host names (`hooks.internal`, `*.corp.example` for a domain; a listed name is connected to whatever it resolves to).' }),
  p({ group: 'Security', name: 'svc.webhook.deny-private-targets', kind: 'bool',
    description: 'Deprecated: use `svc.egress.deny-private`. When set, it gives `svc.egress.deny-private` its default.' }),
  p({ group: 'Security', name: 'svc.credentials.env-allow', kind: 'string',
    description: "Comma-separated globs (`*` any run of characters, `?` one) of names that a connector's `*_env` credential, header `value_env` or `{{env:NAME}}` may read from the hub's environment, then from a non-property key of the configuration file, when the tenant has no stored secret of that name. Default: none (stored secrets only). `SVC_*`, `DATABASE_URL` and every name the hub itself reads are never readable, listed or not." }),

  // Observability
  p({ group: 'Observability', name: 'svc.tracing.enabled', kind: 'bool',
    default: (get) => get('otel.sdk.disabled') === false,
    defaultText: 'false (true when `OTEL_SDK_DISABLED=false`)',
    description: 'Export OpenTelemetry traces of requests and database calls over OTLP/gRPC.' }),
  p({ group: 'Observability', name: 'otel.sdk.disabled', kind: 'bool', default: true,
    description: 'The OpenTelemetry SDK switch; `false` turns tracing on.' }),
  p({ group: 'Observability', name: 'svc.tracing.endpoint', kind: 'url', default: 'http://localhost:4317', aliases: ['OTEL_EXPORTER_ENDPOINT', 'OTEL_EXPORTER_OTLP_ENDPOINT'],
    description: 'OTLP/gRPC collector that receives the traces.' }),
  p({ group: 'Observability', name: 'svc.tracing.service-name', kind: 'string', default: 'svc-hub', aliases: ['OTEL_SERVICE_NAME'],
    description: 'The `service.name` resource attribute of exported spans.' }),

  // Clocks and limits (spec 1 Limits and Clocks; used by the areas that own them)
  p({ group: 'Clocks', name: 'svc.scheduler.enabled', kind: 'bool', default: true,
    description: 'Run the in-process schedulers (off in Kubernetes, where CronJobs fire runs).' }),
  p({ group: 'Clocks', name: 'svc.scheduler.tick', kind: 'duration', default: '1m', description: 'Connector and export scheduler tick.' }),
  p({ group: 'Clocks', name: 'svc.webhook.sweep-every', kind: 'duration', default: '5s', description: 'Webhook consumer sweep of the outbox (NOTIFY wakes it sooner).' }),
  p({ group: 'Clocks', name: 'svc.webhook.retry-every', kind: 'duration', default: '30s', description: 'Webhook retry sweep; a sweep whose claim came back full claims again as the endpoints answer, waiting this long at most; a delivery is attempted again no sooner than half of this after its previous attempt ended (docs/integrations.md).' }),
  p({ group: 'Clocks', name: 'svc.webhook.lease', kind: 'duration', default: '60s', description: 'Lease on a claimed delivery row; an attempt that may outlast half of it (`svc.webhook.connect-timeout` + `svc.webhook.timeout`) renews it every half lease while it waits for the answer (docs/integrations.md).' }),
  p({ group: 'Clocks', name: 'svc.webhook.max-attempts', kind: 'int', min: 1, default: 3, description: 'Attempts per delivery, the first included; a delivery that failed them all is closed by the next retry sweep (`closedReason` `retries exhausted: …`, docs/integrations.md).' }),
  p({ group: 'Clocks', name: 'svc.webhook.journal-retention-days', kind: 'int', min: 0, max: 36500, default: 90,
    description: 'Delivery journal retention: a daily purge at 04:40 UTC, by the background roles\' leader, deletes the deliveries made more than this many days ago that are over (succeeded, closed, or an attempted test), with their attempt logs; a delivery still waiting for a retry stays. A purged delivery can no longer be listed or replayed. 0 keeps the journal for ever (docs/integrations.md).' }),
  p({ group: 'Clocks', name: 'svc.webhook.connect-timeout', kind: 'duration', default: '5s', description: 'Connect timeout of one delivery attempt.' }),
  p({ group: 'Clocks', name: 'svc.webhook.timeout', kind: 'duration', default: '10s', description: 'Exchange timeout of one delivery attempt.' }),
  p({ group: 'Clocks', name: 'svc.webhook.concurrency', kind: 'int', min: 1, default: 64,
    description: 'Delivery attempts in flight at once in one process (docs/integrations.md).' }),
  p({ group: 'Clocks', name: 'svc.webhook.concurrency-per-integration', kind: 'int', min: 1, default: 8,
    description: 'Delivery attempts in flight at once for one integration, so an endpoint that is slow or down never holds the whole pool.' }),
  p({ group: 'Clocks', name: 'svc.webhook.concurrency-per-tenant', kind: 'int', min: 1, default: 16,
    description: 'Delivery attempts in flight at once in one process for one tenant, all its integrations together, so one tenant\'s endpoints that are slow or down never hold the whole pool and other tenants\' deliveries go first; a tenant at its cap waits (its attempts stay queued, no attempt counted), and a retry sweep claims at most twice this many of its rows. A value above `svc.webhook.concurrency` means no cap beyond the pool (docs/integrations.md).' }),
  p({ group: 'Clocks', name: 'svc.leader.check-every', kind: 'duration', default: '5s',
    description: 'Leader election of the dispatchers and the operator: how often a follower tries to take over and the leader confirms it still leads; with the Kubernetes backend also the Lease renew period. Must be well under `svc.leader.lease-duration`: the leader gives up when it has not renewed for the lease duration minus this period (the renew deadline), which must exceed 1.2 periods (client-go\'s rule), so with the Kubernetes backend a period not under the duration divided by 2.2 (6.8 s of the default 15 s) is refused at start (with PostgreSQL, a period not under the duration).' }),
  p({ group: 'Clocks', name: 'svc.leader.backend', kind: 'enum', values: ['auto', 'postgres', 'kubernetes'], default: 'auto',
    description: 'What leader election runs on: `postgres` (a session advisory lock), `kubernetes` (a `coordination.k8s.io/v1` Lease named `svc.leader.lease-name` in the namespace `POD_NAMESPACE`, held as `POD_NAME`), or `auto`: `kubernetes` when `KUBERNETES_SERVICE_HOST` and `POD_NAMESPACE` are set, else `postgres`.' }),
  p({ group: 'Clocks', name: 'svc.leader.lease-duration', kind: 'duration', default: '15s',
    description: 'Kubernetes backend: the Lease `leaseDurationSeconds` (whole seconds, rounded up): how long after its last renewal the leader\'s Lease can be taken over when it stops renewing (a released Lease is taken over at once).' }),
  p({ group: 'Clocks', name: 'svc.leader.lease-name', kind: 'string', default: 'svc-hub-dispatch',
    description: 'Kubernetes backend: the name of the dispatchers\' Lease, in `POD_NAMESPACE` (the Helm chart sets `<release>-svc-hub-dispatch`, so two releases in one namespace never share one); the operator elects through a Lease of its own.' }),
  p({ group: 'Clocks', name: 'svc.email.sweep-every', kind: 'duration', default: '5s', description: 'E-mail rule consumer sweep of the outbox (NOTIFY wakes it sooner); runs in the background roles.' }),
  p({ group: 'Clocks', name: 'svc.process.sweep-every', kind: 'duration', default: '5s', description: 'Process consumer sweep of the outbox (NOTIFY wakes it sooner); runs in the background roles, docs/processes.md.' }),
  p({ group: 'Clocks', name: 'svc.process.inbox-retention-days', kind: 'int', min: 0, max: 36500, default: 90,
    description: 'Decision inbox retention: a daily purge at 05:05 UTC, by the background roles\' leader, deletes the items acknowledged more than this many days ago; an item no one has acknowledged stays whatever its age. 0 keeps the inbox for ever (docs/processes.md).' }),
  p({ group: 'Clocks', name: 'svc.audit.dispatch-every', kind: 'duration', default: '2s', description: 'Retry of audit entries a call could not write itself (the database unreachable when it ended); entries are otherwise written with the call.' }),
  p({ group: 'Clocks', name: 'svc.audit.retention-days', kind: 'int', min: 0, max: 36500, default: 365, description: 'Audit retention (daily purge at 04:45 UTC, by the background roles\' leader); 0 disables the purge.' }),
  p({ group: 'Clocks', name: 'svc.events.retention-days', kind: 'int', min: 1, max: 36500, default: 30, description: 'Outbox retention (daily purge at 04:30 UTC, by the background roles\' leader), never past the slowest consumer.' }),
  p({ group: 'Clocks', name: 'svc.events.stream.poll-every', kind: 'duration', default: '1s', description: 'Live event stream poll.' }),
  p({ group: 'Clocks', name: 'svc.events.stream.batch', kind: 'int', min: 1, default: 500, description: 'Rows read per live-stream poll.' }),
  p({ group: 'Clocks', name: 'svc.events.stream.heartbeat', kind: 'duration', default: '15s', description: 'Interval of the comment lines that keep an idle event stream open through proxies.' }),
  p({ group: 'Clocks', name: 'svc.events.stream.max-per-tenant', kind: 'int', min: 1, default: 100,
    description: 'Event streams one tenant may hold open at once in one hub process (each holds a socket and a place in the fan-out); one more answers 429 with `Retry-After: 5`. A stream counts until its connection is done: one the hub ended counts while what was left for its client is still being sent (at most one heartbeat period, then its connection is reset).' }),
  p({ group: 'Clocks', name: 'svc.events.stream.max-buffer', kind: 'int', min: 1024, default: 1048576,
    description: 'Bytes of earlier polls a live event-stream client may still have unread when a poll starts delivering to it; more, and the hub closes its stream (it reconnects with Last-Event-ID and loses nothing). One poll\'s burst never ends a client, so the hub holds at most this much plus one poll\'s frames for it; a resume catching up waits for its client instead, holding at most this much.' }),
  p({ group: 'Clocks', name: 'svc.workflow.sweep.every', kind: 'duration', default: '15m', description: 'Workflow dormancy sweep (docs/workflows.md); runs in the background roles, on the leader.' }),
  p({ group: 'Clocks', name: 'svc.workflow.sweep.batch', kind: 'int', min: 1, default: 10000,
    description: 'Records of a workflow\'s entity the dormancy sweep fetches at a time from its one cursor over the entity (in key order); it writes them (spells, decisions) 1,000 at most per transaction.' }),
  p({ group: 'Clocks', name: 'svc.hooks.sweep-every', kind: 'duration', default: '5s', description: 'Hook consumer sweep of the outbox (NOTIFY wakes it sooner); runs in the background roles.' }),
  p({ group: 'Clocks', name: 'svc.hooks.cache-ttl', kind: 'duration', default: '60s', description: 'Time to live of the per-tenant hook override cache.' }),

  // Outgoing mail for e-mail rules (docs/email.md). Without svc.mail.host nothing is sent: each message is logged as mocked.
  p({ group: 'Mail', name: 'svc.mail.host', kind: 'string',
    description: 'SMTP server that e-mail rules send through. Unset: messages are not sent, each one is logged as `mocked`.' }),
  p({ group: 'Mail', name: 'svc.mail.port', kind: 'int', min: 1, max: 65535,
    default: (get) => (get('svc.mail.secure') ? 465 : 587), defaultText: '465 when `svc.mail.secure`, else 587',
    description: 'SMTP port.' }),
  p({ group: 'Mail', name: 'svc.mail.secure', kind: 'bool', default: false,
    description: 'TLS from the first byte (SMTPS, usually port 465).' }),
  p({ group: 'Mail', name: 'svc.mail.starttls', kind: 'bool', default: false,
    description: 'Require STARTTLS: refuse to send over a connection the server does not upgrade. When false, STARTTLS is still used whenever the server offers it, and required all the same when `svc.mail.username` is set and `svc.mail.host` is not this machine (`localhost`, 127.0.0.0/8, ::1): credentials never cross a network in clear.' }),
  p({ group: 'Mail', name: 'svc.mail.username', kind: 'string',
    description: 'SMTP AUTH user. Unset: no authentication. Set, the credentials are sent only over TLS (`svc.mail.secure` or STARTTLS, which is then required) unless `svc.mail.host` is this machine.' }),
  p({ group: 'Mail', name: 'svc.mail.password', kind: 'secret',
    description: 'SMTP AUTH password (never logged).' }),
  p({ group: 'Mail', name: 'svc.mail.from', kind: 'string', default: 'svc-hub@localhost',
    description: 'Sender address of rule messages (`ops@example.com` or `Hub <ops@example.com>`).' }),
  p({ group: 'Mail', name: 'svc.mail.tls-ca', kind: 'string',
    description: 'PEM file of the certificate authorities to trust for the SMTP server, besides the system ones (a private or self-signed server certificate).' }),
  p({ group: 'Mail', name: 'svc.mail.recipients-per-minute', kind: 'int', min: 10, default: 300,
    description: 'Recipients one tenant\'s e-mail rules may send to per minute, in all (a message to three addresses counts three; a burst up to the whole budget is allowed; a message goes while any of the budget is left, the budget then owing the rest). A message sent with none left is not sent: it is logged as `throttled` and skipped, as a failed send is. At least 10, the most recipients of one rule.' }),
  p({ group: 'Mail', name: 'svc.mail.timeout', kind: 'duration', default: '10s',
    description: 'Connect, greeting and idle-socket timeout of one send, and the whole send at most three times it (a server that keeps a reply going is cut off then); a send that runs out is logged as failed and counts as the server not answering: its message waits (`svc.mail.backoff`).' }),
  p({ group: 'Mail', name: 'svc.mail.backoff', kind: 'duration', default: '30s',
    description: 'How long e-mail rules wait, once a send found the SMTP server not answering (connection refused or lost, `svc.mail.timeout` run out, `421`), before checking it again (a connection, its greeting, EHLO, MAIL FROM, RCPT TO the sender\'s own address and RSET, no message; a 4xx to MAIL FROM counts as not answering), and again after each check it fails. The message that met it and the later events wait meanwhile, unsent and in order, and go out once a check finds the server answering, instead of each paying the timeout; none is skipped for it but a message the server hangs on right after two checks passed while it takes the next one (docs/email.md).' }),

  // Connectors (spec 3 Limits)
  p({ group: 'Connectors', name: 'svc.connectors.chunk-size', kind: 'int', min: 1, default: 1000, description: 'Rows written per transactional chunk of a connector run.' }),
  p({ group: 'Connectors', name: 'svc.connectors.max-dead-letters-per-run', kind: 'int', min: 1, default: 10000,
    description: 'Dead letters one connector run may leave; past it the run fails (DeadLetterCapError, docs/connector-runs.md) instead of filling the table with a source or a manifest gone wrong.' }),
  p({ group: 'Connectors', name: 'svc.connectors.max-pages', kind: 'int', min: 1, default: 10000, description: 'Page budget of one endpoint run; reaching it ends the run Partial, and the endpoint\'s next run reads on from where it stopped.' }),
  p({ group: 'Connectors', name: 'svc.connectors.retry.base-delay', kind: 'duration', default: '1s', description: 'First retry delay of a source request (doubling, 10 % jitter, 5 attempts; a Retry-After in seconds or as an HTTP-date wins, up to `svc.connectors.retry.max-delay`).' }),
  p({ group: 'Connectors', name: 'svc.connectors.retry.max-delay', kind: 'duration', default: '60s', description: 'Cap of the retry delay of a source request, a Retry-After in seconds or as an HTTP-date included (a source asking for longer is retried after this cap).' }),
  p({ group: 'Connectors', name: 'svc.connectors.http.headers-timeout', kind: 'duration', default: '60s',
    description: 'How long a source may take to answer a request with its status and headers (after the connection, whose timeout is 10 s). Running out is a network error: retried per the retry policy, then `upstream could not be reached after 5 attempt(s): timeout: no response`; a pre-flight (one attempt) names it at once.' }),
  p({ group: 'Connectors', name: 'svc.connectors.http.body-timeout', kind: 'duration', default: '60s',
    description: 'The longest a source may go silent in the middle of a body (between two chunks, not the whole body). Running out is a network error: retried per the retry policy, then `upstream could not be reached after 5 attempt(s): timeout: the response body stalled`.' }),
  p({ group: 'Connectors', name: 'svc.connectors.http.response-timeout', kind: 'duration', default: '10m',
    description: 'The longest one request to a source may take as a whole, from sending it to the last byte of its answer, however steadily the bytes come (a body trickling in a byte at a time never goes silent for `svc.connectors.http.body-timeout`). Running out is a network error: retried per the retry policy, then `upstream could not be reached after 5 attempt(s): timeout: the answer took longer than <n> ms as a whole (svc.connectors.http.response-timeout)`.' }),
  p({ group: 'Connectors', name: 'svc.connectors.preflight.max-token-wait', kind: 'duration', default: '10s',
    description: 'The longest a pre-flight or an endpoint draft (requests a client waits on) waits for a token of the connector\'s `default_rate_limit`. When the bucket would take longer to give one, nothing is sent: the pre-flight reports the endpoint `not checked` with the seconds until its next request is allowed, a draft answers 429 with `Retry-After`. A client that disconnects ends the wait at once.' }),
  p({ group: 'Connectors', name: 'svc.connectors.heartbeat-every', kind: 'duration', default: '10s',
    description: 'How often a process marks the connector runs it is running as alive (also while a run waits for a page or for an earlier endpoint); also when a cancel served by another process reaches its runs.' }),
  p({ group: 'Connectors', name: 'svc.connectors.run-stale-after', kind: 'duration', default: '45s',
    description: 'A Running run without a heartbeat for this long belongs to a process that died: the interrupted-run sweep fails it (`interrupted: the hub stopped during the run`, event `connector.run.failed`, retryable). Must exceed `svc.connectors.heartbeat-every`.' }),
  p({ group: 'Connectors', name: 'svc.connectors.interrupted-sweep-every', kind: 'duration', default: '15s',
    description: 'Cadence of the interrupted-run sweep (in `all` and `dispatch`, leader only): with the defaults a dead run is failed within a minute.' }),
  p({ group: 'Connectors', name: 'svc.connectors.run-retention-days', kind: 'int', min: 0, max: 36500, default: 90,
    description: 'Run ledger retention: a daily purge at 04:55 UTC, by the background roles\' leader, deletes the runs that ended more than this many days ago, except each connector\'s latest run and latest Completed run and any run a dead-letter entry still names; a Running run stays. A purged run can no longer be listed or read. 0 keeps every run (docs/connector-runs.md).' }),
  p({ group: 'Connectors', name: 'svc.connectors.dead-letter-retention-days', kind: 'int', min: 0, max: 36500, default: 90,
    description: 'Dead-letter retention: a daily purge at 04:50 UTC, by the background roles\' leader, deletes the entries replayed, discarded or erased more than this many days ago; a pending entry stays whatever its age. 0 keeps every entry (docs/connector-runs.md).' }),

  // Exports
  p({ group: 'Exports', name: 'svc.export.snapshot.timeout-seconds', kind: 'int', min: 1, max: 2_073_600, default: 1800,
    description: 'Time limit of one export run\'s snapshot generation and upload: a run still producing its file after this many seconds fails with `generation` and publishes nothing.' }),
  p({ group: 'Exports', name: 'svc.export.concurrency', kind: 'int', min: 1,
    ...POOL_SHARE,
    description: 'Export runs streaming at once in one process; each holds a database connection of the pool (`svc.datasource.pool-size`, of which it must leave at least 2 to the rest of the hub) for its snapshot and upload. Further runs wait, `Running` with no rows yet, tenants taking turns; a run\'s time limit starts when it starts streaming.' }),
  p({ group: 'Exports', name: 'svc.export.concurrency-per-tenant', kind: 'int', min: 1, default: 2,
    description: 'Of `svc.export.concurrency`, the runs of one tenant streaming at once: a tenant whose destination hangs holds at most this many slots.' }),
  p({ group: 'Exports', name: 'svc.export.heartbeat-every', kind: 'duration', default: '5s',
    description: 'How often a running export records its rows and bytes so far (what `svc exports runs` shows while it runs) and proves its process alive.' }),
  p({ group: 'Exports', name: 'svc.export.run-stale-after', kind: 'duration', default: '30s',
    description: 'A Running export run without a heartbeat for this long belongs to a process that died: the interrupted-run sweep fails it with `interrupted`. Must exceed `svc.export.heartbeat-every`.' }),
  p({ group: 'Exports', name: 'svc.export.interrupted-sweep-every', kind: 'duration', default: '15s',
    description: 'Cadence of the interrupted export-run sweep (in `all` and `dispatch`, leader only; also once at start): with the defaults a dead run is failed within a minute.' }),
  p({ group: 'Exports', name: 'svc.export.run-retention-days', kind: 'int', min: 0, max: 36500, default: 90,
    description: 'Export run retention: a daily purge at 05:00 UTC, by the background roles\' leader, deletes the runs that ended more than this many days ago, except each export\'s latest run and the runs of its latest scheduled slot; a Running run stays. A purged run can no longer be listed, read or retried. 0 keeps every run (docs/exports.md).' }),

  // Inbound rate limits (spec 1 Inbound rate limits)
  p({ group: 'Rate limits', name: 'svc.ratelimit.default.rpm', kind: 'int', min: 0,
    default: (get) => (get('svc.profile') === 'dev' ? 0 : 60), defaultText: '60 (0 in `dev`)',
    description: 'Requests per minute per tenant for the chat and search buckets that set none; 0 disables.' }),
  p({ group: 'Rate limits', name: 'svc.ratelimit.view-generate.rpm', kind: 'int', min: 0,
    default: (get) => (get('svc.profile') === 'dev' ? 0 : 10), defaultText: '10 (0 in `dev`)',
    description: 'POST /api/views/generate per tenant per minute; 0 disables. This version has no such operation yet (docs/rate-limits.md): the setting is read and limits nothing.' }),
  p({ group: 'Rate limits', name: 'svc.ratelimit.platform-chat.rpm', kind: 'int', min: 0,
    default: (get) => get('svc.ratelimit.default.rpm'), defaultText: '`svc.ratelimit.default.rpm`',
    description: 'POST /api/platform/rag/chat per tenant per minute; 0 disables.' }),
  p({ group: 'Rate limits', name: 'svc.ratelimit.user-chat.rpm', kind: 'int', min: 0,
    default: (get) => get('svc.ratelimit.default.rpm'), defaultText: '`svc.ratelimit.default.rpm`',
    description: 'POST /api/rag/chat per tenant per minute; 0 disables.' }),
  p({ group: 'Rate limits', name: 'svc.ratelimit.platform-search.rpm', kind: 'int', min: 0,
    default: (get) => get('svc.ratelimit.default.rpm'), defaultText: '`svc.ratelimit.default.rpm`',
    description: 'POST /api/platform/rag/search per tenant per minute; 0 disables.' }),
  // Operator (svc-hub operator, Kubernetes only)
  p({ group: 'Operator', name: 'svc.operator.namespace', kind: 'string',
    description: 'The namespaces whose custom resources the operator watches, comma-separated (`team-a,team-b`: one watch per kind and namespace, so namespaced Roles suffice; the Helm chart joins `operator.watchNamespaces`); unset watches every namespace (the chart\'s ClusterRole allows it).' }),
  p({ group: 'Operator', name: 'svc.operator.instance', kind: 'string',
    description: 'This operator\'s instance: set, it reconciles only resources labelled `svc.io/operator-instance=<value>`; unset, only resources without that label. Two releases watching the same namespaces thus never reconcile the same resource. A label value: at most 63 letters, digits, `-`, `_`, `.`.' }),
  p({ group: 'Operator', name: 'svc.operator.cronjob-namespace', kind: 'string', aliases: ['POD_NAMESPACE'],
    description: 'Where the CronJobs of schedules go: the release\'s namespace (where the database URL and master key Secrets are), by default the operator\'s own (`POD_NAMESPACE`, which the Helm chart sets); outside a pod the current kubeconfig context\'s namespace, else `default`.' }),
  p({ group: 'Operator', name: 'svc.operator.resync-every', kind: 'duration', default: '10h',
    description: 'Every resource is reconciled again this often (repairs drift such as a connector deleted over HTTP, refreshes `status.lastRun` should a run poll miss one) and CronJobs whose resource no longer exists are deleted. Watch events drive everything else, so this is hours, as with controller-runtime.' }),
  p({ group: 'Operator', name: 'svc.operator.run-poll-every', kind: 'duration', default: '5s',
    description: 'How often the operator looks for runs that started or ended, to refresh their resources\' `status.lastRun` without waiting for the resync.' }),
  p({ group: 'Operator', name: 'svc.operator.backoff-base', kind: 'duration', default: '1s',
    description: 'First retry delay of a reconcile that failed for a passing reason (API or database unavailable, a resourceVersion conflict); doubles per failure.' }),
  p({ group: 'Operator', name: 'svc.operator.backoff-max', kind: 'duration', default: '5m', description: 'Longest retry delay of a failing reconcile.' }),
  p({ group: 'Operator', name: 'svc.operator.rate-limit.qps', kind: 'int', min: 0, default: 10,
    description: 'Retries of failed reconciles per second across all resources once `svc.operator.rate-limit.burst` is spent (a retry waits for the longer of its own backoff and this token bucket, client-go\'s default controller rate limiter); 0 disables the overall limit.' }),
  p({ group: 'Operator', name: 'svc.operator.rate-limit.burst', kind: 'int', min: 1, default: 100,
    description: 'Retries of failed reconciles taken at once before `svc.operator.rate-limit.qps` applies.' }),
  p({ group: 'Operator', name: 'svc.operator.list-page-size', kind: 'int', min: 1, default: 500,
    description: 'Items the operator asks for per list request (its informers\' lists, the orphan sweep, the finalizer\'s CronJob lookup): every list is read in pages of this size, following the API server\'s `continue` token, as client-go\'s informers do (500). A token that expired (410 Expired) starts the list again from its first page, at most 3 times in a row.' }),
  p({ group: 'Operator', name: 'svc.operator.run-job-template', kind: 'string', default: '/etc/svc-hub/run-job/pod-template.yaml',
    description: 'Pod template (YAML) of the scheduled runs the operator\'s CronJobs start; the Helm chart mounts it from a ConfigMap. Missing: resources with a schedule report `Scheduled=False` and `Ready=False`, reason `NoRunTemplate` (applied, but nothing would run them).' }),
  p({ group: 'Operator', name: 'svc.operator.run-deadline', kind: 'duration', default: '6h',
    description: 'The longest a scheduled run may take: the Job of every CronJob the operator writes has `activeDeadlineSeconds` of this (in whole seconds, rounded up), after which Kubernetes stops the run and its Job fails (`DeadlineExceeded`). The CronJobs have `concurrencyPolicy: Forbid`, so a run that hangs would otherwise keep every later slot from starting. Changing it rewrites every CronJob at its resource\'s next reconcile (the operator\'s start, a change, the resync).' }),
  p({ group: 'Operator', name: 'svc.operator.run-job-configmap', kind: 'string',
    description: 'The ConfigMap, in `svc.operator.cronjob-namespace`, that holds the run pod template (the Helm chart sets `<release>-svc-hub-run-job`): every CronJob the operator writes names it as its owner (`metadata.ownerReferences`), so deleting it (`helm uninstall`, `operator.enabled=false`) has Kubernetes delete the CronJobs, which would otherwise keep starting runs with no operator left. Unset: CronJobs have no owner.' }),
  // Retrieval (docs/retrieval.md)
  p({ group: 'Retrieval', name: 'svc.embedding.provider', kind: 'enum', values: ['local', 'openai', 'none'], default: 'local',
    description: '`local`: the offline Universal Sentence Encoder lite model shipped with the hub (512 dimensions); `openai`: an OpenAI-compatible embeddings endpoint (`svc.embedding.base-url`); `none`: no embedding port (search and semantic chat answer 503).' }),
  p({ group: 'Retrieval', name: 'svc.embedding.base-url', kind: 'url',
    description: 'Base URL of the OpenAI-compatible embeddings endpoint (e.g. `https://api.openai.com/v1`), with `svc.embedding.provider=openai`. Reached through the outbound address policy.' }),
  p({ group: 'Retrieval', name: 'svc.embedding.model', kind: 'string', default: 'text-embedding-3-small',
    description: 'Embedding model asked of the OpenAI-compatible endpoint.' }),
  p({ group: 'Retrieval', name: 'svc.embedding.dimensions', kind: 'int', min: 1, default: 512,
    description: 'Vector size asked of the OpenAI-compatible endpoint (sent as `dimensions`); an answer of another size is refused.' }),
  p({ group: 'Retrieval', name: 'svc.embedding.api-key', kind: 'secret',
    description: 'Key of the OpenAI-compatible embeddings endpoint (sent as a bearer token; never logged).' }),
  p({ group: 'Retrieval', name: 'svc.embedding.local-threads', kind: 'int', min: 1, max: 64, default: 1,
    description: 'Worker threads of the `local` model, each with its own copy of it (≈ 130 MB of memory each, measured): the indexer\'s batches are shared among them, so rows become searchable up to that many times faster, on as many cores.' }),
  p({ group: 'Retrieval', name: 'svc.embedding.batch', kind: 'int', min: 1, default: 64,
    description: 'Chunks embedded per model call.' }),
  p({ group: 'Retrieval', name: 'svc.retrieval.index-rows', kind: 'bool', default: true,
    description: 'Hand the rows ingestion writes to the retrieval indexer (one pending entry per written batch, in the ingestion transaction). `false`: no row written becomes searchable (measurements, hubs without retrieval); a row rewritten with other content whose earlier version has a chunk (made while this was `true`) loses that chunk (or the chunk is made again naming another row of its connector holding that content), so search never cites a row version that is gone. Rows written meanwhile get chunks when a run writes them again with this `true`.' }),
  p({ group: 'Retrieval', name: 'svc.retrieval.index-every', kind: 'duration', default: '1s',
    description: 'Cadence of the indexer (in `all` and `dispatch`): turns written rows into chunks and embeds the chunks that have no vector yet.' }),
  p({ group: 'Retrieval', name: 'svc.retrieval.embed-claim', kind: 'duration', default: '5m',
    description: 'How long an indexer pass\'s claim on the chunks it sends to the embedding model holds (other processes of the same model skip them meanwhile, so each text goes to the model once). A claim is given back when the call ends; one of a process that died mid-call lapses after this long, and until then those chunks wait for their vectors. Keep it above the longest model call with its retries.' }),
  p({ group: 'Retrieval', name: 'svc.retrieval.memory-budget-mb', kind: 'int', min: 1, default: 512,
    description: 'Megabytes the in-process vector indexes may hold (all tenants together); the least recently searched tenant is dropped first and reloaded on its next search.' }),
  p({ group: 'Retrieval', name: 'svc.retrieval.hnsw-ef-search', kind: 'int', min: 1, max: 1000, default: 100,
    description: 'With pgvector: candidates the HNSW index keeps per search (`hnsw.ef_search`; at least twice `topK` is used). Higher finds more of the true nearest chunks and takes longer; pgvector takes at most 1000.' }),
  p({ group: 'Retrieval', name: 'svc.retrieval.vector-search', kind: 'enum', values: ['auto', 'memory', 'pgvector'], default: 'auto',
    description: 'Where chunk vectors are searched. `auto`: an HNSW index of the pgvector extension where the database has it (created at start with the migrations), else the in-process index; `memory`: always in process; `pgvector`: the extension is required and the start fails without it.' }),
  p({ group: 'Retrieval', name: 'svc.llm.base-url', kind: 'url',
    description: 'Base URL of the OpenAI-compatible chat completions endpoint used by chat. Unset: chat answers 503.' }),
  p({ group: 'Retrieval', name: 'svc.llm.model', kind: 'string', default: 'gpt-4o-mini', description: 'Chat model asked of `svc.llm.base-url`.' }),
  p({ group: 'Retrieval', name: 'svc.llm.api-key', kind: 'secret',
    description: 'Key of the chat completions endpoint (sent as a bearer token; never logged).' }),
  p({ group: 'Retrieval', name: 'svc.llm.max-tokens', kind: 'int', min: 0, default: 0,
    description: 'Sent as `max_tokens` with every chat call: the most tokens the model may answer (an answer cut there ends where it was cut). 0: not sent, the endpoint\'s own limit. Some models (OpenAI\'s reasoning models) refuse `max_tokens`: leave it 0 for them.' }),
  p({ group: 'Retrieval', name: 'svc.llm.context-chars', kind: 'int', min: 0, default: 0,
    description: 'The most characters of retrieved chunks (with their tags) semantic chat sends the model as context: the nearest chunks first, each whole while it fits (one too long for what is left is passed over for the next); the others are left out and not cited. Set it to fit a model\'s context window (topK up to 100 chunks of up to 2,000 characters is some 200,000 characters, about 50,000 tokens). Analytic chat\'s schema card is held to it too: examples, descriptions, labels, then values are left out, then the relations sharing the fewest words with the question (docs/retrieval.md). 0: no budget for semantic chat, 200,000 characters of card for analytic chat.' }),
  p({ group: 'Retrieval', name: 'svc.llm.timeout', kind: 'duration', default: '60s', description: 'How long one model call may take, its answer read whole, before chat answers 503 (an answer sent a byte now and then is given up then too).' }),
  p({ group: 'Retrieval', name: 'svc.analytic.statement-timeout', kind: 'duration', default: '5s',
    description: 'Statement timeout of the one read-only query an analytic chat runs, and the time a whole rediscover (schema-card discovery, all its statements together) may take: a longer one stops it with a 503.' }),
  p({ group: 'Retrieval', name: 'svc.analytic.max-answer-bytes', kind: 'int', min: 1024, default: 4194304,
    description: 'Largest answer an analytic chat\'s query may return, in bytes of its rows as JSON objects (column names and nulls included), measured in PostgreSQL before any row is sent; a larger one is refused (guard 5).' }),
  p({ group: 'Retrieval', name: 'svc.analytic.work-mem', kind: 'pg-memory', min: 64, default: '4MB',
    description: 'PostgreSQL\'s `work_mem` for the one query an analytic chat runs (set for its transaction, with `hash_mem_multiplier` 1 and no parallel workers, whatever the server\'s own settings): the memory each sort and hash of the query may hold before it spills to temporary files. A query holds several of them: how many is bounded by `svc.analytic.statement-memory` (docs/analytic-guards.md, "Resources of one statement"). An amount of memory as PostgreSQL writes one: a whole number and `kB`, `MB`, `GB` or `TB` (case as written), at least `64kB`.' }),
  p({ group: 'Retrieval', name: 'svc.analytic.statement-memory', kind: 'pg-memory', min: 64, default: '512MB',
    description: 'The most memory the sorts, hashes and buffers of rows of the one query an analytic chat runs may hold together, each counted at `svc.analytic.work-mem`: the query is planned first (EXPLAIN, not run) and a plan with more of them than fit (128 at the defaults; at least one) is refused (guard 5) without running. Raise it with `svc.analytic.work-mem`, or a plan that fitted no longer does (docs/analytic-guards.md, "Resources of one statement"). Written like `svc.analytic.work-mem`.' }),
  p({ group: 'Retrieval', name: 'svc.analytic.temp-file-limit', kind: 'pg-memory', min: 64, default: '1GB',
    description: 'PostgreSQL\'s `temp_file_limit` for the one query an analytic chat runs: the most temporary files (sorts and hashes past `svc.analytic.work-mem`) it may write; past it the query is refused (guard 5). A server limit that is lower still holds. Needs the application role to be allowed to set it (PostgreSQL 15+; the hub grants it when its database owner is a superuser, as with the embedded PostgreSQL); without that the start warns once and the queries run without it. Written like `svc.analytic.work-mem`.' }),
  p({ group: 'Retrieval', name: 'svc.analytic.concurrency', kind: 'int', min: 1,
    ...POOL_SHARE,
    description: 'Analytic queries (and rediscovers) running at once in one process; each holds a database connection of the pool for up to `svc.analytic.statement-timeout`. Further queries wait, tenants taking turns; one that cannot start within the statement timeout (or finds 16 of its tenant waiting already) is refused by guard 5 (a rediscover: a 503), and the caller asks again later.' }),
  p({ group: 'Retrieval', name: 'svc.analytic.concurrency-per-tenant', kind: 'int', min: 1, default: 2,
    description: 'Of `svc.analytic.concurrency`, the queries of one tenant running at once: a tenant asking many questions at once waits behind its own queries, not other tenants behind it.' }),
];

/** `svc.a.b-c` -> `SVC_A_B_C`. */
export function envName(property: string): string {
  return property.toUpperCase().replace(/[^A-Z0-9]/g, '_');
}

