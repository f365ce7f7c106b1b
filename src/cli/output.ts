import stringWidth from 'string-width';
import { stringify } from 'yaml';
import { KUBECTL_YAML } from '../manifests/yaml.js';

/** The one output formatter of `svc`: aligned tables and YAML details for people, JSON for scripts. */

export type Row = Record<string, unknown>;

export interface Column {
  header: string;
  value: (row: Row) => unknown;
  /** Longer cells are cut with an ellipsis (messages, descriptions). */
  max?: number;
}

/** A column showing one field of the record. */
export function field(header: string, key: string, max?: number): Column {
  return { header, value: (row) => row[key], max };
}

export function table(rows: Row[], columns: Column[]): string {
  const cells = rows.map((row) => columns.map((c) => clip(cell(c.value(row)), c.max)));
  const widths = columns.map((c, i) => Math.max(columnsOf(c.header), ...cells.map((r) => columnsOf(r[i]!))));
  const line = (values: string[]) =>
    values
      .map((v, i) => (i === values.length - 1 ? v : padTo(v, widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[line(columns.map((c) => c.header)), ...cells.map(line)].join('\n')}\n`;
}

/** One value as a table cell: `-` for nothing, lists joined with commas, objects as JSON; control characters shown, never sent as they are. */
export function cell(value: unknown): string {
  if (value === null || value === undefined || value === '') return '-';
  if (Array.isArray(value)) return value.length ? printable(value.map((v) => (typeof v === 'object' ? JSON.stringify(v) : String(v))).join(',')) : '-';
  if (typeof value === 'object') return printable(JSON.stringify(value));
  return printable(String(value).replace(/\s+/g, ' '));
}

/** C0 and C1 control characters but tab and newline, and DEL; and the invisible format characters (Unicode's Cf: bidi overrides and isolates, zero-width characters, the BOM, …). */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the control characters are what it finds
const SHOWN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]|\p{Cf}/gu;

const graphemes = new Intl.Segmenter(undefined, { granularity: 'grapheme' });
const PICTOGRAPHIC = /^\p{Extended_Pictographic}/u;
const ZWJ = '\u200d';
const BLACK_FLAG = '\u{1f3f4}';
/** The tag characters that spell a subdivision flag (🏴 followed by gbeng and its cancel tag). */
const JOINERS = /[\u200d\u{e0020}-\u{e007f}]/u;
const isTag = (ch: string) => ch.codePointAt(0)! >= 0xe0020 && ch.codePointAt(0)! <= 0xe007f;

/**
 * Text for a terminal, written as `\x1b`, `\x07`, … where it holds a control character but a tab or a
 * newline, and as `\u202e`, `\u200b`, … (`\u{e0041}` beyond four digits) where it holds an invisible
 * format character. What people read comes from the hub (a description, a run's error, a decision's
 * message that other users of the tenant wrote, or a remote system's text): as it was, an escape
 * sequence in it would be obeyed by the terminal (colours, a cleared screen, a window title, the
 * clipboard), a bidi override or isolate would reorder what follows so that one name reads as another,
 * a zero-width character would make two different names look the same, and columns counted without
 * them would no longer line up. An emoji's own joiners stay: the zero-width joiner inside one emoji
 * (👩‍💻) and the tag characters of a subdivision flag.
 */
export function printable(text: string): string {
  if (!JOINERS.test(text)) return text.replace(SHOWN, escaped);
  let out = '';
  for (const { segment } of graphemes.segment(text)) out += PICTOGRAPHIC.test(segment) ? emojiShown(segment) : segment.replace(SHOWN, escaped);
  return out;
}

/** One emoji grapheme: its inner joiners (and a black flag's tags) kept, any other format character shown. */
function emojiShown(segment: string): string {
  const points = [...segment];
  const flag = points[0] === BLACK_FLAG;
  return points.map((ch, i) => ((ch === ZWJ && i < points.length - 1) || (flag && isTag(ch)) ? ch : ch.replace(SHOWN, escaped))).join('');
}

function escaped(ch: string): string {
  const code = ch.codePointAt(0)!;
  if (code <= 0x9f) return `\\x${code.toString(16).padStart(2, '0')}`;
  return code <= 0xffff ? `\\u${code.toString(16).padStart(4, '0')}` : `\\u{${code.toString(16)}}`;
}

/** A record for people: its fields as YAML, nested values included. */
export function detail(value: unknown): string {
  return stringify(value, { ...KUBECTL_YAML, lineWidth: 0 });
}

/**
 * For scripts: the hub's JSON, same content and key order, indented by two spaces. `JSON.stringify`
 * escapes the C0 controls only; DEL, the C1 controls (U+009B is a CSI a terminal may obey) and the
 * format characters (bidi overrides and isolates, zero-width characters) are written as `\uXXXX`
 * escapes too, so that `--json` to a terminal obeys none and reorders nothing: the same JSON value,
 * as a parser reads it. They can only stand inside a string of the text.
 */
export function json(value: unknown): string {
  return `${JSON.stringify(value ?? null, null, 2).replace(JSON_SHOWN, jsonEscaped)}\n`;
}

/** As `json`, on one line (`svc events tail --json`: one object per line). */
export function jsonLine(value: unknown): string {
  return `${JSON.stringify(value ?? null).replace(JSON_SHOWN, jsonEscaped)}\n`;
}

const JSON_SHOWN = /[\u007f-\u009f]|\p{Cf}/gu;

/** A character as JSON's `\uXXXX` escapes (a pair of them beyond the BMP). */
function jsonEscaped(ch: string): string {
  let out = '';
  for (let i = 0; i < ch.length; i++) out += `\\u${ch.charCodeAt(i).toString(16).padStart(4, '0')}`;
  return out;
}

function clip(text: string, max: number | undefined): string {
  return max ? clipTo(text, max) : text;
}

// ---- terminal columns: a CJK character or an emoji takes two, a combining mark none ----

/** How many terminal columns `text` takes (string-width, grapheme by grapheme). */
export function columnsOf(text: string): number {
  let n = 0;
  for (const { segment } of graphemes.segment(text)) n += stringWidth(segment);
  return n;
}

/** An escape `printable` writes for a character it shows: `\x1b`, `\u202e`, `\u{e0041}`. */
const ESCAPE = /\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\u\{[0-9a-f]+\}/g;

/**
 * What a cut keeps or gives up whole, with its columns: each escape `printable` wrote (half of one,
 * `\u20…`, would read as other text) and each grapheme of the text around them.
 */
function* pieces(text: string): Generator<{ segment: string; w: number }> {
  let at = 0;
  for (const shown of text.matchAll(ESCAPE)) {
    for (const { segment } of graphemes.segment(text.slice(at, shown.index))) yield { segment, w: stringWidth(segment) };
    yield { segment: shown[0], w: shown[0].length };
    at = shown.index + shown[0].length;
  }
  for (const { segment } of graphemes.segment(text.slice(at))) yield { segment, w: stringWidth(segment) };
}

/** `text` cut to at most `width` columns, ending with `…` when something was cut; never half a wide character, a grapheme or an escape. */
export function clipTo(text: string, width: number): string {
  if (columnsOf(text) <= width) return text;
  if (width <= 0) return '';
  let out = '';
  let used = 0;
  for (const { segment, w } of pieces(text)) {
    if (used + w > width - 1) break;
    out += segment;
    used += w;
  }
  return `${out}…`;
}

/**
 * `text` in at most `width` columns, its middle given up for `…` when it does not fit: its start and
 * its end stay (a URL's scheme and host, and its port and path). Never half a wide character, a grapheme or an escape.
 */
export function elideMiddle(text: string, width: number): string {
  if (columnsOf(text) <= width) return text;
  if (width <= 1) return width === 1 ? '…' : '';
  const parts = [...pieces(text)];
  const room = width - 1;
  let head = '';
  let used = 0;
  for (const part of parts) {
    if (used + part.w > Math.ceil(room / 2)) break;
    head += part.segment;
    used += part.w;
  }
  let tail = '';
  for (let i = parts.length - 1; i >= 0; i--) {
    const part = parts[i]!;
    if (used + part.w > room) break;
    tail = part.segment + tail;
    used += part.w;
  }
  return `${head}…${tail}`;
}

/** `text` followed by spaces up to `width` columns. */
export function padTo(text: string, width: number): string {
  return text + ' '.repeat(Math.max(0, width - columnsOf(text)));
}
