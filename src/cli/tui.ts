import { type Ctx, colourWanted, dumbTerminal } from './context.js';
import { answered, HttpError } from './errors.js';
import { type StreamEvent, tailEvents, type Wait } from './event-tail.js';
import { type Hub, NOT_RUNNING_HINT } from './http.js';
import { KeyReader, PASTE } from './keys.js';
import { durationOption } from './input.js';
import { cell, clipTo, columnsOf, elideMiddle, padTo as pad, printable, type Row } from './output.js';

export { decodeKeys, KeyReader, PASTE } from './keys.js';

/**
 * `svc tui`: a full-screen terminal UI over the same HTTP API as the other commands. The screen is
 * a pure function of the state (`render`), key presses change the state through a pure `reduce`,
 * and `runTui` is the thin terminal driver around them (alternate screen, raw mode, timers, the
 * event stream). No dependency: plain ANSI escape sequences.
 */

export type View = 'runs' | 'dlq' | 'deliveries' | 'inbox' | 'events';
type ListView = Exclude<View, 'events'>;

/** In tab order; keys 1-5. The inbox came last, so the earlier views keep their keys. */
const VIEWS: View[] = ['runs', 'dlq', 'deliveries', 'events', 'inbox'];
const LIST_VIEWS: ListView[] = ['runs', 'dlq', 'deliveries', 'inbox'];
const TITLES: Record<View, string> = { runs: 'Runs', dlq: 'Dead letters', deliveries: 'Deliveries', inbox: 'Inbox', events: 'Events' };
/**
 * How many rows each list view asks for (the hub's default for the route, made explicit): a list
 * that comes back this long says, on its last line, that it shows only these and which command shows more.
 */
const LIMITS: Record<ListView, number> = { runs: 50, dlq: 100, deliveries: 50, inbox: 50 };
const MORE: Record<ListView, string> = { runs: 'svc runs ls', dlq: 'svc dlq ls', deliveries: 'svc deliveries ls', inbox: 'svc inbox ls' };
/** Where each list view loads from; the inbox's route depends on its unacknowledged-only filter. */
const ROUTES: Record<ListView, (state: State) => string> = {
  runs: () => `/api/platform/runs?limit=${LIMITS.runs}`,
  dlq: () => `/api/platform/dlq?limit=${LIMITS.dlq}`,
  deliveries: () => `/api/platform/deliveries?limit=${LIMITS.deliveries}`,
  inbox: (state) => `/api/inbox?${state.unacked ? 'acked=false&' : ''}limit=${LIMITS.inbox}`,
};

/** The events view keeps the newest this many. */
const EVENT_BUFFER = 500;

export interface State {
  view: View;
  lists: Record<ListView, Row[]>;
  /** The list views loaded at least once: until then an empty one says so, not that the hub has nothing (a hub that cannot be reached). */
  loadedOnce: Record<ListView, boolean>;
  /** When each list view was last loaded by a refresh (ms since the epoch). */
  loadedAt: Partial<Record<ListView, number>>;
  /** The list views whose last refresh failed: what they show is from `loadedAt`, and they say so. */
  stale: Partial<Record<ListView, boolean>>;
  events: StreamEvent[];
  selected: Record<View, number>;
  /** The selected item shown as JSON instead of the list (Enter; Esc closes it). */
  detail?: { title: string; value: unknown; scroll: number };
  /** The status line: the last error (an HTTP error, a failed call) or what was loaded when. */
  status: { text: string; error: boolean };
  /**
   * Why the event stream is down (lost, waiting to reconnect, or stopped for good), while it is:
   * shown at the start of the status line whatever the refreshes write there; cleared when it is back.
   */
  streamDown?: string;
  /** Milliseconds since the epoch, set by the driver: the clock for durations of running runs. */
  now: number;
  /** Set by reduce, acted on (and cleared) by the driver. */
  quit: boolean;
  refresh: boolean;
  /** The inbox item to acknowledge (`a` in the inbox view): set by reduce, acted on (and cleared) by the driver. */
  ack?: string;
  /** The inbox view shows only unacknowledged decisions (`u` toggles it). */
  unacked: boolean;
  /** Shown in the header: the hub's URL. */
  title: string;
}

export function initialState(title = '', now = Date.now()): State {
  return {
    view: 'runs',
    lists: { runs: [], dlq: [], deliveries: [], inbox: [] },
    loadedOnce: { runs: false, dlq: false, deliveries: false, inbox: false },
    loadedAt: {},
    stale: {},
    events: [],
    selected: { runs: 0, dlq: 0, deliveries: 0, inbox: 0, events: 0 },
    status: { text: 'loading…', error: false },
    now,
    quit: false,
    refresh: false,
    unacked: false,
    title,
  };
}

// ---- keys (read by keys.ts) ----

/** Rows of the body visible for `pageup`/`pagedown`; render keeps the selection in view anyway. */
const PAGE = 10;

export function itemsOf(state: State, view: View = state.view): unknown[] {
  return view === 'events' ? state.events : state.lists[view];
}

function clamp(n: number, length: number): number {
  return Math.max(0, Math.min(n, length - 1));
}

/** The state after one key. Pure. */
export function reduce(state: State, key: string): State {
  // The UI has no text input: a paste does nothing (its `q`, digits or newlines are text, never keys)
  if (key.startsWith(PASTE)) return state;
  if (key === 'q' || key === 'ctrl-c') return { ...state, quit: true };
  if (key === 'r') return { ...state, refresh: true };
  const index = ['1', '2', '3', '4', '5'].indexOf(key);
  if (index >= 0) return { ...state, view: VIEWS[index]!, detail: undefined };
  if (key === 'tab' || key === 'shift-tab') {
    const step = key === 'tab' ? 1 : VIEWS.length - 1;
    return { ...state, view: VIEWS[(VIEWS.indexOf(state.view) + step) % VIEWS.length]!, detail: undefined };
  }
  const move: Record<string, number> = { up: -1, k: -1, down: 1, j: 1, pageup: -PAGE, pagedown: PAGE, home: -Infinity, g: -Infinity, end: Infinity, G: Infinity };
  if (state.detail) {
    if (key === 'escape' || key === 'enter') return { ...state, detail: undefined };
    if (key in move) {
      const scroll = Math.max(0, Math.min(state.detail.scroll + move[key]!, detailLines(state.detail.value).length - 1));
      return { ...state, detail: { ...state.detail, scroll: Number.isFinite(scroll) ? scroll : 0 } };
    }
    return state;
  }
  const items = itemsOf(state);
  if (key in move) {
    if (!items.length) return state;
    return { ...state, selected: { ...state.selected, [state.view]: clamp(state.selected[state.view] + move[key]!, items.length) } };
  }
  if (key === 'enter') {
    const item = items[clamp(state.selected[state.view], items.length)];
    if (item === undefined) return state;
    return { ...state, detail: { title: `${TITLES[state.view]}: ${itemName(state.view, item)}`, value: detailValue(state.view, item), scroll: 0 } };
  }
  if (state.view === 'inbox' && key === 'u') {
    return withStatus({ ...state, unacked: !state.unacked, refresh: true }, state.unacked ? 'showing all decisions…' : 'showing unacknowledged decisions…');
  }
  if (state.view === 'inbox' && key === 'a') {
    const item = items[clamp(state.selected.inbox, items.length)] as Row | undefined;
    if (item === undefined) return state;
    return withStatus({ ...state, ack: cell(item.id) }, `acknowledging ${cell(item.id)}…`);
  }
  return state;
}

function itemName(view: View, item: unknown): string {
  const row = item as Row;
  if (view === 'events') return `${cell(row.topic)} ${cell(row.id)}`;
  return cell(row.id);
}

/** An event's payload arrives as a JSON string: shown parsed. */
function detailValue(view: View, item: unknown): unknown {
  if (view !== 'events') return item;
  const event = item as StreamEvent;
  try {
    return { ...event, payload: JSON.parse(event.payload) };
  } catch {
    return event;
  }
}

function detailLines(value: unknown): string[] {
  return (JSON.stringify(value, null, 2) ?? 'null').split('\n');
}

// ---- state changes from the driver ----

/** A list loaded: the selection stays on the same index, within the new length. */
export function loaded(state: State, view: ListView, rows: Row[]): State {
  return {
    ...state,
    lists: { ...state.lists, [view]: rows },
    loadedOnce: { ...state.loadedOnce, [view]: true },
    selected: { ...state.selected, [view]: rows.length ? clamp(state.selected[view], rows.length) : 0 },
  };
}

/** New events at the bottom; the oldest fall out beyond `max`. A selection on the last event follows new ones. */
export function addEvents(state: State, events: StreamEvent[], max = EVENT_BUFFER): State {
  const following = state.selected.events >= state.events.length - 1;
  const all = [...state.events, ...events];
  const dropped = Math.max(0, all.length - max);
  const kept = all.slice(dropped);
  const selected = following ? kept.length - 1 : Math.max(0, state.selected.events - dropped);
  return { ...state, events: kept, selected: { ...state.selected, events: Math.max(0, selected) } };
}

export function withStatus(state: State, text: string, error = false): State {
  return { ...state, status: { text, error } };
}

/**
 * A message as the status line says it: a refused connection to the hub (whose URL the header shows)
 * is `connection refused`, without the plain commands' `cannot reach URL: connect ECONNREFUSED
 * ADDRESS; is the hub running there? (npm start …)`, which on 80 to 100 columns pushed out the rest
 * of the line (`waiting 3 s`, the lists' own errors).
 */
export function terse(text: string, url: string): string {
  let out = text.split(NOT_RUNNING_HINT).join('');
  const refused = `cannot reach ${url}: connect ECONNREFUSED `;
  for (let at = out.indexOf(refused); at >= 0; at = out.indexOf(refused, at)) {
    const rest = out.slice(at + refused.length);
    out = `${out.slice(0, at)}connection refused${rest.slice(rest.search(/[\s;]|$/))}`;
  }
  return out;
}

/** The status line's text for what a call threw: the hub's message and status, or why it was unreachable. */
function errorStatus(what: string, err: unknown, url: string): string {
  if (err instanceof HttpError) return `${what}: ${err.message} (${answered(err)})`;
  return `${what}: ${terse((err as Error)?.message ?? String(err), url)}`;
}

const clock = (ms: number) => `${new Date(ms).toISOString().slice(11, 19)} UTC`;

/**
 * The longest wait for a list's answer: three refresh periods, at least 10 s, at most the two minutes
 * of the other commands. A hub that takes the connection and never answers is said in the status line
 * then, not after two minutes under the last `updated` time.
 */
export function listTimeout(everyMs: number): number {
  return Math.min(120_000, Math.max(10_000, 3 * everyMs));
}

/**
 * Loads the runs, dead-letter, delivery and inbox lists; a failing call leaves its list as it was,
 * marked stale (as of its last load), and shows the error. `timeoutMs`: the longest wait for each. Never throws.
 */
export async function refreshLists(hub: Hub, state: State, now = Date.now(), timeoutMs?: number): Promise<State> {
  const results = await Promise.all(
    LIST_VIEWS.map(async (view) => {
      try {
        return { view, rows: (await hub.call<Row[]>('GET', ROUTES[view](state), { timeoutMs })).body };
      } catch (err) {
        return { view, error: errorStatus('', err, state.title).slice(2) };
      }
    }),
  );
  let next: State = { ...state, now };
  // One entry per distinct error, naming the lists it hit (an unreachable hub is said once).
  const errors = new Map<string, string[]>();
  for (const r of results) {
    if (r.rows) {
      next = loaded(next, r.view, Array.isArray(r.rows) ? r.rows : []);
      next = { ...next, loadedAt: { ...next.loadedAt, [r.view]: now }, stale: { ...next.stale, [r.view]: false } };
    } else {
      errors.set(r.error!, [...(errors.get(r.error!) ?? []), TITLES[r.view].toLowerCase()]);
      next = { ...next, stale: { ...next.stale, [r.view]: true } };
    }
  }
  const text = [...errors].map(([message, views]) => `${views.join(', ')}: ${message}`).join('; ');
  return errors.size ? withStatus(next, text, true) : withStatus(next, `updated ${clock(now)}`);
}

/** A decision acknowledged (`POST /api/inbox/{id}/ack`): its row replaced by the server's answer, or the hub's error in the status line. Never throws. */
export async function ackInbox(hub: Hub, state: State, id: string): Promise<State> {
  const next: State = { ...state, ack: undefined };
  try {
    const { body } = await hub.call<Row>('POST', `/api/inbox/${encodeURIComponent(id)}/ack`);
    const rows = next.lists.inbox.map((row) => (cell(row.id) === id ? body : row));
    return withStatus(loaded(next, 'inbox', rows), `acknowledged ${id}`);
  } catch (err) {
    return withStatus(next, errorStatus(`ack ${id}`, err, state.title), true);
  }
}

// ---- rendering ----

interface Size {
  columns: number;
  rows: number;
}

interface TuiColumn {
  header: string;
  value: (row: Row, now: number) => string;
  max?: number;
}

const short = (value: unknown) => cell(value).slice(0, 8);
const time = (value: unknown) => (typeof value === 'string' ? value.replace(/\.\d+Z$/, 'Z').replace('T', ' ') : cell(value));

export function duration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return '-';
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  if (ms < 60_000) return `${(ms / 1_000).toFixed(1)}s`;
  const s = Math.floor(ms / 1_000);
  if (s < 3_600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3_600)}h${String(Math.floor(s / 60) % 60).padStart(2, '0')}m`;
}

function runDuration(row: Row, now: number): string {
  const start = Date.parse(String(row.startedAt));
  if (Number.isNaN(start)) return '-';
  const end = typeof row.endedAt === 'string' ? Date.parse(row.endedAt) : now;
  return duration(end - start);
}

const COLUMNS: Record<View, TuiColumn[]> = {
  runs: [
    { header: 'ID', value: (r) => short(r.id) },
    { header: 'CONNECTOR/ENDPOINT', value: (r) => `${cell(r.connector)}/${cell(r.endpoint)}` },
    { header: 'STATUS', value: (r) => cell(r.status) },
    { header: 'IN/OUT/SKIPPED', value: (r) => `${cell(r.recordsIn)}/${cell(r.recordsOut)}/${cell(r.recordsSkipped)}` },
    { header: 'STARTED', value: (r) => time(r.startedAt) },
    { header: 'DURATION', value: runDuration },
    { header: 'ERROR', value: (r) => cell(r.errorMessage) },
  ],
  dlq: [
    { header: 'ID', value: (r) => cell(r.id) },
    { header: 'RUN', value: (r) => short(r.runId) },
    { header: 'REASON', value: (r) => cell(r.skipReason) },
    { header: 'ATTEMPTS', value: (r) => cell(r.attempts) },
    { header: 'RESOLUTION', value: (r) => cell(r.resolution) },
    { header: 'CAPTURED', value: (r) => time(r.capturedAt) },
    { header: 'ERROR', value: (r) => cell(r.errorMessage) },
  ],
  deliveries: [
    { header: 'ID', value: (r) => cell(r.id) },
    { header: 'INTEGRATION', value: (r) => cell(r.integrationId) },
    { header: 'EVENT', value: (r) => cell(r.eventType), max: 32 },
    { header: 'KIND', value: (r) => cell(r.kind) },
    { header: 'ATTEMPTS', value: (r) => cell(r.attempts) },
    { header: 'OK', value: (r) => cell(r.succeeded) },
    { header: 'HTTP', value: (r) => cell(r.http_status) },
    { header: 'CREATED', value: (r) => time(r.createdAt) },
    { header: 'ERROR', value: (r) => cell(r.error ?? r.closedReason) },
  ],
  inbox: [
    { header: 'ID', value: (r) => cell(r.id) },
    { header: 'TYPE', value: (r) => cell(r.type), max: 40 },
    { header: 'MESSAGE', value: (r) => cell(r.message), max: 60 },
    { header: 'CREATED', value: (r) => time(r.createdAt) },
    { header: 'ACKED/BY', value: (r) => (r.ackedAt ? `${time(r.ackedAt)} ${cell(r.ackedBy)}` : '-') },
  ],
  events: [
    { header: 'CAPTURED', value: (r) => time(r.capturedAt) },
    { header: 'ID', value: (r) => cell(r.id) },
    { header: 'TOPIC', value: (r) => cell(r.topic), max: 40 },
    { header: 'PAYLOAD', value: (r) => cell(r.payload) },
  ],
};

const EMPTY: Record<View, string> = { runs: 'No runs.', dlq: 'No dead letters.', deliveries: 'No deliveries.', inbox: 'No decisions.', events: 'Waiting for events…' };

/** Lines and cells are cut to a number of terminal columns (a CJK character or an emoji takes two), with an ellipsis when something was cut. */
export { clipTo };

const ESC = '\x1b[';
/** SGR codes that are colours (red); the others (bold 1, dim 2, reverse 7) are styles. */
const COLOURS = new Set(['31']);

/**
 * The whole screen: exactly `size.rows` lines, each `size.columns` terminal columns wide. Without
 * `color` the lines are plain text; with it they carry SGR codes only (no cursor movement). `color:
 * 'mono'` (NO_COLOR) keeps bold, dim and reverse video (the selected row) but no colour: an error in
 * the status line is bold instead of red.
 */
export function render(state: State, size: Size, options: { color?: boolean | 'mono' } = {}): string[] {
  const color = options.color ?? true;
  const width = Math.max(1, size.columns);
  const height = Math.max(1, size.rows);
  const paint = (code: string, text: string) => {
    if (color === false) return text;
    const shown = color === 'mono' && COLOURS.has(code) ? '1' : code;
    return `${ESC}${shown}m${text}${ESC}0m`;
  };
  const line = (text: string, code?: string) => {
    // one screen line: a tab or newline in a message (the hub's, an unreachable hub's) would move the cursor
    const fitted = pad(clipTo(printable(text.replace(/[\t\n\r]+/g, ' ')), width), width);
    return code ? paint(code, fitted) : fitted;
  };

  const header = line(headerText(state.view, printable(state.title), width), '1');
  const status = state.streamDown ? line(`events: ${state.streamDown} · ${state.status.text}`, '31') : line(state.status.text, state.status.error ? '31' : '2');
  const inboxKeys = state.view === 'inbox' ? `  a ack  u ${state.unacked ? 'all' : 'unacked only'}` : '';
  const help = line(state.detail ? '↑↓/jk scroll  Esc back  q quit' : `1-5/Tab view  ↑↓/jk move  Enter detail${inboxKeys}  r refresh  q quit`, '2');

  const bodyHeight = Math.max(0, height - 3);
  const body = state.detail ? detailBody(state.detail, bodyHeight, line) : listBody(state, bodyHeight, width, line);
  const screen = [header, ...body];
  while (screen.length < height - 2) screen.push(line(''));
  screen.push(status, help);
  return screen.slice(-height);
}

/** The fewest columns the hub's URL is given in the header before the tabs are cut to their numbers. */
const MIN_URL_COLUMNS = 20;

/**
 * The header's text: the views' tabs, then the hub's URL, in `width` columns. The first that fits:
 * the tabs as wide as they are, the whole URL beside them; the tabs packed closer; then the URL
 * elided in its middle (its scheme and host's start, and its end, kept) beside the packed tabs while
 * it keeps MIN_URL_COLUMNS; past that the other views' tabs are their numbers alone (the selected
 * one named), and the URL, elided, has what is left.
 */
export function headerText(view: View, url: string, width: number): string {
  const tabs = (tab: (v: View, i: number) => string) => VIEWS.map((v, i) => (v === view ? `[${i + 1} ${TITLES[v]}]` : tab(v, i))).join(' ');
  const wide = tabs((v, i) => ` ${i + 1} ${TITLES[v]} `);
  if (!url) return wide;
  if (columnsOf(wide) + 2 + columnsOf(url) <= width) return `${wide}  ${url}`;
  const packed = tabs((v, i) => `${i + 1} ${TITLES[v]}`);
  const room = width - columnsOf(packed) - 2;
  if (room >= Math.min(MIN_URL_COLUMNS, columnsOf(url))) return `${packed}  ${elideMiddle(url, room)}`;
  const numbers = tabs((_v, i) => String(i + 1));
  const left = width - columnsOf(numbers) - 2;
  return left > 0 ? `${numbers}  ${elideMiddle(url, left)}` : numbers;
}

function detailBody(detail: NonNullable<State['detail']>, height: number, line: (text: string, code?: string) => string): string[] {
  if (height <= 0) return [];
  const lines = detailLines(detail.value);
  return [line(detail.title, '1'), ...lines.slice(detail.scroll, detail.scroll + height - 1).map((l) => line(l))];
}

function listBody(state: State, height: number, width: number, line: (text: string, code?: string) => string): string[] {
  if (height <= 0) return [];
  const view = state.view;
  const items = itemsOf(state) as Row[];
  const columns = COLUMNS[view];
  const notYet = view !== 'events' && !state.loadedOnce[view];
  const empty = notYet ? (state.status.error ? 'Not loaded yet (the status line says why).' : 'Loading…') : view === 'inbox' && state.unacked ? 'No unacknowledged decisions.' : EMPTY[view];
  // A list whose last refresh failed is still shown, under a line saying how old it is (the status line says why).
  const at = view !== 'events' && state.stale[view] ? state.loadedAt[view] : undefined;
  const stale = at !== undefined && height > 3 ? [line(`stale: as loaded at ${clock(at)}; the last refresh failed (the status line says why)`, '31')] : [];
  if (!items.length) return [...stale, line(columns.map((c) => c.header).join('  '), '1'), line(empty)];
  const cells = items.map((row) => columns.map((c) => clipTo(c.value(row, state.now), c.max ?? width)));
  const widths = columns.map((c, i) => Math.max(columnsOf(c.header), ...cells.map((r) => columnsOf(r[i]!))));
  const join = (values: string[]) => values.map((v, i) => (i === values.length - 1 ? v : pad(v, widths[i]!))).join('  ');
  // A list as long as it was asked for may have more rows at the hub: its last line says so (when there is room for one).
  const cut = view !== 'events' && items.length >= LIMITS[view] && height > 2 ? `(the first ${LIMITS[view]} only; ${MORE[view]} --limit 200 shows more)` : '';
  const visible = height - 1 - stale.length - (cut ? 1 : 0);
  const selected = clamp(state.selected[view], items.length);
  // The window scrolls to keep the selection in the middle; on the last item (new events) it shows the bottom.
  const top = Math.max(0, Math.min(selected - Math.floor(visible / 2), items.length - visible));
  const shown = cells.slice(top, top + visible).map((r, i) => line(join(r), top + i === selected ? '7' : undefined));
  return [...stale, line(join(columns.map((c) => c.header)), '1'), ...shown, ...(cut ? [line(cut, '2')] : [])];
}

// ---- the terminal driver ----

/** `3s`, `500ms`, `1m`, `1h`, or seconds as a bare number; from 0.5 s to an hour. */
export function parseEvery(text: string): number {
  return durationOption('--every', text, [500, '500ms'], [3_600_000, '1h (3600s)']);
}

interface Terminal {
  isTTY?: boolean;
  columns?: number;
  rows?: number;
  write(text: string): unknown;
  on(event: 'resize', listener: () => void): unknown;
  off(event: 'resize', listener: () => void): unknown;
}

/** How long without input ends a paste or an escape sequence cut off by the end of a read (KeyReader.flush). */
const CUT_OFF_MS = 300;

/** `wait`: how the event stream waits before reconnecting (tests pass one that does not sleep). */
export async function runTui(c: Ctx, options: { wait?: Wait } = {}): Promise<number> {
  // the command line is checked first: a wrong one is exit 2 with its usage, terminal or not
  const every = parseEvery((c.opts.every as string | undefined) ?? '3s');
  const timeout = listTimeout(every);
  const stdin = c.io.stdin;
  const stdout = c.io.stdout as Partial<Terminal>;
  if (!stdin.isTTY || !stdout.isTTY || typeof stdin.setRawMode !== 'function' || typeof stdout.on !== 'function') {
    c.err('svc tui: needs an interactive terminal (stdin and stdout must be a TTY); in scripts use svc runs ls, svc dlq ls, svc deliveries ls, svc events tail\n');
    return 2;
  }
  if (dumbTerminal(c.io.env)) {
    c.err('svc tui: needs a terminal that can move the cursor, and TERM=dumb says this one cannot; use svc runs ls, svc dlq ls, svc deliveries ls, svc inbox ls, svc events tail\n');
    return 2;
  }
  const color = colourWanted(c.io.env) ? true : 'mono';
  const topics = (c.opts.topic as string[] | undefined) ?? [];
  const term = stdout as Terminal;
  const hub = c.hub();
  let state = initialState(hub.target.url);

  const stream = new AbortController();
  const stopStream = () => stream.abort();
  c.signal.addEventListener('abort', stopStream, { once: true });
  let timer: NodeJS.Timeout | undefined;
  let restored = false;
  const restore = () => {
    if (restored) return;
    restored = true;
    try {
      stdin.setRawMode!(false);
    } catch {
      // the terminal is gone
    }
    term.write(`${ESC}?2004l${ESC}0m${ESC}?25h${ESC}?1049l`);
  };
  process.once('exit', restore);

  let finish: () => void = () => undefined;
  let fail: (err: unknown) => void = () => undefined;
  const done = new Promise<void>((resolve, reject) => {
    finish = resolve;
    fail = reject;
  });

  const draw = () => {
    if (restored) return;
    const lines = render({ ...state, now: Date.now() }, { columns: term.columns ?? 80, rows: term.rows ?? 24 }, { color });
    term.write(`${ESC}H${lines.join(`${ESC}K\r\n`)}${ESC}K`);
  };
  const guard =
    <A extends unknown[]>(fn: (...args: A) => void) =>
    (...args: A) => {
      try {
        fn(...args);
      } catch (err) {
        fail(err);
      }
    };

  let loading = false;
  /** A refresh asked for while one was loading (e.g. the inbox filter toggled): run once more after it. */
  let again = false;
  const refresh = async () => {
    if (loading) {
      again = true;
      return;
    }
    loading = true;
    again = false;
    try {
      const next = await refreshLists(hub, state, Date.now(), timeout);
      // keys pressed while loading are kept: only the lists, clock and status come from the load
      state = { ...state, lists: next.lists, loadedOnce: next.loadedOnce, loadedAt: next.loadedAt, stale: next.stale, selected: { ...state.selected, ...pick(next.selected) }, status: next.status, now: next.now };
      draw();
    } catch (err) {
      fail(err);
    } finally {
      loading = false;
      if (again) void refresh();
    }
  };
  const pick = (s: State['selected']) => ({ runs: s.runs, dlq: s.dlq, deliveries: s.deliveries, inbox: s.inbox });
  const ack = async (id: string) => {
    try {
      const next = await ackInbox(hub, state, id);
      // only the inbox and the status come from the call: keys pressed meanwhile are kept
      state = { ...state, lists: { ...state.lists, inbox: next.lists.inbox }, status: next.status };
      draw();
    } catch (err) {
      fail(err);
    }
  };

  const press = (keys: string[]) => {
    for (const key of keys) {
      state = reduce(state, key);
      if (state.quit) return finish();
      if (state.refresh) {
        state = { ...state, refresh: false };
        void refresh();
      }
      if (state.ack !== undefined) {
        const id = state.ack;
        state = { ...state, ack: undefined };
        void ack(id);
      }
    }
    draw();
  };
  const reader = new KeyReader();
  /** A sequence or a paste cut off by the end of a read is given up after this long without input (a terminal that never ends its paste cannot hold the keys). */
  let cutOff: NodeJS.Timeout | undefined;
  const onData = guard((data: Buffer | string) => {
    clearTimeout(cutOff);
    press(reader.feed(typeof data === 'string' ? data : data.toString('utf8')));
    if (reader.waiting()) cutOff = setTimeout(guard(() => press(reader.flush())), CUT_OFF_MS);
  });
  const onResize = guard(draw);
  const onSignal = () => finish();

  try {
    // bracketed paste on: a paste comes as one (PASTE_START … PASTE_END), never as keys
    term.write(`${ESC}?1049h${ESC}?25l${ESC}?2004h${ESC}2J`);
    stdin.setRawMode(true);
    stdin.setEncoding('utf8');
    stdin.on('data', onData);
    stdin.resume();
    term.on('resize', onResize);
    process.once('SIGTERM', onSignal);
    c.signal.addEventListener('abort', onSignal, { once: true });
    draw();
    void refresh();
    timer = setInterval(() => void refresh(), every);
    // The stream is retried as `svc events tail` retries a lost one, from the start too; while it is
    // down the status line says so (state.streamDown), whatever the list refreshes write there.
    tailEvents(hub, {
      topics,
      signal: stream.signal,
      retryFirst: true,
      wait: options.wait,
      // the stream's head is waited for as long as a list's answer
      openTimeoutMs: timeout,
      onEvent: guard((event: StreamEvent) => {
        state = addEvents(state, [event]);
        draw();
      }),
      onNotice: guard((text: string) => {
        state = { ...state, streamDown: terse(text, hub.target.url) };
        draw();
      }),
      onConnected: guard(() => {
        if (state.streamDown === undefined) return;
        state = withStatus({ ...state, streamDown: undefined }, 'events: the stream is back');
        draw();
      }),
    }).catch(
      guard((err: unknown) => {
        if (stream.signal.aborted) return;
        state = { ...state, streamDown: `${errorStatus('stopped', err, hub.target.url)}; restart svc tui to retry` };
        draw();
      }),
    );
    await done;
    return 0;
  } finally {
    clearInterval(timer);
    clearTimeout(cutOff);
    stream.abort();
    stdin.off('data', onData);
    stdin.pause();
    term.off('resize', onResize);
    process.off('SIGTERM', onSignal);
    process.off('exit', restore);
    c.signal.removeEventListener('abort', onSignal);
    c.signal.removeEventListener('abort', stopStream);
    restore();
  }
}
