import { INT_MAX } from './config.js';
import { envName, PROPERTIES } from './properties.js';

/** docs/configuration.md, generated from the property table (`npm run docs:config`). */
export function renderConfigurationDoc(): string {
  const lines: string[] = [
    '# Configuration',
    '',
    '<!-- Generated from src/config/properties.ts by `npm run docs:config`; a test fails when this file is stale. -->',
    '',
    'Every property `svc.a.b-c` is read, lowest precedence first, from its default, from the YAML file',
    'named by `SVC_CONFIG` (default `./application.yaml`; nested maps or dotted keys both work), and from',
    'the environment as `SVC_A_B_C` (upper case, every non-alphanumeric character an underscore) or one',
    'of the aliases listed. Durations are written `500ms`, `5s`, `30s`, `15m`, `1h`, `2d` or ISO-8601',
    '(`PT5S`), at most `24d` (the longest a timer holds); sizes (`512kb`, `10mb`) at least one byte; whole numbers within the range',
    'each row gives; URLs with a port other than 0 (nothing listens there: leave the port out for the scheme\'s default). Values are checked at start: a bad one stops the process with a message naming the property',
    '(`svc-hub: configuration error: <property> (<its environment variable>): <what is wrong>`), in which a URL\'s password and',
    'password-like query parameters (`password=`, `token=`, `api_key=`, …) are shown as `***`. An environment variable set to the',
    'empty string counts as unset. Unknown `SVC_*` variables (other than those of the `svc` client, docs/cli.md) and unknown `svc.*`',
    'keys in the file are reported as warnings, in any case (`svc_http_port`, `SVC.HTTP.PORT`, or a key `SVC_HTTP_PORT` in the file, none',
    'of which is read), naming the property meant when there is one; `svc.config` in the file is ignored with a warning (keys',
    'outside `svc.` are left alone: they may be read by other programs). A file that is not a mapping, a property given twice',
    'in it (as nested keys and as a dotted key) and a property whose value is a mapping or a list stop the start. A file that is',
    'not valid YAML stops it naming the line and column (`… is not valid YAML: Missing closing "quote at line 4, column 1`), never',
    'quoting the line, which may hold the master key or another credential.',
    '',
    'Example `application.yaml`:',
    '',
    '```yaml',
    'svc:',
    '  profile: prod',
    '  oidc:',
    '    issuer: https://login.example.com/realms/svc',
    '    audience: svc-hub',
    '  webhook:',
    '    sweep-every: 2s',
    '```',
    '',
  ];
  const groups = [...new Set(PROPERTIES.map((p) => p.group))];
  for (const group of groups) {
    lines.push(`## ${group}`, '', '| property | environment | default | meaning |', '|---|---|---|---|');
    for (const p of PROPERTIES.filter((d) => d.group === group)) {
      const env = [envName(p.name), ...(p.aliases ?? [])].map((e) => `\`${e}\``).join(', ');
      const def = p.defaultText ?? (p.default === undefined ? '(none)' : `\`${String(p.default)}\``);
      const values = p.values ? ` One of ${p.values.map((v) => `\`${v}\``).join(', ')}.` : '';
      const range = p.kind === 'int' ? ` From ${p.min ?? 'any'} to ${p.max ?? INT_MAX}.` : '';
      lines.push(`| \`${p.name}\` | ${env} | ${def} | ${p.description.replace(/\|/g, '\\|')}${values}${range} |`);
    }
    lines.push('');
  }
  return `${lines.join('\n')}`;
}
