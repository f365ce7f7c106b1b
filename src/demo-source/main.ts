/** `npm run demo-source`: serves the fixture on DEMO_PORT (8099), every interface, until Ctrl-C. */
import { credentialsFromEnv } from './credentials.js';
import { startDemoSource } from './server.js';

// A setting it cannot use (DEMO_PORT=abc, a port in use) is one line and exit code 2, not a stack.
const source = await startDemoSource().catch((err: unknown) => {
  process.stderr.write(`demo source: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(2);
});
const creds = credentialsFromEnv();
const rows = process.env.DEMO_ROWS || '2400';
const where = process.env.DEMO_HOST ? `on ${process.env.DEMO_HOST}` : 'on every interface';
process.stdout.write(
  `demo source listening ${where}, port ${source.port}: ${source.url} (${rows} rows)\n` +
    `  basic ${creds.username} / ${creds.password}, bearer ${creds.bearerToken}, header X-API-Key: ${creds.apiKey}\n` +
    '  dialects /spring /v1 /drf /link /offset /open /hdr /liar /down /flaky (…/partners), POST /graphql,\n' +
    '  SOAP POST /{siebel,sap,mute,tail,fault,fault200,flaky,session}/start.swe, /admin/reset; see docs/demo-source.md\n',
);

let stopping = false;
const stop = () => {
  if (stopping) return;
  stopping = true;
  source.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
