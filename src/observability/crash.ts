import { logger } from './logger.js';
import { loggableMessage } from './database-errors.js';

/**
 * An error nothing caught (a promise rejected with no handler, an exception thrown out of a
 * callback) ends the process as Node ends it by default, exit status 1: what was under way is in
 * an unknown state, and a supervisor (Kubernetes, systemd) starts it again; an embedded PostgreSQL
 * left behind is adopted by the next start (docs/operations.md). But its line goes through the
 * logger, masked like every other line: Node's own report prints the error to standard error as it
 * is, the credentials its message may quote (a database address with its password) included.
 */
export function installCrashLogging(): void {
  const crash = (what: string) => (err: unknown) => {
    try {
      logger().fatal({ err }, `${what}: ${loggableMessage(err)}; the process stops (exit status 1)`);
    } finally {
      process.exit(1);
    }
  };
  process.on('unhandledRejection', crash('a promise was rejected and nothing handled it'));
  process.on('uncaughtException', crash('an exception was thrown and nothing caught it'));
}
