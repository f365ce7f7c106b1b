import type { ClockRunner } from '../clock/clock.js';
import type { Database } from '../db/database.js';
import { OutboxConsumer } from '../events/consumer.js';
import type { OutboxListener } from '../events/listener.js';
import type { OutboxEvent } from '../events/outbox.js';
import { logger } from '../observability/logger.js';

export interface OutboxLoopOptions {
  /** The consumer's name: its cursor row and its clock job (`outbox:<name>`). */
  name: string;
  /** Sweep cadence (the safety net; NOTIFY wakes the loop sooner). */
  every: number;
  batch: number;
  /** Handles one event. A throw stops the batch there; the event is read again on the next pass. */
  handle: (event: OutboxEvent) => Promise<void>;
}

/**
 * An outbox consumer on the clock: reads a batch after its cursor, hands each event over in order,
 * and advances the cursor after each handled event, so a crash re-reads at most one event. Woken at
 * once by NOTIFY, swept every `every` regardless. Starts at the head: a new consumer is not
 * retroactive.
 */
export class OutboxLoop {
  private readonly consumer: OutboxConsumer;

  constructor(
    db: Database,
    private readonly options: OutboxLoopOptions,
  ) {
    this.consumer = new OutboxConsumer(db, options.name);
  }

  get job(): string {
    return `outbox:${this.options.name}`;
  }

  async start(clock: ClockRunner, listener?: OutboxListener): Promise<void> {
    await this.consumer.startAtHead();
    clock.schedule(this.job, { every: this.options.every }, async () => {
      await this.drain();
    });
    listener?.onEvent(() => void clock.trigger(this.job));
  }

  /** Handles everything visible now (several batches when the outbox is busy). Returns the count. */
  async drain(): Promise<number> {
    let handled = 0;
    for (;;) {
      const events = await this.consumer.next(this.options.batch);
      for (const event of events) {
        try {
          await this.options.handle(event);
        } catch (err) {
          logger().error({ err, consumer: this.options.name, eventId: event.id, eventType: event.type }, `outbox consumer ${this.options.name} failed on event ${event.id}; it will be retried`);
          return handled;
        }
        await this.consumer.advance(event.position);
        handled++;
      }
      if (events.length < this.options.batch) return handled;
    }
  }
}
