import { Lexer } from 'yaml';

/**
 * The largest YAML text the hub reads on a tenant's behalf (a manifest body, an OpenAPI document to
 * draft from): 1 MiB. The yaml package reads about 1 MB a second on this hub's machines, a hundred
 * times slower than `JSON.parse`, and it reads on the event loop that serves every tenant, so the
 * limit bounds what one request can hold it for to about a second. A manifest is far smaller (and a
 * custom resource cannot exceed the 1.5 MiB Kubernetes stores); larger documents go as JSON, up to
 * `svc.http.body-limit`.
 */
export const MAX_YAML_BYTES = 1024 * 1024;

/**
 * Whether YAML text surely nests collections deeper than `max`, found from its tokens before it is
 * parsed, stopping at the first token past `max`. The yaml package's parser and composer take time
 * that grows faster than the text with nesting written compactly (a 2 MB body of `[[[…]]]` held the
 * event loop for seconds before the depth check on the parsed value could refuse it), while its
 * lexer is linear and yields tokens one at a time. Two compact forms nest without growing the
 * indentation, and both are counted: flow collections (each `[` or `{` opens a level until its `]`
 * or `}`) and block indicators written on one line (`- - - x`, `? ? x`: each `-` or `?` outside a
 * flow collection opens a sequence or mapping inside the previous one). A flow collection opened on a
 * line after such indicators is inside them, so the two add up. Nesting by indentation alone is not
 * counted: its text grows with the square of its depth, and the parser refuses it past its own stack
 * quickly. So the count is a lower bound of the real depth: `true` only for text that nests deeper
 * than `max`; what it lets through is checked on the parsed value as before.
 */
export function yamlNestsDeeperThan(text: string, max: number): boolean {
  let flow = 0;
  let onLine = 0;
  for (const token of new Lexer().lex(text)) {
    switch (token) {
      case '[':
      case '{':
        flow += 1;
        if (flow + onLine > max) return true;
        break;
      case ']':
      case '}':
        if (flow > 0) flow -= 1;
        break;
      case '-':
      case '?':
        if (flow === 0) {
          onLine += 1;
          if (onLine > max) return true;
        }
        break;
      case '\n':
      case '\r\n':
        if (flow === 0) onLine = 0;
        break;
      default:
        // A document marker ends whatever a broken document left open.
        if (token === '---' || token === '...') {
          flow = 0;
          onLine = 0;
        }
    }
  }
  return false;
}
