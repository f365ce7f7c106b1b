/**
 * A benchmark's helper in a process of its own, spoken to over the IPC channel of `fork()`: the
 * child announces itself with `{kind: 'ready', …}` once it is set up, then answers each request
 * (sent with an `id`) with `{id, ok: true, value}` or `{id, ok: false, error}`. What the child
 * holds in memory and spends on CPU is then never counted as the benchmark process's.
 *
 * Parent side: `forkService`. Child side: `serveRequests`.
 */
import { type ForkOptions, fork } from 'node:child_process';

export type ServiceAnswer<Value> = { id: number; ok: true; value: Value } | { id: number; ok: false; error: string };

export type ServiceProcess<Ready, Request, Value> = Ready & {
  pid: number;
  /** Sends one request and waits for its answer; rejects with the child's error or when it exits. */
  ask(request: Request): Promise<Value>;
  /** SIGTERM, then waits for the exit. */
  close(): Promise<void>;
};

/** Forks `file` and waits for its `ready` message. `what` names the child in errors. */
export function forkService<Ready extends object, Request extends object, Value>(file: string, what: string, options: Pick<ForkOptions, 'execArgv' | 'env'> = {}): Promise<ServiceProcess<Ready, Request, Value>> {
  const child = fork(file, [], { ...options, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  let next = 0;
  const waiting = new Map<number, { resolve: (value: Value) => void; reject: (err: Error) => void }>();
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`${what} exited (code ${code}) before it was ready`)));
    child.on('message', (message: (Ready & { kind: 'ready' }) | ServiceAnswer<Value>) => {
      if ('kind' in message) {
        child.removeAllListeners('exit');
        child.on('exit', (code) => {
          for (const w of waiting.values()) w.reject(new Error(`${what} exited (code ${code})`));
          waiting.clear();
        });
        const { kind: _kind, ...ready } = message;
        resolve({
          ...(ready as unknown as Ready),
          pid: child.pid!,
          ask(request: Request) {
            const id = ++next;
            return new Promise<Value>((ok, fail) => {
              waiting.set(id, { resolve: ok, reject: fail });
              child.send({ ...request, id });
            });
          },
          close: () =>
            new Promise<void>((done) => {
              if (child.exitCode !== null || child.signalCode !== null) return done();
              child.once('exit', () => done());
              child.kill('SIGTERM');
            }),
        });
        return;
      }
      const w = waiting.get(message.id);
      waiting.delete(message.id);
      if (!w) return;
      if (message.ok) w.resolve(message.value);
      else w.reject(new Error(`${what} failed: ${message.error}`));
    });
  });
}

/**
 * The child's side: answers every request with `handle`'s value or error, announces `ready`, and
 * runs `stop` (then exits) on SIGTERM or when the parent goes away.
 */
export function serveRequests<Request extends object, Value>(ready: object, handle: (request: Request) => Promise<Value>, stop: () => Promise<void>): void {
  process.on('message', (message: Request & { id: number }) => {
    handle(message).then(
      (value) => process.send?.({ id: message.id, ok: true, value } satisfies ServiceAnswer<Value>),
      (err: Error) => process.send?.({ id: message.id, ok: false, error: err.stack ?? err.message } satisfies ServiceAnswer<Value>),
    );
  });
  let stopping = false;
  const end = () => {
    if (stopping) return;
    stopping = true;
    stop().then(
      () => process.exit(0),
      () => process.exit(1),
    );
  };
  process.on('SIGTERM', end);
  process.on('disconnect', end);
  process.send?.({ ...ready, kind: 'ready' });
}
