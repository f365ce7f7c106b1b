/**
 * Credentials a connector manifest states literally, by their form or by the name they stand under: used by the
 * manifest's checks (refused outside the dev profile), by the store (redacted where shown) and by the engine (kept out
 * of messages).
 */

/**
 * Values that are credentials by their form, wherever they stand in a value and whatever its
 * header's or parameter's name: a JWT, and the prefixes of well-known API keys (Stripe, GitHub, Slack, GitLab, AWS,
 * Google, OpenAI).
 */
export const KNOWN_TOKEN =
  /(?<![\w-])(eyJ[\w-]{8,}\.[\w-]{8,}\.|(sk|rk|pk)_(live|test)_\w|gh[pousr]_\w{20}|github_pat_\w|xox[abpr]-\w|glpat-\w|AKIA[0-9A-Z]{16}|AIza[\w-]{35}|sk-(proj-|svcacct-|admin-)?[\w-]{20,})/;

/**
 * A query parameter's name that says it carries a credential (`api_key`, `apiKey`, `key`, `access_token`, `token`,
 * `client_secret`, `password`, `sig`, `signature`, `X-Amz-Signature`, `X-Amz-Security-Token`, …). The whole name is
 * compared, not searched for a part as a header's is: a query's names are often plain words joined (`sort_key`,
 * `page_token`, `session_length` are no credentials).
 */
const QUERY_CREDENTIAL_NAME = /^(x[-_]?)?(amz[-_]?|goog[-_]?)?(api[-_]?key|key|(access|auth|api|private|session|refresh|id|bearer|security)?[-_]?token|client[-_]?secret|secret|pass(word)?|passwd|pwd|sig(nature)?|credentials?|jwt|auth)$/i;

/** A query string's part as a URL reader decodes it (`+` a space); as written when it is not valid percent-encoding. */
function queryText(part: string): string {
  try {
    return decodeURIComponent(part.replace(/\+/g, ' '));
  } catch {
    return part;
  }
}

/**
 * Each parameter of a path's query that states a credential literally: a value, under a name that says it is a
 * credential (QUERY_CREDENTIAL_NAME) or of a well-known key's form (a JWT, `sk_live_…`, `ghp_…`, …) whatever its
 * name; `at` is the parameter's index among the query's `&`-separated parts, `raw` its value as written.
 */
export function queryCredentials(path: string): Array<{ name: string; value: string; raw: string; at: number }> {
  const mark = path.indexOf('?');
  if (mark < 0) return [];
  const found: Array<{ name: string; value: string; raw: string; at: number }> = [];
  path
    .slice(mark + 1)
    .split('#')[0]!
    .split('&')
    .forEach((part, at) => {
      const eq = part.indexOf('=');
      if (eq < 0) return;
      const name = queryText(part.slice(0, eq));
      const raw = part.slice(eq + 1);
      const value = queryText(raw);
      if (value !== '' && (QUERY_CREDENTIAL_NAME.test(name) || KNOWN_TOKEN.test(value))) found.push({ name, value, raw, at });
    });
  return found;
}

/** `path` with the value of each query parameter that states a credential (queryCredentials) written `[REDACTED]`, the rest as written. */
export function redactQueryCredentials(path: string): string {
  const found = queryCredentials(path);
  if (found.length === 0) return path;
  const mark = path.indexOf('?');
  const hash = path.indexOf('#', mark);
  const end = hash < 0 ? path.length : hash;
  const parts = path.slice(mark + 1, end).split('&');
  for (const { at } of found) parts[at] = `${parts[at]!.slice(0, parts[at]!.indexOf('='))}=[REDACTED]`;
  return `${path.slice(0, mark + 1)}${parts.join('&')}${path.slice(end)}`;
}
