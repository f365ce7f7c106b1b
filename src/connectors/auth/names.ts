/**
 * The form of every name a connector refers to (`*_env`, header `value_env`, `{{env:NAME}}`):
 * letters, digits, `_`, `.`, `-`, at most 128 characters, not starting with `.` or `-`, optionally
 * after `secret:` (the tenant's stored secret and nothing else). A stored secret's name has the
 * same form without the prefix, so no other form can name one: not another tenant's (`2:X`), not a
 * path (`secret:../2/X`).
 */
export const NAMED_VALUE_PATTERN = '^(secret:)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$';
const NAMED_VALUE = new RegExp(NAMED_VALUE_PATTERN);

/** Whether `name` has the form of a name a connector may refer to (NAMED_VALUE_PATTERN). */
export const isNamedValue = (name: string): boolean => NAMED_VALUE.test(name);

/** What a name must be, for the refusal of one that is not. */
export const NAMED_VALUE_RULE = 'a name is letters, digits, _, . and - (at most 128, not starting with . or -), or secret:NAME for the tenant\'s stored secret only';
