/**
 * Keys as a terminal in raw mode sends them (`svc tui`, the hidden prompt of a credential): escape
 * sequences read as one key each, Alt and a key as one, and a bracketed paste as its text.
 */

const SEQUENCES: Record<string, string> = {
  '\x1b[A': 'up',
  '\x1bOA': 'up',
  '\x1b[B': 'down',
  '\x1bOB': 'down',
  '\x1b[C': 'right',
  '\x1b[D': 'left',
  '\x1b[5~': 'pageup',
  '\x1b[6~': 'pagedown',
  '\x1b[H': 'home',
  '\x1bOH': 'home',
  '\x1b[1~': 'home',
  '\x1b[F': 'end',
  '\x1bOF': 'end',
  '\x1b[4~': 'end',
  '\x1b[Z': 'shift-tab',
};

/** Bracketed paste (xterm's mode 2004, which runTui turns on): the terminal sends a paste between these. */
const PASTE_START = '\x1b[200~';
const PASTE_END = '\x1b[201~';
/** A paste is one key, `paste:` and its text: no key of the TUI is bound to it, so pasted text never acts (a `q` or a newline in it). */
export const PASTE = 'paste:';
/** Names of the keys that send one control character. */
export const CONTROL_KEYS: Readonly<Record<string, string>> = { '\r': 'enter', '\n': 'enter', '\t': 'tab', '\x03': 'ctrl-c' };

/**
 * What the terminal sent in raw mode, as key names: `up`, `enter`, `escape`, `ctrl-c`, `q`, `alt-q`
 * (ESC and a character: no key of the UI is bound to one), `paste:TEXT`, … A terminal sends a key's sequence in one write, but a read may still end inside
 * one, and a long paste comes in several reads: what is cut off at the end of a read is kept for the
 * next (`feed`), and given up after a moment without input (`flush`).
 */
export class KeyReader {
  /** The start of an escape sequence cut off at the end of the last read. */
  private pending = '';
  /** The text of a paste whose end has not come yet. */
  private paste: string | undefined;

  /** The keys of the next read. */
  feed(data: string): string[] {
    const keys: string[] = [];
    let text = this.pending + data;
    this.pending = '';
    let i = 0;
    while (i < text.length) {
      if (this.paste !== undefined) {
        // (the end marker may have been cut between two reads: searched from before the new text)
        const from = this.paste.length;
        const joined = this.paste + text.slice(i);
        const end = joined.indexOf(PASTE_END, Math.max(0, from - PASTE_END.length + 1));
        if (end < 0) {
          this.paste = joined;
          return keys;
        }
        keys.push(PASTE + joined.slice(0, end));
        this.paste = undefined;
        text = joined.slice(end + PASTE_END.length);
        i = 0;
        continue;
      }
      const ch = text[i]!;
      if (ch !== '\x1b') {
        const char = String.fromCodePoint(text.codePointAt(i)!);
        keys.push(CONTROL_KEYS[char] ?? char);
        i += char.length;
        continue;
      }
      if (text.startsWith(PASTE_START, i)) {
        this.paste = '';
        i += PASTE_START.length;
        continue;
      }
      const sequence = sequenceAt(text, i);
      if (sequence === 'cut') {
        this.pending = text.slice(i);
        return keys;
      }
      if (sequence) {
        if (sequence.key) keys.push(sequence.key);
        i += sequence.length;
        continue;
      }
      // ESC and a sequence, or ESC and one character: the key with Alt (the terminal's "meta sends escape")
      const next = text[i + 1];
      if (next === undefined) {
        keys.push('escape');
        i++;
        continue;
      }
      // (Esc and a paste in one read: Esc, then the paste)
      const inner = next === '\x1b' && !text.startsWith(PASTE_START, i + 1) ? sequenceAt(text, i + 1) : undefined;
      if (inner === 'cut') {
        this.pending = text.slice(i);
        return keys;
      }
      if (inner) {
        if (inner.key) keys.push(`alt-${inner.key}`);
        i += 1 + inner.length;
        continue;
      }
      if (next < ' ' || next === '\x7f') {
        // Esc and a control character (Esc twice, Esc and Ctrl-C: Ctrl-C always quits), each on its own
        keys.push('escape');
        i++;
        continue;
      }
      const char = String.fromCodePoint(text.codePointAt(i + 1)!);
      keys.push(`alt-${char}`);
      i += 1 + char.length;
    }
    return keys;
  }

  /** Whether a sequence or a paste was cut off by the end of the last read (the driver then calls `flush` after a moment without input). */
  waiting(): boolean {
    return this.pending !== '' || this.paste !== undefined;
  }

  /**
   * No more input came: a paste whose end never came ends here (its text a paste still, never keys),
   * and a sequence cut off is what the keys typed were: Alt-[ or Alt-O (`\x1b[`, `\x1bO` alone), else nothing.
   */
  flush(): string[] {
    const keys: string[] = [];
    if (this.paste !== undefined) keys.push(PASTE + this.paste);
    else if (this.pending === '\x1b[' || this.pending === '\x1bO') keys.push(`alt-${this.pending[1]}`);
    this.paste = undefined;
    this.pending = '';
    return keys;
  }
}

/**
 * The escape sequence at `i` (which is ESC): a key's (`key` unset for a key that is not bound:
 * F1-F12, Insert, Delete, Ctrl-arrows, which were read as Esc and closed the detail pane), `cut`
 * when the text ends inside it, undefined when ESC begins none (Esc, or Alt and a key).
 */
function sequenceAt(text: string, i: number): { key?: string; length: number } | 'cut' | undefined {
  const seq = Object.keys(SEQUENCES).find((s) => text.startsWith(s, i));
  if (seq) return { key: SEQUENCES[seq]!, length: seq.length };
  const introducer = text[i + 1];
  if (introducer === '[') {
    // CSI: parameters up to a final letter or ~ (the linux console's F1-F5 are `\x1b[[A`…)
    let j = i + 2;
    while (j < text.length && !/[A-Za-z~]/.test(text[j]!)) j++;
    return j < text.length ? { length: j + 1 - i } : 'cut';
  }
  if (introducer === 'O') return i + 2 < text.length ? { length: 3 } : 'cut'; // SS3: F1-F4
  return undefined;
}

/** The keys of `data` read at once (a whole input: what is cut off at its end is flushed). */
export function decodeKeys(data: string): string[] {
  const reader = new KeyReader();
  return [...reader.feed(data), ...reader.flush()];
}
