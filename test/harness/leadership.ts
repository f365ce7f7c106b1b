import { ClockRunner } from '../../src/clock/clock.js';
import { type LeaderClock, type LeaderElector, Leadership } from '../../src/dispatch/leader.js';

/** A process contending for the lead, as a hub replica does: its leadership, its clock and that clock gated by the lead. */
export interface GatedProcess {
  leadership: Leadership;
  clock: ClockRunner;
  gated: LeaderClock;
}

/**
 * A process leading through `elector` (checked every 100 ms) whose gated job `job`, every 50 ms,
 * calls `ran` each time it runs: where it runs is where the lead is. Stop it with stopProcesses.
 */
export async function startGatedProcess(elector: LeaderElector, ran: () => void): Promise<GatedProcess> {
  const leadership = new Leadership(elector, { checkEvery: 100 });
  const clock = new ClockRunner();
  const gated = leadership.gate(clock);
  gated.schedule('job', { every: 50 }, async () => {
    ran();
  });
  clock.start();
  await leadership.start();
  return { leadership, clock, gated };
}

/** Stops each process's clock, then its leadership (which gives the lead up). */
export async function stopProcesses(processes: GatedProcess[]): Promise<void> {
  for (const x of processes) {
    await x.clock.stop();
    await x.leadership.stop();
  }
}
