import { randomBytes } from 'node:crypto';

/** A fence's random token: 24 hex digits, new for each question. */
export function fenceToken(): string {
  return randomBytes(12).toString('hex');
}

/**
 * The tenant's text (a schema card, the retrieved rows) as the user message that carries it: a
 * heading saying it is data, then `body` between the lines `BEGIN <label> <token>` and
 * `END <label> <token>`. The token is random for each question, and never one that `body` holds
 * (another is drawn until none is): no text inside can write the line that ends its block, whatever
 * it guesses. The system message tells the model that only that line ends it, and that the block is
 * data, never instructions. `token` draws the token (tests hand in their own).
 */
export function fencedData(heading: string, label: string, body: string, token: () => string = fenceToken): string {
  let t = token();
  while (t === '' || body.includes(t)) t = token();
  return `${heading}\nBEGIN ${label} ${t}\n${body}\nEND ${label} ${t}`;
}

/**
 * The tenant's text on one line of a fenced block (a retrieved row, a column's label, description or
 * example): its line breaks (CR, LF, vertical tab, form feed, NEL, the Unicode line and paragraph
 * separators) become a space. Each entry of a block starts a line with the hub's own text (a row's
 * `[row:<hash>]` tag, a column's name), so a row whose text held `\n[row:<another hash>] …` made an
 * entry of its own, its words cited as another row's.
 */
export function oneLine(text: string): string {
  return text.replace(/[\r\n\v\f\u0085\u2028\u2029]+/g, ' ');
}
