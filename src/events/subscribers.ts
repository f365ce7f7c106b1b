import type { Tx } from '../db/database.js';
import { matchesSubscription } from './topics.js';

/** Answers whether anything in the tenant of `tx` subscribes to an event type. */
export type SubscriberCheck = (tx: Tx, type: string) => Promise<boolean>;

/**
 * Who listens to an event type. Some events are only worth writing when someone subscribes
 * (`data.row.changed`, spec 1 Events rule 2): integrations, e-mail rules and processes each register
 * a check here when their area is installed.
 */
export class Subscribers {
  private readonly checks: SubscriberCheck[] = [];

  register(check: SubscriberCheck): void {
    this.checks.push(check);
  }

  async any(tx: Tx, type: string): Promise<boolean> {
    for (const check of this.checks) if (await check(tx, type)) return true;
    return false;
  }
}

/** A check over a list of patterns (exact types or `prefix.*`), for subscribers kept in a table. */
export function patternsMatch(patterns: readonly string[], type: string): boolean {
  return patterns.some((p) => matchesSubscription(p, type));
}
