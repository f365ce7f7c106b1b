import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packageRoot } from '../package-root.js';
import { renderConfigurationDoc } from './docs.js';

const target = join(packageRoot(), 'docs', 'configuration.md');
writeFileSync(target, renderConfigurationDoc());
process.stdout.write(`wrote ${target}\n`);
