import { execFileSync, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A real terminal for tests of full-screen commands: a detached tmux session (Debian package tmux,
 * which .ci/run installs) of a fixed size running one command, driven with `send-keys` and read
 * with `capture-pane -p` (the screen as plain text, one line per row). Each session has its own
 * server, on a socket in a temporary directory (`tmux -S`), so tests never touch a developer's tmux
 * sessions or each other's; `kill` ends that server and removes the directory.
 */

const TMUX = '/usr/bin/tmux';

export interface TmuxSession {
  name: string;
  /** Keys as tmux names them (`Tab`, `Enter`, `Down`, `C-c`) or literal text. */
  sendKeys(...keys: string[]): void;
  /**
   * The visible screen, one string per row (trailing spaces as tmux prints them). With `styled`
   * (`capture-pane -e`) each row carries the SGR codes of its colours and attributes as tmux keeps
   * them (`\x1b[1m` bold, `\x1b[7m` reverse, `\x1b[31m` red, …): what can be asserted of colour.
   */
  capture(options?: { styled?: boolean }): string[];
  /**
   * Pastes `text` as a terminal pastes it (`paste-buffer -p`): between the bracketed-paste markers
   * when the program asked for them (mode 2004), else as if typed.
   */
  paste(text: string): void;
  /** Waits until `test` holds for the screen (`styled`: as capture's); throws with the last screen after `timeoutMs`. */
  waitFor(test: (screen: string) => boolean, timeoutMs?: number, styled?: boolean): Promise<string>;
  /**
   * Whether the command has ended (its pane stays, dead: remain-on-exit). tmux may notice the end
   * (the terminal closed) before it learns the exit status, so only that is asked.
   */
  ended(): boolean;
  /** The terminal device of the session's pane (`/dev/pts/N`); `kill` closes it, as closing a terminal window does. */
  tty(): string;
  /** Ends the session and its tmux server; safe to call twice. */
  kill(): void;
}

export interface TmuxOptions {
  /** The shell command line the session runs. */
  command: string;
  /** Environment of the command (tmux's server passes it on; `TERM` is set by tmux). */
  env: Record<string, string>;
  cwd: string;
  columns?: number;
  rows?: number;
}

export function startTmux(options: TmuxOptions): TmuxSession {
  const name = `svc-test-${process.pid}-${randomBytes(4).toString('hex')}`;
  const dir = mkdtempSync(join(tmpdir(), 'svc-tmux-'));
  const socket = join(dir, 'socket');
  // the pane stays after the command exits (from the start, so even a crash at once stays readable)
  const config = join(dir, 'tmux.conf');
  writeFileSync(config, 'set-option -g remain-on-exit on\n');
  const tmux = (...args: string[]) => execFileSync(TMUX, ['-S', socket, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', LANG: 'C.UTF-8', TERM: 'xterm-256color', ...options.env };
  try {
    execFileSync(
      TMUX,
      ['-S', socket, '-f', config, 'new-session', '-d', '-x', String(options.columns ?? 160), '-y', String(options.rows ?? 40), '-s', name, '-c', options.cwd, options.command],
      { env, cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'] },
    );
  } catch (err) {
    spawnSync(TMUX, ['-S', socket, 'kill-server'], { stdio: 'ignore' });
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  let killed = false;
  const capture = (options: { styled?: boolean } = {}) => tmux('capture-pane', '-p', ...(options.styled ? ['-e'] : []), '-t', name).split('\n');
  return {
    name,
    sendKeys: (...keys) => {
      tmux('send-keys', '-t', name, ...keys);
    },
    capture,
    paste: (text) => {
      tmux('set-buffer', '-b', name, '--', text);
      tmux('paste-buffer', '-p', '-d', '-b', name, '-t', name);
    },
    waitFor: async (test, timeoutMs = 15_000, styled = false) => {
      const deadline = Date.now() + timeoutMs;
      let screen = '';
      for (;;) {
        screen = capture({ styled }).join('\n');
        if (test(screen)) return screen;
        if (Date.now() > deadline) throw new Error(`tmux session ${name}: the screen did not show what was expected within ${timeoutMs} ms:\n${screen}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    ended: () => tmux('display-message', '-p', '-t', name, '#{pane_dead}').trim() === '1',
    tty: () => tmux('display-message', '-p', '-t', name, '#{pane_tty}').trim(),
    kill: () => {
      if (killed) return;
      killed = true;
      spawnSync(TMUX, ['-S', socket, 'kill-server'], { stdio: 'ignore' });
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Why tmux tests cannot run here, or undefined when they can. */
export function tmuxProblem(): string | undefined {
  if (!existsSync(TMUX)) return `${TMUX} not found: install it with \`apt-get install tmux\` (Debian) to run the terminal UI tests`;
  return undefined;
}
