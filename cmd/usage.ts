// The usage texts of the svc-hub executable (what `--help` prints), apart from the code they
// describe so that reading them (test/docs.test.ts holds the docs to them) starts nothing.

export const USAGE = `usage: svc-hub <role>
       svc-hub run connector NAME --tenant CODE [--endpoint ID] [--scheduled]
       svc-hub run export NAME --tenant CODE [--scheduled]
       svc-hub secrets rekey [--batch N]
       svc-hub outbox consumers | drop-consumer NAME [--force]
       svc-hub --help | --version

roles:
  all        the API, the outbox dispatchers and the schedulers in one process (what npm start runs)
  serve      the HTTP API only
  dispatch   the outbox consumers (webhooks, e-mail rules, hooks, processes) and the sweeps,
             leader-elected: several may run, one works at a time; serves only /q/health* and
             /q/metrics
  migrate    apply pending database migrations and exit
  operator   the Kubernetes operator: reconciles Connector, Entity, Export, Workflow and Process
             resources into the hub, owns their CronJobs, writes their status; leader-elected;
             serves only /q/health* and /q/metrics
  run        one run of a connector (its enabled endpoints, or the one named) or of an export in
             this process, then exit, non-zero when a run failed; --scheduled takes the latest due
             slot of the stored schedule (what a CronJob runs)
  secrets    rekey: re-seal every stored sealed value under svc.secret.master-key (after a rotation,
             while it still reads svc.secret.previous-master-keys), then exit; non-zero when a value
             opened under no configured key
  outbox     consumers: list the outbox consumers' cursors (position, lag, last advanced);
             drop-consumer NAME: remove the cursor of a consumer no hub runs any more, so the
             purge no longer keeps events for it (a consumer this version runs is refused, and one
             that advanced in the last 15 minutes unless --force)

Configuration comes from application.yaml and SVC_* environment variables (docs/configuration.md).
`;

export const ROLES = ['all', 'serve', 'dispatch', 'operator', 'migrate', 'run', 'secrets', 'outbox'] as const;

export const RUN_USAGE = `usage: svc-hub run connector NAME --tenant CODE [--endpoint ID] [--scheduled]
       svc-hub run export NAME --tenant CODE [--scheduled]

  connector: runs the connector's enabled endpoints (or the one named) once, in this process, prints
  one line per run and exits non-zero when a run failed.
  export: runs the export once, in this process (its artifact time is now), prints the run's line
  (receipt or failure code and reason) and exits non-zero when it failed.
  --scheduled takes the latest due slot of the stored schedule: a connector honours the window
  fence, an export uses the slot as its artifact time, and a slot that already ran (or was delivered)
  is skipped (what a CronJob runs); an export's slot that finds a run of the export in flight waits
  for it to end, then runs.
`;
