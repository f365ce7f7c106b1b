import { createLogger, setLogger } from '../../src/observability/logger.js';

// Tests log nothing unless SVC_TEST_LOG names a level (SVC_TEST_LOG=debug npm test -- file).
setLogger(createLogger({ level: process.env.SVC_TEST_LOG ?? 'silent', json: true }));
