import type { Config } from '../src/config/config.js';
import { loadMasterKeys } from '../src/platform/secrets/master-key.js';
import { REKEY_BATCH, type RekeyReport, rekey, type SealedValues } from '../src/platform/secrets/rekey.js';
import { SECRET_VALUES } from '../src/platform/secrets/store.js';
import { INTEGRATION_SECRETS } from '../src/webhooks/secret.js';
import { databaseCommand } from './database-command.js';

export const SECRETS_USAGE = `usage: svc-hub secrets rekey [--batch N]

  rekey: re-seals every value stored sealed (the secret store's secrets, integration secrets) under
  svc.secret.master-key: a value that only one of svc.secret.previous-master-keys opens is sealed
  again, N values per transaction (default ${REKEY_BATCH}), its rows locked meanwhile, so a tenant's
  change at the same time keeps its new value. Safe while hubs serve, and again after a stop.
  Prints 're-sealed N values, M already under the current key, K could not be opened with any
  configured key' (naming each of the K) and exits 1 when K > 0: the previous keys are still needed
  then (or those values must be stored again). With K = 0 the previous keys can be removed.
`;

/** Every table of values sealed under the master key: what `rekey` walks. */
export const SEALED_VALUES: readonly SealedValues[] = [SECRET_VALUES, INTEGRATION_SECRETS];

interface SecretsArgs {
  batch: number;
}

export function parseSecretsArgs(argv: string[]): SecretsArgs | string {
  const [command, ...rest] = argv;
  if (command !== 'rekey') return command ? `unknown command '${command}'` : 'a command is required (rekey)';
  const args: SecretsArgs = { batch: REKEY_BATCH };
  for (let i = 0; i < rest.length; i++) {
    const flag = rest[i];
    if (flag !== '--batch') return `unexpected argument '${flag}'`;
    const value = rest[++i];
    if (!value || !/^\d+$/.test(value) || Number(value) < 1 || Number(value) > 10_000) return '--batch needs a whole number from 1 to 10000';
    args.batch = Number(value);
  }
  return args;
}

/** The summary line of a rekey. */
export function rekeySummary(report: Pick<RekeyReport, 'resealed' | 'current' | 'unopened'>): string {
  return `re-sealed ${report.resealed} values, ${report.current} already under the current key, ${report.unopened.length} could not be opened with any configured key`;
}

/**
 * `svc-hub secrets rekey`: the keys are read (a malformed one stops it as it stops a hub), the
 * database reached as the other roles reach it, then every sealed value visited. Exit 0 when every
 * value is under the current key now, 1 when some opened under no key or a stop came first.
 */
export async function secretsCommand(
  config: Config,
  argv: string[],
  out: (line: string) => void = (l) => process.stdout.write(`${l}\n`),
  stop?: AbortSignal,
): Promise<number> {
  const args = parseSecretsArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`svc-hub secrets: ${args}\n\n${SECRETS_USAGE}`);
    return 2;
  }
  const keys = loadMasterKeys(config);
  // A signal during the database's setup interrupts it (exit 1); one during the rekey lets its batch end (cmd/compose.ts).
  return databaseCommand(config, stop, 'the rekey (its batch in progress)', async (db) => {
    const report = await rekey(db, keys, SEALED_VALUES, { batch: args.batch, stop });
    for (const value of report.unopened) out(`could not be opened: ${value.kind} ${value.name} of tenant ${value.tenantId}`);
    out(`${report.stopped ? 'stopped before the end: ' : ''}${rekeySummary(report)}`);
    return report.unopened.length > 0 || report.stopped ? 1 : 0;
  });
}
