import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { afterAll, describe, expect, it } from '@jest/globals';
import { startDemoSource } from '../demo-source/server.js';
import { packageRoot } from '../package-root.js';
import { startTestHub, type TestHub } from '../../test/harness/hub.js';
import { until } from '../../test/harness/until.js';
import { describeRequiring } from '../../test/harness/requires.js';
import { startTmux, type TmuxSession, tmuxProblem } from '../../test/harness/tmux.js';
import type { Ctx } from './context.js';
import { HttpError } from './errors.js';
import type { StreamEvent } from './event-tail.js';
import { Hub } from './http.js';
import { runSvc } from '../../test/harness/svc-cli.js';
import { columnsOf, elideMiddle, printable, type Row } from './output.js';
import { DATABASE_UNREACHABLE } from '../../apiserver/routes/events/event-stream.js';
import { ackInbox, addEvents, clipTo, decodeKeys, duration, initialState, KeyReader, listTimeout, loaded, PASTE, parseEvery, reduce, refreshLists, render, runTui, type State, withStatus } from './tui.js';

/**
 * `svc tui`: render and reduce as pure functions, the runs view loaded from a real hub, and the
 * real `node bin/svc.js tui` in a real terminal (tmux) acknowledging a decision of the inbox view.
 */

const SIZE = { columns: 100, rows: 12 };
const NOW = Date.parse('2025-03-01T10:00:30Z');

function run(i: number, extra: Row = {}): Row {
  return {
    id: `${String(i).padStart(8, '0')}-aaaa-bbbb-cccc-dddddddddddd`,
    connector: 'crm',
    endpoint: `ep${i}`,
    status: 'Completed',
    recordsIn: 10 * i,
    recordsOut: 10 * i,
    recordsSkipped: 0,
    startedAt: '2025-03-01T10:00:00.123Z',
    endedAt: '2025-03-01T10:00:12.623Z',
    ...extra,
  };
}

function decision(i: number, extra: Row = {}): Row {
  return { id: String(i), eventId: String(100 + i), type: 'decision.approval.needed', message: `approve order ${i}`, payload: {}, createdAt: '2025-03-01T10:00:00.5Z', ackedAt: null, ackedBy: null, ...extra };
}

function withRuns(n: number): State {
  return loaded(initialState('http://hub', NOW), 'runs', Array.from({ length: n }, (_, i) => run(i + 1)));
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the escape character is what it finds
const SGR = /\x1b\[([0-9;]*)m/g;
/** The colour codes among the SGR sequences of `text` (30-38, 40-48, 90-107), but the defaults (39, 49) tmux writes itself. */
const colours = (text: string) =>
  [...text.matchAll(SGR)].flatMap((m) => m[1]!.split(';').map(Number)).filter((n) => (n >= 30 && n <= 48 && n !== 39) || (n >= 90 && n <= 107));

const keys = (state: State, ...pressed: string[]) => pressed.reduce(reduce, state);
const plain = (state: State, size = SIZE) => render(state, size, { color: false });

describe('reduce', () => {
  it('switches views with 1-5, Tab and Shift-Tab', () => {
    const s = initialState();
    expect(s.view).toBe('runs');
    expect(keys(s, '2').view).toBe('dlq');
    expect(keys(s, '4').view).toBe('events');
    expect(keys(s, '5').view).toBe('inbox');
    expect(keys(s, 'tab', 'tab').view).toBe('deliveries');
    expect(keys(s, 'tab', 'tab', 'tab', 'tab').view).toBe('inbox');
    expect(keys(s, 'tab', 'tab', 'tab', 'tab', 'tab').view).toBe('runs');
    expect(keys(s, 'shift-tab').view).toBe('inbox');
  });

  it('inbox: u toggles unacknowledged only (and asks for a refresh), a asks to acknowledge the selected decision', () => {
    const s = loaded(keys(initialState(), '5'), 'inbox', [decision(3), decision(2, { ackedAt: '2025-03-01T10:00:20Z', ackedBy: 'alice' }), decision(1)]);
    expect(keys(s, 'u')).toMatchObject({ unacked: true, refresh: true });
    expect(keys(s, 'u', 'u').unacked).toBe(false);
    expect(keys(s, 'down', 'down', 'a').ack).toBe('1');
    expect(keys(s, 'a').status.text).toBe('acknowledging 3…');
    expect(keys(loaded(s, 'inbox', []), 'a').ack).toBeUndefined(); // nothing selected
    // elsewhere the keys do nothing
    expect(keys(withRuns(2), 'u', 'a')).toMatchObject({ unacked: false, refresh: false });
    expect(keys(withRuns(2), 'a').ack).toBeUndefined();
  });

  it('keeps the selection within the list, per view', () => {
    const s = withRuns(3);
    expect(keys(s, 'up', 'k').selected.runs).toBe(0);
    expect(keys(s, 'down', 'j', 'down', 'down', 'down').selected.runs).toBe(2);
    expect(keys(s, 'end').selected.runs).toBe(2);
    expect(keys(s, 'end', 'home').selected.runs).toBe(0);
    expect(keys(s, 'pagedown').selected.runs).toBe(2);
    expect(keys(s, 'down', '2', 'down').selected).toMatchObject({ runs: 1, dlq: 0 }); // an empty list stays at 0
    expect(loaded(keys(s, 'end'), 'runs', [run(1)]).selected.runs).toBe(0); // a shorter reload clamps it
  });

  it('Enter opens the selected item as JSON, Esc closes it; q and Ctrl-C quit, r asks for a refresh', () => {
    const s = keys(withRuns(3), 'down', 'enter');
    expect(s.detail).toMatchObject({ title: 'Runs: 00000002-aaaa-bbbb-cccc-dddddddddddd', value: { endpoint: 'ep2' } });
    expect(keys(s, 'escape').detail).toBeUndefined();
    expect(keys(s, 'escape').selected.runs).toBe(1);
    expect(keys(initialState(), 'enter').detail).toBeUndefined(); // nothing to show
    expect(keys(s, 'q').quit).toBe(true);
    expect(keys(initialState(), 'ctrl-c').quit).toBe(true);
    expect(keys(initialState(), 'r').refresh).toBe(true);
  });

  it('decodes raw terminal input into keys', () => {
    expect(decodeKeys('\x1b[A\x1b[Bjk\r\t\x1b[Z\x1b\x03q1')).toEqual(['up', 'down', 'j', 'k', 'enter', 'tab', 'shift-tab', 'escape', 'ctrl-c', 'q', '1']);
  });

  it('a key that is not bound does nothing: F1-F12, Insert, Delete, Ctrl-arrows are not Esc (they left the detail pane)', () => {
    // F1 (SS3), F5, Insert, Delete, Ctrl-Up, Shift-F1 (xterm), F1 (linux console)
    const unbound = ['\x1bOP', '\x1b[15~', '\x1b[2~', '\x1b[3~', '\x1b[1;5A', '\x1b[1;2P', '\x1b[[A'];
    for (const sequence of unbound) expect({ sequence, keys: decodeKeys(sequence) }).toEqual({ sequence, keys: [] });
    const open = keys(withRuns(3), 'enter');
    expect(open.detail).toBeDefined();
    expect(unbound.flatMap(decodeKeys).reduce(reduce, open).detail).toBeDefined();
    expect(decodeKeys(`\x1bOPj\x1b[2~\x1b`)).toEqual(['j', 'escape']);
  });

  it('Alt and a key (ESC and the character) is one key, bound to nothing: Alt-q does not quit, Alt-1 switches no view', () => {
    expect(decodeKeys('\x1bq\x1b1\x1bj\x1br\x1bé\x1b\u{1f600}')).toEqual(['alt-q', 'alt-1', 'alt-j', 'alt-r', 'alt-é', 'alt-\u{1f600}']);
    // Alt and an arrow (ESC ESC [ A) is one key too; Esc and a control character stay two (Ctrl-C always quits)
    expect(decodeKeys('\x1b\x1b[A\x1b\x1b\x1b\x03')).toEqual(['alt-up', 'escape', 'escape', 'escape', 'ctrl-c']);
    const open = keys(withRuns(3), 'enter');
    const after = decodeKeys('\x1bq\x1b1\x1bj\x1br\x1b\x1b[B').reduce(reduce, open);
    expect(after).toEqual(open);
  });

  it('a bracketed paste is one key, its text: a q, digits, Tab or newlines in it never act', () => {
    const text = 'q\r1\n2\tr\x03 Ünïcödé 😀';
    expect(decodeKeys(`j\x1b[200~${text}\x1b[201~k`)).toEqual(['j', `${PASTE}${text}`, 'k']);
    // Esc and a paste read at once
    expect(decodeKeys(`\x1b\x1b[200~${text}\x1b[201~`)).toEqual(['escape', `${PASTE}${text}`]);
    const open = keys(withRuns(3), 'enter');
    const state = withRuns(3);
    for (const start of [state, open]) expect(decodeKeys(`\x1b[200~${text}\x1b[201~`).reduce(reduce, start)).toEqual(start);
  });

  it('a paste or a sequence cut between reads is put together; what never ends is given up as a paste, never as keys', () => {
    const reader = new KeyReader();
    // the paste in three reads, its end marker cut in the middle; then a key
    expect(reader.feed('\x1b[200~q\r')).toEqual([]);
    expect(reader.waiting()).toBe(true);
    expect(reader.feed('1\x1b[20')).toEqual([]);
    expect(reader.feed('1~j')).toEqual([`${PASTE}q\r1`, 'j']);
    expect(reader.waiting()).toBe(false);
    // an arrow's sequence cut after ESC [
    expect(reader.feed('\x1b[')).toEqual([]);
    expect(reader.feed('B')).toEqual(['down']);
    // the paste's start marker cut
    expect(reader.feed('\x1b[20')).toEqual([]);
    expect(reader.feed('0~qq')).toEqual([]);
    // a paste whose end never comes: flushed (after a moment without input) as a paste still
    expect(reader.flush()).toEqual([`${PASTE}qq`]);
    expect(reader.feed('q')).toEqual(['q']);
    // Alt-[ alone: a CSI that never ends
    expect(reader.feed('\x1b[')).toEqual([]);
    expect(reader.flush()).toEqual(['alt-[']);
    expect(reader.waiting()).toBe(false);
  });
});

describe('render', () => {
  it('draws exactly the terminal size: header, table, status line, keys', () => {
    const lines = plain(withRuns(3));
    expect(lines).toHaveLength(SIZE.rows);
    for (const line of lines) expect(Array.from(line)).toHaveLength(SIZE.columns);
    expect(lines[0]).toMatch(/^\[1 Runs\] {2}2 Dead letters {3}3 Deliveries {3}4 Events {3}5 Inbox {3}http:\/\/hub/);
    expect(lines[1]).toMatch(/^ID\s+CONNECTOR\/ENDPOINT\s+STATUS\s+IN\/OUT\/SKIPPED\s+STARTED\s+DURATION/);
    expect(lines[2]).toMatch(/^00000001\s+crm\/ep1\s+Completed\s+10\/10\/0\s+2025-03-01 10:00:00Z\s+12\.5s/);
    expect(lines[SIZE.rows - 2]).toMatch(/^loading…/);
    expect(lines[SIZE.rows - 1]).toMatch(/^1-5\/Tab view {2}↑↓\/jk move {2}Enter detail {2}r refresh/);
  });

  it('the header fits the width: the hub\'s URL whole where it fits, else elided in its middle (its start and end kept), never cut off at its end; the selected view always named', () => {
    const urls = ['http://127.0.0.1:8080', 'https://svc-hub.integration.example.com:8443/base'];
    for (const url of urls) {
      for (const columns of [100, 80, 79, 70, 61, 60, 40, 30]) {
        for (const view of ['1', '2', '4']) {
          const s = keys(loaded(initialState(url, NOW), 'runs', [run(1)]), view);
          const [header] = plain(s, { columns, rows: 8 });
          const shown = header!.trimEnd();
          expect(columnsOf(header!)).toBe(columns);
          expect(shown).toMatch(view === '1' ? /^\[1 Runs\]/ : view === '2' ? /\[2 Dead letters\]/ : /\[4 Events\]/);
          // The URL: its scheme and its end are there, whatever is elided between them.
          const text = shown.slice(shown.lastIndexOf('  ') + 2);
          expect(text.startsWith('ht')).toBe(true);
          expect(url.endsWith(text.slice(text.indexOf('…') + 1))).toBe(true);
          expect(text === url || text.includes('…')).toBe(true);
          if (text !== url) expect(url.startsWith(text.slice(0, text.indexOf('…')))).toBe(true);
        }
      }
    }
    // At 80 columns a hub on loopback is shown whole, beside every view's name.
    expect(plain(withRuns(1), { columns: 80, rows: 8 })[0]).toBe(`[1 Runs]  2 Dead letters   3 Deliveries   4 Events   5 Inbox   http://hub${' '.repeat(7)}`);
    expect(plain(loaded(initialState(urls[0], NOW), 'runs', []), { columns: 80, rows: 8 })[0]!.trimEnd()).toBe('[1 Runs] 2 Dead letters 3 Deliveries 4 Events 5 Inbox  http://127.0.0.1:8080');
    expect(plain(loaded(initialState(urls[1], NOW), 'runs', []), { columns: 80, rows: 8 })[0]).toBe('[1 Runs] 2 Dead letters 3 Deliveries 4 Events 5 Inbox  https://svc-…om:8443/base');
    expect(plain(loaded(initialState(urls[1], NOW), 'runs', []), { columns: 40, rows: 8 })[0]).toBe('[1 Runs] 2 3 4 5  https://svc…:8443/base');
    expect(elideMiddle('日本語テキスト', 6)).toBe('日…ト'); // never half a wide character
    expect(elideMiddle('abcdefgh', 5)).toBe('ab…gh');
    expect(elideMiddle('abc', 5)).toBe('abc');
  });

  it('a running run counts its duration up to now', () => {
    const s = loaded(initialState('', NOW), 'runs', [run(1, { status: 'Running', endedAt: null })]);
    expect(plain(s)[2]).toMatch(/Running\s+10\/10\/0\s+\S+ \S+\s+29\.9s/);
  });

  it('cuts every line to the width with an ellipsis, and colours only with SGR codes', () => {
    const s = loaded(withRuns(2), 'runs', [run(1, { errorMessage: 'x'.repeat(300) })]);
    const narrow = plain(s, { columns: 40, rows: 8 });
    for (const line of narrow) expect(Array.from(line).length).toBeLessThanOrEqual(40);
    expect(narrow[2]).toMatch(/^00000001\s+crm\/ep1\s+Completed…$/);
    expect(clipTo('abcdef', 4)).toBe('abc…');

    const coloured = render(s, { columns: 40, rows: 8 });
    expect(coloured[2]).toContain('\x1b[7m'); // the selection in reverse video
    const stripped = coloured.map((l) => l.split('\x1b[').map((part, i) => (i === 0 ? part : part.replace(/^[0-9;]*m/, ''))).join(''));
    expect(stripped).toEqual(narrow);
  });

  it('NO_COLOR (mono): bold, dim and reverse video stay, no colour; an error in the status line is bold instead of red', () => {
    const s = withStatus(withRuns(2), 'runs: database unavailable (HTTP 503)', true);
    const mono = render(s, SIZE, { color: 'mono' });
    expect(colours(mono.join('\n'))).toEqual([]);
    expect(mono[2]).toContain('\x1b[7m'); // the selection still shows
    expect(mono[SIZE.rows - 2]!.startsWith('\x1b[1mruns: database unavailable')).toBe(true);
    expect(render(s, SIZE)[SIZE.rows - 2]!.startsWith('\x1b[31m')).toBe(true);
  });

  it('shows control characters in the hub\'s text as \\x1b, … (the terminal would obey them): only render\'s own SGR codes reach it', () => {
    const s = withStatus(loaded(withRuns(2), 'runs', [run(1, { errorMessage: 'boom \x1b[2J\x1b]0;pwned\x07 \x9b31m' }), run(2)]), 'runs: \x1b[31mrefused\x07\n\tfor good (HTTP 500)', true);
    const wide = { columns: 160, rows: 12 };
    const lines = plain(s, wide);
    expect(printable(lines.join(''))).toBe(lines.join('')); // nothing left to show otherwise
    expect(lines[2]).toContain('boom \\x1b[2J\\x1b]0;pwned\\x07 \\x9b31m');
    expect(lines.at(-2)).toContain('runs: \\x1b[31mrefused\\x07 for good (HTTP 500)');
    expect(lines.join('')).not.toMatch(/[\t\n]/);
    for (const line of lines) expect(columnsOf(line)).toBe(wide.columns);
    // biome-ignore lint/suspicious/noControlCharactersInRegex: render's own SGR codes, taken out
    const coloured = render(s, wide).join('').replace(/\u001b\[[0-9;]*m/g, '');
    expect(printable(coloured)).toBe(coloured);
  });

  it('shows invisible format characters in the hub\'s text as \\u202e, \\u200b, … (a bidi override would reorder the line), counted as shown', () => {
    const s = withStatus(loaded(withRuns(2), 'runs', [run(1, { errorMessage: 'boom \u202Eexe.fdp\u202C \u200B\u2066x\u2069' }), run(2)]), 'runs: \u202Erefused\uFEFF', true);
    const wide = { columns: 160, rows: 12 };
    const lines = plain(s, wide);
    expect(printable(lines.join(''))).toBe(lines.join(''));
    expect(lines[2]).toContain('boom \\u202eexe.fdp\\u202c \\u200b\\u2066x\\u2069');
    expect(lines.at(-2)).toContain('runs: \\u202erefused\\ufeff');
    for (const line of lines) expect(columnsOf(line)).toBe(wide.columns);
  });

  it('counts terminal columns: CJK and emoji take two, are never cut in half, and the columns stay aligned', () => {
    expect(clipTo('日本語テキスト', 6)).toBe('日本…');
    expect(clipTo('日本語テキスト', 7)).toBe('日本語…');
    expect(clipTo('👍👍👍', 4)).toBe('👍…');
    expect(clipTo('e\u0301te\u0301', 2)).toBe('e\u0301…'); // a combining accent stays with its letter
    expect(clipTo('日本', 4)).toBe('日本');
    const rows = [run(1, { connector: '顧客データ', errorMessage: '接続がタイムアウトしました'.repeat(10) }), run(2, { connector: '🚀🚀', errorMessage: 'ok 👍' }), run(3)];
    const s = loaded(initialState('http://hub', NOW), 'runs', rows);
    for (const size of [SIZE, { columns: 61, rows: 8 }, { columns: 62, rows: 8 }]) {
      const lines = plain(s, size);
      for (const line of lines) expect(columnsOf(line)).toBe(size.columns);
      // STATUS begins at the same column on the header and on every row
      const at = (line: string, text: string) => columnsOf(line.slice(0, line.indexOf(text)));
      expect([at(lines[2]!, 'Completed'), at(lines[3]!, 'Completed'), at(lines[4]!, 'Completed')]).toEqual([at(lines[1]!, 'STATUS'), at(lines[1]!, 'STATUS'), at(lines[1]!, 'STATUS')]);
    }
  });

  it('a list as long as the rows it asked for says it shows only those, and which command shows more', () => {
    const size = { columns: 80, rows: 8 };
    expect(plain(withRuns(49), size).join('\n')).not.toContain('only');
    const lines = plain(withRuns(50), size);
    // the rows, then the note above the status line, whatever the selection
    expect(lines[4]).toMatch(/^00000003 /);
    expect(lines[5]).toMatch(/^\(the first 50 only; svc runs ls --limit 200 shows more\) *$/);
    expect(plain(keys(withRuns(50), 'end'), size)[5]).toMatch(/^\(the first 50 only;/);
    expect(plain(keys(withRuns(50), 'end'), size)[4]).toMatch(/^00000050 /);
    const dlq = loaded(keys(initialState('', NOW), '2'), 'dlq', Array.from({ length: 100 }, (_, i) => ({ id: i + 1 })));
    expect(plain(dlq, size)[5]).toMatch(/^\(the first 100 only; svc dlq ls --limit 200 shows more\)/);
  });

  it('scrolls so the selection stays visible', () => {
    const s = keys(withRuns(50), 'end');
    const lines = plain(s);
    expect(lines.some((l) => l.startsWith('00000050'))).toBe(true);
    expect(lines.some((l) => l.startsWith('00000001'))).toBe(false);
  });

  it('shows the detail pane with the JSON and scrolls it', () => {
    const s = keys(withRuns(2), 'enter');
    const lines = plain(s);
    expect(lines[1]).toMatch(/^Runs: 00000001-aaaa/);
    expect(lines[2]).toMatch(/^\{ +$/);
    expect(lines[3]).toMatch(/^ {2}"id": "00000001-aaaa-bbbb-cccc-dddddddddddd", +$/);
    expect(lines[SIZE.rows - 1]).toMatch(/^↑↓\/jk scroll {2}Esc back/);
    expect(plain(keys(s, 'down'))[2]).toMatch(/^ {2}"id"/);
  });

  it('shows an HTTP error in the status line, and the lists that did load', async () => {
    const failing = {
      call: async (_method: string, route: string) => {
        if (route.startsWith('/api/platform/dlq?')) throw new HttpError(503, 'database unavailable', { error: 'database unavailable' });
        return { status: 200, body: route.startsWith('/api/platform/runs?') ? [run(1)] : [] };
      },
    } as unknown as Hub;
    const s = await refreshLists(failing, initialState(), NOW);
    expect(s.status).toEqual({ text: 'dead letters: database unavailable (HTTP 503)', error: true });
    const lines = plain(s);
    expect(lines[2]).toMatch(/^00000001/);
    expect(lines[SIZE.rows - 2]).toMatch(/^dead letters: database unavailable \(HTTP 503\) +$/);
    expect(render(s, SIZE)[SIZE.rows - 2]!.startsWith('\x1b[31m')).toBe(true);
    expect((await refreshLists({ call: async () => ({ status: 200, body: [] }) } as unknown as Hub, s, NOW)).status).toEqual({ text: 'updated 10:00:30 UTC', error: false });
    // The same failure of every list is said once, naming the lists.
    const down = { call: async () => { throw new Error('cannot reach http://127.0.0.1:9 (ECONNREFUSED)'); } } as unknown as Hub;
    expect((await refreshLists(down, s, NOW)).status).toEqual({ text: 'runs, dead letters, deliveries, inbox: cannot reach http://127.0.0.1:9 (ECONNREFUSED)', error: true });
    // A list that never loaded does not say the hub has nothing: the dead letters here, every list of a hub down from the start.
    expect(plain(keys(s, '2'))[2]).toMatch(/^Not loaded yet \(the status line says why\)\. +$/);
    const never = await refreshLists(down, initialState(), NOW);
    for (const key of ['1', '2', '3', '5']) expect(plain(keys(never, key))[2]).toMatch(/^Not loaded yet \(the status line says why\)\. +$/);
    expect(plain(initialState())[2]).toMatch(/^Loading… +$/);
    expect(plain(keys(s, '3'))[2]).toMatch(/^No deliveries\. +$/);
  });

  it('events: newest at the bottom, a bounded buffer, the selection follows new ones', () => {
    const event = (i: number): StreamEvent => ({ id: String(i), topic: 'connector.run.completed', payload: `{"n":${i}}`, capturedAt: '2025-03-01T10:00:00Z' });
    let s = keys(initialState(), '4');
    expect(plain(s)[2]).toMatch(/^Waiting for events…/);
    for (let i = 1; i <= 30; i++) s = addEvents(s, [event(i)], 20);
    expect(s.events.map((e) => e.id)).toEqual(Array.from({ length: 20 }, (_, i) => String(i + 11)));
    expect(s.selected.events).toBe(19);
    const lines = plain(s);
    expect(lines[SIZE.rows - 3]).toMatch(/^2025-03-01 10:00:00Z\s+30\s+connector\.run\.completed\s+\{"n":30\}/);
    s = keys(s, 'up');
    s = addEvents(s, [event(31)], 20);
    expect(s.events[s.selected.events]!.id).toBe('29'); // a selection moved away stays on its event
    expect(keys(s, 'enter').detail?.value).toMatchObject({ id: '29', payload: { n: 29 } });
  });

  it('inbox: the decisions with who acknowledged them; the keys; the filter picks the route', async () => {
    const s = loaded(keys(initialState('', NOW), '5'), 'inbox', [decision(2, { ackedAt: '2025-03-01T10:00:20.1Z', ackedBy: 'alice' }), decision(1)]);
    const lines = plain(s, { columns: 120, rows: 8 });
    expect(lines[1]).toMatch(/^ID\s+TYPE\s+MESSAGE\s+CREATED\s+ACKED\/BY/);
    expect(lines[2]).toMatch(/^2\s+decision\.approval\.needed\s+approve order 2\s+2025-03-01 10:00:00Z\s+2025-03-01 10:00:20Z alice/);
    expect(lines[3]).toMatch(/^1\s+decision\.approval\.needed\s+approve order 1\s+2025-03-01 10:00:00Z\s+- +$/);
    expect(lines[7]).toMatch(/Enter detail {2}a ack {2}u unacked only {2}r refresh/);
    expect(plain(loaded(keys(s, 'u'), 'inbox', []))[2]).toMatch(/^No unacknowledged decisions\./);
    expect(plain(loaded(s, 'inbox', []))[2]).toMatch(/^No decisions\./);

    const routes: string[] = [];
    const recording = {
      call: async (_method: string, route: string) => {
        routes.push(route);
        return { status: 200, body: [] };
      },
    } as unknown as Hub;
    await refreshLists(recording, s, NOW);
    await refreshLists(recording, keys(s, 'u'), NOW);
    expect(routes.filter((r) => r.startsWith('/api/inbox'))).toEqual(['/api/inbox?limit=50', '/api/inbox?acked=false&limit=50']);
    expect(routes.slice(0, 3)).toEqual(['/api/platform/runs?limit=50', '/api/platform/dlq?limit=100', '/api/platform/deliveries?limit=50']);
  });

  it('inbox: an ack replaces the row with the server\'s answer; a refusal shows the hub\'s message', async () => {
    const s = keys(loaded(keys(initialState('', NOW), '5'), 'inbox', [decision(2), decision(1)]), 'down', 'a');
    const calls: string[] = [];
    const ok = {
      call: async (method: string, route: string) => {
        calls.push(`${method} ${route}`);
        return { status: 200, body: decision(1, { ackedAt: '2025-03-01T10:00:29Z', ackedBy: 'bob' }) };
      },
    } as unknown as Hub;
    const acked = await ackInbox(ok, s, s.ack!);
    expect(calls).toEqual(['POST /api/inbox/1/ack']);
    expect(acked.ack).toBeUndefined();
    expect(acked.lists.inbox.map((r) => r.ackedBy)).toEqual([null, 'bob']);
    expect(acked.selected.inbox).toBe(1);
    expect(acked.status).toEqual({ text: 'acknowledged 1', error: false });
    expect(plain(acked, { columns: 120, rows: 8 })[3]).toMatch(/2025-03-01 10:00:29Z bob +$/);

    const refusing = { call: async () => { throw new HttpError(404, 'inbox item 1 not found', { error: 'inbox item 1 not found' }); } } as unknown as Hub;
    const refused = await ackInbox(refusing, s, '1');
    expect(refused.status).toEqual({ text: 'ack 1: inbox item 1 not found (HTTP 404)', error: true });
    expect(refused.lists.inbox).toEqual(s.lists.inbox);
    expect(render(refused, SIZE)[SIZE.rows - 2]!.startsWith('\x1b[31m')).toBe(true);
  });

  it('formats durations and parses --every', () => {
    expect([duration(850), duration(12_500), duration(245_000), duration(3_725_000)]).toEqual(['850ms', '12.5s', '4m05s', '1h02m']);
    expect([parseEvery('3s'), parseEvery('500ms'), parseEvery('1m'), parseEvery('2')]).toEqual([3000, 500, 60_000, 2000]);
    expect(() => parseEvery('fast')).toThrow('--every must be a duration');
    expect(() => parseEvery('10ms')).toThrow('at least 500ms');
    // a timer's delay beyond 2^31 ms fires at once: an hour at most
    expect([parseEvery('1h'), parseEvery('3600'), parseEvery('60m')]).toEqual([3_600_000, 3_600_000, 3_600_000]);
    expect(() => parseEvery('3000000')).toThrow('--every must be at most 1h (3600s)');
    expect(() => parseEvery('61m')).toThrow('at most 1h');
    expect(withStatus(initialState(), 'x', true).status).toEqual({ text: 'x', error: true });
  });
});

describe('svc tui: the command line', () => {
  async function svc(args: string[]) {
    const { code, err } = await runSvc(args, { env: { SVC_URL: 'http://127.0.0.1:9', SVC_CLI_CONFIG: '/nonexistent/svc-config.json' } });
    return { code, first: err.split('\n')[0] };
  }

  it('a --every beyond an hour, or negative, is svc\'s usage error (exit 2), terminal or not', async () => {
    expect(await svc(['tui', '--every', '3000000'])).toEqual({ code: 2, first: "svc tui: --every must be at most 1h (3600s), not '3000000'" });
    expect(await svc(['tui', '--every', '-1'])).toEqual({ code: 2, first: "svc tui: --every must be a duration like 3s, 500ms or 1m, not '-1'" });
    expect(await svc(['runs', 'ls', '--limit', '-1'])).toEqual({ code: 2, first: "svc runs ls: --limit must be a positive integer, not '-1'" });
    // a good one gets as far as the terminal check
    expect(await svc(['tui', '--every', '1h'])).toEqual({ code: 2, first: expect.stringContaining('needs an interactive terminal') });
  });

  it('--json, which a terminal UI cannot honour, is a usage error (exit 2), before or after the command, and its help does not offer it', async () => {
    for (const args of [['tui', '--json'], ['--json', 'tui']]) {
      expect(await svc(args)).toEqual({ code: 2, first: 'svc tui: --json is for scripts, and svc tui has no JSON to print: svc runs ls --json, svc events tail --json, …' });
    }
    const { code, out: help } = await runSvc(['tui', '--help']);
    expect(code).toBe(0);
    expect(help).toContain('--every DURATION');
    expect(help).not.toContain('--json');
  });
});

describe('the driver: the event stream while it is down', () => {
  /**
   * runTui on a stand-in terminal (stdin a stream, stdout a recorder) against a scripted hub: the
   * lists answer [] at once; the event stream answers 503 first, then streams one event and ends,
   * then 401. The wait before each reconnection is held by the test.
   */
  it('retries a stream it cannot open, keeps saying it is down across list refreshes, clears it when it is back; a 401 stops it for good, said the same way', async () => {
    let streams = 0;
    let lists = 0;
    let open: ServerResponse | undefined;
    const server = createServer((req, res) => {
      if (!req.url!.startsWith('/api/platform/events/stream')) {
        lists++;
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end('[]');
      }
      streams++;
      if (streams === 1) {
        res.writeHead(503, { 'content-type': 'application/json', 'retry-after': '4' });
        return void res.end('{"error":"database unavailable"}');
      }
      if (streams === 2) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`retry: 10\n\nid: 5\ndata: ${JSON.stringify({ topic: 'org.created', payload: '{}', capturedAt: '2025-03-01T10:00:00Z' })}\n\n`);
        open = res; // ended by the test
        return;
      }
      res.writeHead(401, { 'content-type': 'text/plain' });
      res.end('Unauthorized');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const waits: number[] = [];
    let release: () => void = () => undefined;
    const tui = drive(url, {
      columns: 160,
      rows: 10,
      every: '500ms',
      wait: (ms) => {
        waits.push(ms);
        // the first wait is held until the test releases it; the others pass at once
        return waits.length > 1 ? Promise.resolve() : new Promise<void>((resolve) => (release = resolve));
      },
    });
    const statusLine = tui.statusLine;
    try {
      await until('the first wait', () => waits.length === 1, { detail: statusLine });
      expect(waits).toEqual([4_000]); // the 503's Retry-After
      // two refreshes of the lists later, the status line still says the stream is down
      const seen = lists;
      await until('two refreshes', () => lists >= seen + 8 && /updated \d\d:\d\d:\d\d UTC/.test(statusLine()), { detail: statusLine });
      expect(statusLine()).toMatch(/^events: cannot open the stream: database unavailable \(HTTP 503, Retry-After: 4\); waiting 4 s, then reconnecting · updated \d\d:\d\d:\d\d UTC/);
      release();
      await until('the stream back', () => streams === 2 && !statusLine().startsWith('events: cannot'), { detail: statusLine });
      expect(statusLine()).toMatch(/^events: the stream is back {2}|^updated /);
      // the hub ends the stream; the reconnection is refused for good (401), and that stays in view
      open!.end();
      await until('the stream stopped', () => streams === 3 && statusLine().startsWith('events: stopped'), { detail: statusLine });
      const stoppedFrom = tui.statuses.length - 1;
      const refreshed = lists;
      await until('two more refreshes', () => lists >= refreshed + 8);
      // The marker: a frame drawn after them (the last refresh's, or a later one).
      const frames = tui.statuses.length;
      await until('a frame after the refreshes', () => tui.statuses.length > frames);
      for (const status of tui.statuses.slice(stoppedFrom)) {
        expect(status).toMatch(/^events: stopped: Unauthorized; the stored token was refused \(expired\?\): svc login again \(HTTP 401\); restart svc tui to retry · /);
      }
      await expect(tui.quit()).resolves.toBe(0);
      // the terminal restored: bracketed paste (turned on at the start) off, main screen
      expect(tui.last()).toBe('\x1b[?2004l\x1b[0m\x1b[?25h\x1b[?1049l');
    } finally {
      await tui.quit();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('against a real hub', () => {
  let hub: TestHub | undefined;
  let demo: Awaited<ReturnType<typeof startDemoSource>> | undefined;

  afterAll(async () => {
    await hub?.stop();
    await demo?.close();
  });

  it('loads the runs of a connector applied with svc apply and renders them', async () => {
    demo = await startDemoSource({ port: 0, host: '127.0.0.1', rows: 30, log: () => undefined });
    hub = await startTestHub();
    const env = { SVC_URL: hub.url, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: '/nonexistent/svc-tui-test.json' };
    const svc = (args: string[], stdin = '') => runSvc(args, { stdin, env });
    const manifest = readFileSync(join(packageRoot(), 'examples', 'open.yaml'), 'utf8').replace('http://demo-source:8099', demo.url);
    expect(await svc(['apply', '-f', '-'], manifest)).toEqual({ code: 0, out: 'connector/demo-open created\n', err: '' });
    expect((await svc(['connectors', 'run', 'demo-open', '--wait'])).code).toBe(0);

    const client = new Hub({ url: hub.url, devTenant: '1' });
    try {
      const state = await refreshLists(client, initialState(hub.url));
      expect(state.status.error).toBe(false);
      expect(state.lists.runs).toHaveLength(1);
      const lines = render(state, { columns: 120, rows: 10 }, { color: false });
      expect(lines[0]).toContain(hub.url);
      expect(lines[2]).toMatch(/^[0-9a-f]{8}\s+demo-open\/open-partners\s+Completed\s+30\/30\/0\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ\s+\d/);
      expect(plain(keys(state, '2'))[2]).toMatch(/^No dead letters\./);

      // without the dev tenant the hub refuses: the status line says so, nothing throws
      const anonymous = new Hub({ url: hub.url });
      try {
        const refused = await refreshLists(anonymous, state);
        expect(refused.status.error).toBe(true);
        expect(refused.status.text).toMatch(/\(HTTP 40[13]\)/);
        expect(refused.lists.runs).toHaveLength(1); // what was loaded stays
      } finally {
        await anonymous.close();
      }
    } finally {
      await client.close();
    }
  });
});

describeRequiring(tmuxProblem(), 'tmux', 'svc tui in a real terminal (tmux)', () => {
  let hub: TestHub | undefined;
  let client: Hub | undefined;
  let tmux: TmuxSession | undefined;

  afterAll(async () => {
    tmux?.kill();
    await client?.close();
    await hub?.stop();
  });

  it('shows the inbox, filters it to unacknowledged decisions and acknowledges one with a', async () => {
    hub = await startTestHub();
    const { services } = hub;
    // Two decisions of tenant 1, through the EventWriter (which fills the inbox) in a transaction.
    await services.db.withTenant(1, async (tx) => {
      await services.events.emit(tx, 'decision.order.review', { process: 'orders', message: 'Approve order 41', sourceEventId: 1, sourceType: 'org.updated' });
      await services.events.emit(tx, 'decision.order.review', { process: 'orders', message: 'Approve order 42', sourceEventId: 2, sourceType: 'org.updated' });
    });
    client = new Hub({ url: hub.url, devTenant: '1' });
    const inbox = async () => (await client!.call<Row[]>('GET', '/api/inbox')).body;
    const before = await inbox();
    expect(before.map((r) => [r.message, r.ackedAt])).toEqual([
      ['Approve order 42', null],
      ['Approve order 41', null],
    ]);
    const id41 = String(before[1]!.id);

    const session = startTmux({
      command: `'${process.execPath}' bin/svc.js tui`,
      cwd: packageRoot(),
      env: { SVC_URL: hub.url, SVC_DEV_TENANT: '1', SVC_CLI_CONFIG: '/nonexistent/svc-tui-tmux-test.json' },
      columns: 160,
      rows: 40,
    });
    tmux = session;
    const row = (screen: string, message: string) => screen.split('\n').find((l) => l.includes(message));

    await session.waitFor((screen) => /\[1 Runs\]/.test(screen) && /updated \d\d:\d\d:\d\d UTC/.test(screen));
    session.sendKeys('5');
    // The whole view drawn, its key line included (a capture may come between two lines' redraws).
    let screen = await session.waitFor((s) => s.includes('[5 Inbox]') && s.includes('Approve order 41') && /a ack {2}u unacked only/.test(s));
    expect(screen).toMatch(/^ID\s+TYPE\s+MESSAGE\s+CREATED\s+ACKED\/BY/m);
    expect(screen.indexOf('Approve order 42')).toBeLessThan(screen.indexOf('Approve order 41')); // newest first
    expect(row(screen, 'Approve order 41')).toMatch(new RegExp(`^${id41}\\s+decision\\.order\\.review\\s+Approve order 41\\s+\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\dZ\\s+-\\s*$`));
    expect(screen).toMatch(/a ack {2}u unacked only/);

    // the second row (order 41), then a: the row shows when and by whom, the status line says so
    session.sendKeys('Down');
    session.sendKeys('a');
    screen = await session.waitFor((s) => s.includes(`acknowledged ${id41}`));
    expect(row(screen, 'Approve order 41')).toMatch(/Approve order 41\s+\S+ \S+Z\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ \S+\s*$/);
    expect(row(screen, 'Approve order 42')).toMatch(/\s-\s*$/);

    // the hub agrees
    const after = await inbox();
    expect(after.find((r) => String(r.id) === id41)).toMatchObject({ message: 'Approve order 41', ackedAt: expect.any(String) });
    expect(after.find((r) => r.message === 'Approve order 42')).toMatchObject({ ackedAt: null, ackedBy: null });

    // u: only the unacknowledged decision is left; u again: both
    session.sendKeys('u');
    screen = await session.waitFor((s) => s.includes('Approve order 42') && !s.includes('Approve order 41') && s.includes('u all'));
    session.sendKeys('u');
    await session.waitFor((s) => s.includes('Approve order 41') && s.includes('u unacked only'));

    // q quits, back on the main screen
    session.sendKeys('q');
    await until('svc tui to quit', () => session.ended(), { timeoutMs: 15_000, detail: () => session.capture().join('\n') });
    expect(session.capture().join('\n')).not.toContain('[5 Inbox]');
  });
});

describeRequiring(tmuxProblem(), 'tmux', 'svc tui in a real terminal (tmux): NO_COLOR and TERM=dumb', () => {
  const sessions: TmuxSession[] = [];
  afterAll(() => {
    for (const session of sessions) session.kill();
  });
  /** svc tui against a hub that cannot be reached: its status line is an error at once. */
  const tui = (prefix: string, env: Record<string, string> = {}) => {
    const session = startTmux({
      command: `${prefix}'${process.execPath}' bin/svc.js tui; echo "exit $?"`,
      cwd: packageRoot(),
      env: { SVC_URL: 'http://127.0.0.1:9', SVC_CLI_CONFIG: '/nonexistent/svc-tui-tmux-colour.json', ...env },
      columns: 120,
      rows: 12,
    });
    sessions.push(session);
    return session;
  };
  const statusRow = (screen: string) => screen.split('\n').find((l) => l.includes('connection refused'))!;

  it('colours the error red; with NO_COLOR set no colour reaches the terminal, the selection and bold stay; TERM=dumb is refused (exit 2)', async () => {
    const coloured = tui('');
    const normal = await coloured.waitFor((s) => s.includes('connection refused') && s.includes('q quit'), 15_000, true);
    expect(statusRow(normal)).toContain('\x1b[31m');

    const mono = tui('', { NO_COLOR: '1' });
    const screen = await mono.waitFor((s) => s.includes('connection refused') && s.includes('q quit'), 15_000, true);
    expect(colours(screen)).toEqual([]);
    expect(statusRow(screen)).toContain('\x1b[1m');
    expect(screen.split('\n')[0]).toContain('\x1b[1m'); // the header is bold

    // An empty NO_COLOR is not set (no-color.org)
    const empty = tui('', { NO_COLOR: '' });
    expect(statusRow(await empty.waitFor((s) => s.includes('connection refused') && s.includes('q quit'), 15_000, true))).toContain('\x1b[31m');

    // (an empty line first: tmux scrolls a dead pane's first line away)
    const dumb = tui('echo; TERM=dumb ');
    const refused = await dumb.waitFor((s) => /exit \d/.test(s));
    expect(refused.replace(/\n/g, '')).toContain('svc tui: needs a terminal that can move the cursor, and TERM=dumb says this one cannot'); // as the terminal wrapped it
    expect(refused).toMatch(/exit 2/);
    for (const session of [coloured, mono, empty]) session.sendKeys('q');
    for (const session of [coloured, mono, empty]) await until('svc tui to quit', () => session.ended(), { timeoutMs: 15_000, detail: () => session.capture().join('\n') });
  });

  it('a paste (bracketed) never acts, whatever it holds; Alt and a key is no key of the UI; the keys go on working', async () => {
    // (an empty line first: tmux scrolls a dead pane's first line away)
    const session = tui('echo; ');
    const header = (screen: string) => screen.split('\n')[0]!;
    await session.waitFor((s) => s.includes('connection refused') && s.includes('q quit'));
    // a q, a view's digit, r and newlines pasted: typed, they would quit
    session.paste('2\nr\nq\n');
    session.sendKeys('M-q', 'M-2');
    // keys typed after them are read: 4 is the Events view
    session.sendKeys('4');
    const screen = await session.waitFor((s) => /\[4 Events\]/.test(header(s)));
    expect(session.ended()).toBe(false);
    expect(screen).toContain('q quit');
    session.sendKeys('q');
    await until('svc tui to quit', () => session.ended(), { timeoutMs: 15_000, detail: () => session.capture().join('\n') });
    expect(session.capture().join('\n')).toMatch(/exit 0/);
  });
});

/**
 * runTui on a stand-in terminal (stdin a stream, stdout a recorder of frames) against `url`: the lines
 * of the last frame, without their SGR codes; the last write; quit (q, then the hub closed), its exit code.
 */
function drive(url: string, options: { columns: number; rows: number; every: string; wait?: (ms: number) => Promise<unknown> }) {
  let frame = '';
  let last = '';
  /** Every frame's status line, in order. */
  const statuses: string[] = [];
  const stdin = Object.assign(new PassThrough(), { isTTY: true, setRawMode: () => undefined });
  const write = (text: string) => {
    if (text.startsWith('\x1b[H')) {
      frame = text;
      statuses.push(statusLine());
    }
    last = text;
  };
  const stdout = { isTTY: true, columns: options.columns, rows: options.rows, write, on: () => undefined, off: () => undefined };
  const hub = new Hub({ url, token: 'tok' });
  const controller = new AbortController();
  const ctx = {
    args: [],
    opts: { every: options.every },
    json: false,
    io: { stdin, stdout, stderr: stdout, env: {} },
    signal: controller.signal,
    configFile: '',
    hub: () => hub,
    out: () => undefined,
    err: () => undefined,
  } as unknown as Ctx;
  const running = runTui(ctx, { wait: options.wait });
  function lines() {
    return frame.split('\x1b[K\r\n').map((l) => l.split('\x1b[').map((part, i) => (i === 0 ? part : part.replace(/^[0-9;?]*[A-Za-z]/, ''))).join(''));
  }
  function statusLine() {
    return lines()[lines().length - 2]!;
  }
  let quitting: Promise<number> | undefined;
  const quit = () => {
    quitting ??= (async () => {
      stdin.write('q');
      try {
        return await running;
      } finally {
        controller.abort();
        await hub.close();
      }
    })();
    return quitting;
  };
  return { lines, statusLine, statuses, last: () => last, quit };
}

describe('the driver: a hub that is down or hangs', () => {
  it('a hub whose database is away (its streams end at once): the status line says the stream is down once, and back once it is live again, not at each attempt', async () => {
    let streams = 0;
    const held: ServerResponse[] = [];
    const server = createServer((req, res) => {
      if (!req.url!.startsWith('/api/platform/events/stream')) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end('[]');
      }
      streams++;
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' });
      // the first stream: live, an event, then the hub ends it; then three outage answers; then live for good
      if (streams === 1) return void res.end(`retry: 3000\n: connected; heartbeat 15000\n\nid: 1\ndata: ${JSON.stringify({ topic: 'org.created', payload: '{}', capturedAt: '2025-03-01T10:00:00Z' })}\n\n`);
      if (streams <= 4) return void res.end(DATABASE_UNREACHABLE);
      res.write('retry: 3000\n: connected; heartbeat 15000\n\n');
      held.push(res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const tui = drive(url, { columns: 200, rows: 10, every: '1s', wait: async () => undefined });
    try {
      await until('the live stream', () => streams === 5 && tui.statusLine().startsWith('events: the stream is back'), { detail: () => tui.statuses.join('\n') });
      const down = (line: string) => line.startsWith('events: the hub closed the stream');
      // down once (the first stream's end), back once (the fifth stream)
      const changes = tui.statuses.filter((line, i) => i > 0 && down(line) !== down(tui.statuses[i - 1]!));
      expect(changes.map((line) => (down(line) ? 'down' : 'back'))).toEqual(['down', 'back']);
      expect(tui.statuses.filter(down).some((line) => line.includes('database unavailable'))).toBe(true);
    } finally {
      await tui.quit();
      for (const res of held) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('a hub that takes the connection and never answers: the status line says so within 3 refresh periods (at least 10 s), the lists stay shown, marked stale', async () => {
    let lists = 0;
    const hanging: ServerResponse[] = [];
    /** When the first request left unanswered came. */
    let hungSince = Number.NaN;
    const server = createServer((req, res) => {
      // the event stream is open (and quiet: its own hang is the next test's); the first load answers,
      // from then on the hub takes the request and never answers
      if (req.url!.startsWith('/api/platform/events/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(': connected\n\n');
        return void hanging.push(res);
      }
      if (lists++ < 4) {
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end(req.url!.startsWith('/api/platform/runs') ? JSON.stringify([{ id: 'run-aaaa1111', connector: 'partner', endpoint: 'orgs', status: 'Completed' }]) : '[]');
      }
      if (Number.isNaN(hungSince)) hungSince = performance.now();
      hanging.push(res);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const tui = drive(url, { columns: 160, rows: 10, every: '1s' });
    try {
      await until('the first load', () => /^updated \d\d:\d\d:\d\d UTC/.test(tui.statusLine()), { detail: tui.statusLine });
      const loadedAt = /updated (\d\d:\d\d:\d\d UTC)/.exec(tui.statusLine())![1]!;
      await until('the refresh given up', () => tui.statusLine().includes('sent no answer'), { timeoutMs: 25_000, detail: tui.statusLine });
      // listTimeout(1 s) is 10 s: the refresh is given up 10 s (undici's timer: to 11 s) after its request came (not
      // after the first load: a loaded machine may start it late), and well before the two minutes of a plain command.
      const waited = performance.now() - hungSince;
      expect(waited).toBeGreaterThanOrEqual(listTimeout(1_000) - 1_000);
      expect(waited).toBeLessThan(1.5 * listTimeout(1_000));
      expect(tui.statusLine()).toMatch(new RegExp(`^runs, dead letters, deliveries, inbox: ${url.replace(/\./g, '\\.')} took the connection but sent no answer within 10 s *$`));
      const body = tui.lines();
      expect(body[1]).toBe(`stale: as loaded at ${loadedAt}; the last refresh failed (the status line says why)`.padEnd(160));
      expect(body[2]).toMatch(/^ID +CONNECTOR\/ENDPOINT/);
      expect(body[3]).toMatch(/^run-aaaa +partner\/orgs +Completed/);
    } finally {
      await tui.quit();
      for (const res of hanging) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }, 30_000);

  it('a hub that takes the stream\'s connection and never answers, and stalls the lists\' bodies after their heads: both said in the status line within 3 refresh periods (at least 10 s), the stream then reconnected', async () => {
    let lists = 0;
    let streams = 0;
    const hanging: ServerResponse[] = [];
    /** When the stream's first request, and the first list stalled after its head, came. */
    let streamAt = Number.NaN;
    let stalledAt = Number.NaN;
    const server = createServer((req, res) => {
      hanging.push(res);
      if (req.url!.startsWith('/api/platform/events/stream')) {
        if (streams++ === 0) streamAt = performance.now();
        return;
      }
      // the first load answers; from then on each list's head comes, then its body stalls
      res.writeHead(200, { 'content-type': 'application/json' });
      if (lists++ < 4) return void res.end('[]');
      if (Number.isNaN(stalledAt)) stalledAt = performance.now();
      res.write('[');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const waits: number[] = [];
    const tui = drive(url, { columns: 400, rows: 10, every: '1s', wait: async (ms) => void waits.push(ms) });
    try {
      await until('the stream and a refresh given up', () => tui.statusLine().includes('sent no answer') && tui.statusLine().includes('nothing of its body'), { timeoutMs: 25_000, detail: tui.statusLine });
      // listTimeout(1 s) is 10 s, for the stream's head as for the lists (undici's timer: to 11 s), not the two minutes of a
      // plain command: timed from the requests' coming (the earlier for the least, the later for the most).
      const now = performance.now();
      expect(now - Math.min(streamAt, stalledAt)).toBeGreaterThanOrEqual(listTimeout(1_000) - 1_000);
      expect(now - Math.max(streamAt, stalledAt)).toBeLessThan(1.5 * listTimeout(1_000));
      expect(tui.statusLine().trimEnd()).toBe(
        `events: cannot open the stream: ${url} took the connection but sent no answer within 10 s; waiting 3 s, then reconnecting · runs, dead letters, deliveries, inbox: ${url} sent the head of its answer but then nothing of its body within 10 s`,
      );
      // a failed connection like any other: waited out, then tried again
      await until('the stream reconnected', () => streams === 2, { detail: () => String(streams) });
      expect(waits).toEqual([3_000]);
    } finally {
      await tui.quit();
      for (const res of hanging) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }, 40_000);

  it('a hub that is down: at 80 columns the status line says the stream is waiting, without the plain commands\' "is the hub running there?" hint', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const url = `http://127.0.0.1:${port}`;
    const waits: number[] = [];
    const tui = drive(url, {
      columns: 80,
      rows: 8,
      every: '500ms',
      wait: (ms) => {
        waits.push(ms);
        return new Promise(() => undefined); // never: the test looks at the line while the stream waits
      },
    });
    try {
      await until('the stream waiting', () => waits.length === 1 && tui.statusLine().startsWith('events:'), { detail: tui.statusLine });
      const status = tui.statusLine();
      // a refused connection is said in two words (the header names the URL as far as the width allows): the wait fits in 80 columns
      expect(status).toBe('events: cannot open the stream: connection refused; waiting 3 s, then reconnect…');
      // the header names the hub whole beside the views (it was cut short at 80 columns)
      expect(tui.lines()[0]!.trimEnd()).toBe(`[1 Runs] 2 Dead letters 3 Deliveries 4 Events 5 Inbox  ${url}`);
    } finally {
      await tui.quit();
    }
  });
});
