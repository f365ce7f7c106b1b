import { execFileSync } from 'node:child_process';
import { expect } from '@jest/globals';
import { until } from './until.js';

/** Reading a TCP socket's keepalive timer with Linux's `ss` (iproute2): what the keepalive tests check. */

/** Linux's `ss` (iproute2), which shows a socket's timers: undefined, or what is missing (for describeRequiring). */
export function ssProblem(): string | undefined {
  try {
    execFileSync('ss', ['-V'], { stdio: 'ignore' });
    return undefined;
  } catch {
    return 'ss (iproute2) is not installed';
  }
}

/**
 * When the kernel sends the next keepalive probe on this host's established TCP socket of `localPort`
 * (`timer:(keepalive,9.9sec,0)` in `ss -o`), in seconds; fails when no keepalive timer is armed. `ss`
 * shows one timer: a segment just sent and not yet acknowledged shows the retransmission timer
 * (`timer:(on,…)`) until its ACK comes, which a server that is busy with the statement delays.
 */
export async function keepaliveSeconds(localPort: number): Promise<number> {
  let sockets = '';
  const timer = await until(
    'a timer other than the retransmission one',
    () => {
      sockets = execFileSync('ss', ['-tnoH', 'state', 'established', `( sport = :${localPort} )`], { encoding: 'utf8' });
      return !/timer:\(on,/.test(sockets) && (/timer:\(keepalive,([\d.]+)(m?s|sec|min)/.exec(sockets) ?? 'none');
    },
    5_000,
  );
  expect({ sockets, keepalive: timer !== 'none' }).toMatchObject({ keepalive: true });
  const armed = timer as RegExpExecArray;
  return Number(armed[1]) * ({ ms: 0.001, sec: 1, min: 60 } as Record<string, number>)[armed[2]!]!;
}
