import { ValidationError } from '../errors.js';

/** A control character (C0, DEL, C1: a tab, a line break, an escape), a line or a paragraph separator: a name or a file name shown on one line holds none. */
export const CONTROL_CHARACTER = /[\p{Cc}\p{Zl}\p{Zp}]/u;

/** The longest name people give an integration or an e-mail rule. */
export const LABEL_NAME_MAX = 200;

/**
 * The name people give an integration or an e-mail rule (free text, unlike the slugs of manifests):
 * trimmed, not blank, at most LABEL_NAME_MAX characters, and no control character (a line break
 * would split the lines that show it and the log lines that quote it). 400 naming `name` otherwise.
 */
export function labelName(value: string): string {
  const name = value.trim();
  if (!name) throw new ValidationError('name must not be blank', 'name');
  if (name.length > LABEL_NAME_MAX) throw new ValidationError(`name: at most ${LABEL_NAME_MAX} characters`, 'name');
  if (CONTROL_CHARACTER.test(name)) throw new ValidationError('name may not hold control characters (a line break, a tab)', 'name');
  return name;
}
