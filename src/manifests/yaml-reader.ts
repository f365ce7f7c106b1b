import type { Worker } from 'node:worker_threads';
import { formatDuration } from '../config/duration.js';
import { PayloadTooLarge, RateLimited, Unavailable } from '../errors.js';
import { startWorker } from '../runtime/worker-thread.js';
import type { YamlRead } from './yaml-body.js';
import type { YamlRequest, YamlResponse } from './yaml-worker.js';

/**
 * Heap of the reading thread: reading 1 MiB of YAML (the most the hub reads) takes well under it; a text that needs
 * more ends the thread, not the hub (`YamlReadStopped`, reason `memory`).
 */
export const YAML_READER_HEAP_MB = 512;

/** How long a starting thread may take to be ready before the reads waiting for it are refused. */
const START_LIMIT_MS = 60_000;

/** How long the reading thread is kept after its last read: it is started again (in tens of milliseconds) when needed. */
const IDLE_STOP_MS = 10_000;

/** Reads of one owner (a tenant) in the reader at once, waiting or under way: more are refused (`YamlReaderBusy`). */
export const YAML_READS_PER_OWNER = 2;

/**
 * A read refused because its owner already has `YAML_READS_PER_OWNER` reads in the reader; `retryAfterSeconds` is the
 * time limit of one read, by when one of them is surely answered.
 */
export class YamlReaderBusy extends Error {
  constructor(readonly retryAfterSeconds: number) {
    super(`${YAML_READS_PER_OWNER} YAML texts of the same tenant are being read already`);
    this.name = 'YamlReaderBusy';
  }
}

/**
 * A read the hub gave up: it took longer than its time limit, more memory than the reading thread has, or the reader
 * was closed (the hub stopping). The message completes "the YAML …".
 */
export class YamlReadStopped extends Error {
  constructor(
    readonly reason: 'time' | 'memory' | 'closed',
    message: string,
  ) {
    super(message);
    this.name = 'YamlReadStopped';
  }
}

/** What a read is for and bounded by. */
export interface YamlReadOptions {
  /** Its time limit (`svc.http.yaml-read-timeout`), counted from when the thread takes it up. */
  limitMs: number;
  /** Whose read it is (the tenant): each owner has at most `YAML_READS_PER_OWNER` in the reader, and owners take turns. */
  owner: string;
  /** The most JSON text its value may make (aliases repeat what they name): past it, a problem `tooLarge`. */
  maxJsonBytes: number;
}

interface Job {
  request: Omit<YamlRequest, 'id'>;
  limitMs: number;
  resolve: (read: YamlRead | undefined) => void;
  reject: (err: Error) => void;
}

/**
 * Reads tenants' YAML on a thread of its own, one text at a time, so that the event loop serving every tenant never
 * waits on the yaml package (about 1 MB a second, and slower on inputs built for it). Each read has a time limit,
 * counted from when the thread takes it up (not while it waits behind another): past it the thread is stopped and a
 * new one serves the next read. Owners (tenants) take turns: the next read is the oldest of the waiting owner served
 * least recently, so a tenant sending many slow texts delays another's by one read at most, not by all of its own. The
 * thread starts on the first read and stops when idle.
 */
export class YamlReader {
  private worker: Worker | undefined;
  private ready = false;
  private nextId = 1;
  /** Reads waiting, by owner, the owners in the order their first read came. */
  private readonly waiting = new Map<string, Job[]>();
  private taken = 0;
  private closed = false;
  private current: { id: number; job: Job; timer: NodeJS.Timeout } | undefined;
  private idle: NodeJS.Timeout | undefined;
  /**
   * Each owner holding reads (waiting or under way): how many, and when it was last served (a count of reads taken
   * up, 0 before its first): the least recently served goes next. Forgotten when it holds none.
   */
  private readonly owners = new Map<string, { held: number; served: number }>();

  /** `heapMb`: the reading thread's heap; `startLimitMs`: how long it may take to start (tests give them less). */
  constructor(
    private readonly heapMb = YAML_READER_HEAP_MB,
    private readonly startLimitMs = START_LIMIT_MS,
  ) {}

  /**
   * A manifest body read as kubectl reads it, its keys and problems named under `root` (yaml-body.ts,
   * readYamlManifest), for `owner` (the tenant: one tenant's reads cannot fill the queue every tenant waits in).
   */
  manifest(text: string, root: string, options: YamlReadOptions): Promise<YamlRead> {
    return this.submit({ text, root, maxJsonBytes: options.maxJsonBytes }, options) as Promise<YamlRead>;
  }

  /** A document that is not a manifest (readYamlDocument); undefined when it is not YAML. */
  document(text: string, options: YamlReadOptions): Promise<YamlRead | undefined> {
    return this.submit({ text, root: undefined, maxJsonBytes: options.maxJsonBytes }, options);
  }

  /** Reads of `owner` in the reader now, waiting or under way. */
  held(owner: string): number {
    return this.owners.get(owner)?.held ?? 0;
  }

  /**
   * Stops the thread for good: reads waiting or under way, and any sent later (a body whose upload ends after the hub
   * began to stop), are refused (`YamlReadStopped`, reason `closed`).
   */
  async close(): Promise<void> {
    const worker = this.worker;
    this.closed = true;
    const closed = () => new YamlReadStopped('closed', 'was not read: the hub is stopping');
    this.stop(closed());
    for (const jobs of this.waiting.values()) for (const job of jobs) job.reject(closed());
    this.waiting.clear();
    if (worker) await worker.terminate();
  }

  private submit(request: Omit<YamlRequest, 'id'>, { limitMs, owner }: YamlReadOptions): Promise<YamlRead | undefined> {
    if (this.closed) return Promise.reject(new YamlReadStopped('closed', 'was not read: the hub is stopping'));
    const state = this.owners.get(owner) ?? { held: 0, served: 0 };
    if (state.held >= YAML_READS_PER_OWNER) return Promise.reject(new YamlReaderBusy(Math.ceil(limitMs / 1000)));
    state.held += 1;
    this.owners.set(owner, state);
    const release = () => {
      state.held -= 1;
      if (state.held === 0) this.owners.delete(owner);
    };
    return new Promise<YamlRead | undefined>((resolve, reject) => {
      const jobs = this.waiting.get(owner);
      if (jobs) jobs.push({ request, limitMs, resolve, reject });
      else this.waiting.set(owner, [{ request, limitMs, resolve, reject }]);
      this.pump();
    }).finally(release);
  }

  private servedAt(owner: string): number {
    return this.owners.get(owner)?.served ?? 0;
  }

  /** The next read: the oldest of the waiting owner served least recently (one never served first, then by arrival). */
  private next(): Job | undefined {
    let owner: string | undefined;
    for (const candidate of this.waiting.keys()) {
      if (owner === undefined || this.servedAt(candidate) < this.servedAt(owner)) owner = candidate;
    }
    if (owner === undefined) return undefined;
    const jobs = this.waiting.get(owner)!;
    const job = jobs.shift()!;
    if (!jobs.length) this.waiting.delete(owner);
    const state = this.owners.get(owner);
    if (state) state.served = ++this.taken;
    return job;
  }

  private pump(): void {
    if (this.current || !this.waiting.size) return;
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    const worker = this.start();
    // Held while reads wait: a process with nothing else to do (a command) waits for them.
    worker.ref();
    if (!this.ready) return;
    const job = this.next()!;
    const id = this.nextId++;
    const timer = setTimeout(() => {
      if (this.current?.id !== id) return;
      this.stop(new YamlReadStopped('time', `took longer than svc.http.yaml-read-timeout (${formatDuration(job.limitMs)}) to read`));
      this.pump();
    }, job.limitMs);
    this.current = { id, job, timer };
    worker.postMessage({ id, ...job.request } satisfies YamlRequest);
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = startWorker(import.meta.url, './yaml-worker', { maxOldGenerationSizeMb: this.heapMb });
    this.worker = worker;
    this.ready = false;
    const starting = setTimeout(() => fail(new Error(`not ready within ${formatDuration(this.startLimitMs)} of its start`)), this.startLimitMs).unref();
    worker.on('message', (message: YamlResponse | 'ready') => {
      if (this.worker !== worker) return;
      if (message === 'ready') {
        clearTimeout(starting);
        this.ready = true;
        this.pump();
        return;
      }
      const current = this.current;
      if (current?.id !== message.id) return;
      clearTimeout(current.timer);
      this.current = undefined;
      if ('error' in message) current.job.reject(new Error(`reading the YAML failed: ${message.error}`));
      else current.job.resolve(message.read);
      if (this.waiting.size) this.pump();
      else {
        worker.unref();
        this.idle = setTimeout(() => {
          if (this.worker === worker && !this.current) this.stop();
        }, IDLE_STOP_MS).unref();
      }
    });
    const fail = (err: Error & { code?: string }) => {
      clearTimeout(starting);
      if (this.worker !== worker) return;
      const memory = err.code === 'ERR_WORKER_OUT_OF_MEMORY';
      // A thread that never got ready cannot serve what waits either: refused, not retried in a loop.
      if (!this.ready && !memory) {
        for (const jobs of this.waiting.values()) for (const job of jobs) job.reject(new Error(`the YAML reader did not start: ${err.message}`));
        this.waiting.clear();
      }
      this.stop(memory ? new YamlReadStopped('memory', `needed more memory to read than the YAML reader has (${this.heapMb} MB)`) : new Error(`the YAML reader stopped: ${err.message}`));
      this.pump();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => fail(new Error(`exit code ${code}`)));
    return worker;
  }

  /** Forgets the thread (terminating it) and refuses the read under way, if any, with `err`. */
  private stop(err?: Error): void {
    const worker = this.worker;
    this.worker = undefined;
    this.ready = false;
    if (this.idle) clearTimeout(this.idle);
    this.idle = undefined;
    const current = this.current;
    this.current = undefined;
    if (current) {
      clearTimeout(current.timer);
      current.job.reject(err ?? new Error('the YAML reader stopped'));
    }
    if (worker) void worker.terminate();
  }
}

/**
 * The HTTP answer to a read the reader refused or gave up, `hint` saying what to send instead: the owner's reads all
 * taken (429 with `Retry-After`), the time limit or the heap (413), the hub stopping (503); anything else as it is.
 */
export function yamlReadRefusal(err: unknown, hint: string): unknown {
  if (err instanceof YamlReaderBusy) return new RateLimited(err.retryAfterSeconds, `${err.message}: send this one when they are answered, or as JSON`);
  if (err instanceof YamlReadStopped) return err.reason === 'closed' ? new Unavailable(`YAML ${err.message}`) : new PayloadTooLarge(`YAML body ${err.message}`, hint);
  return err;
}
