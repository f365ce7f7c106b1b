/**
 * An address with the credentials before its host (`user:pass@`, `//u:p@` without a scheme, `\\` as
 * a special scheme's slashes, or any other spelling a URL parser takes them from) shown as `***@`,
 * whoever's they are: `http://***@host/`; the rest as written. Text that does not parse as a URL
 * comes back with anything between `//` and an `@` masked. For every message, answer and log line
 * that quotes an address: a redirect's Location, a request's URL, a stored connector's base_url
 * (one applied before apply refused credentials in it), and `loggableUrl`'s.
 */
export function maskUserinfo(address: string): string {
  const masked = address.replace(/^((?:[A-Za-z][A-Za-z0-9+.-]*:)?[\\/]{2})[^\\/?#]*@/, '$1***@');
  if (masked !== address) return masked;
  // Other spellings a URL parser reads credentials from (` http://u:p@h`, `http:u:p@h`, `http:/\t/u:p@h`): shown as
  // the address it parses, credentials masked.
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    return address.replace(/([\\/]{2})[^\\/?#]*@/, '$1***@');
  }
  return url.username || url.password ? `${url.protocol}//***@${url.host}${url.pathname}${url.search}${url.hash}` : address;
}

/**
 * A URL as a log line or a message may show it: scheme, host, port and path kept; the userinfo
 * written `***@` (`maskUserinfo`), every query value `***` (names kept) and a fragment dropped. A
 * key set's, a webhook's or a base URL may carry a credential in either place
 * (`https://x/hook?token=…`, `https://user:pass@x/`), and no log needs it to say where a call went.
 * An address with none of these comes back as written. Text that does not parse as a URL comes
 * back as `maskUserinfo` shows it.
 */
export function loggableUrl(address: string): string {
  const masked = maskUserinfo(address);
  let url: URL;
  try {
    url = new URL(masked);
  } catch {
    return masked;
  }
  const names = [...url.searchParams.keys()];
  // Nothing to mask: the address as written (not as the parser writes it back: `http://h:9` stays without a `/`).
  if (masked === address && !names.length && !url.hash && !address.endsWith('#')) return address;
  if (names.length) url.search = names.map((name) => `${encodeURIComponent(name)}=***`).join('&');
  url.hash = '';
  return url.href;
}

/**
 * `text` (an error's message: fetch quotes the URL it refused, a driver its connection string) with
 * every http(s) URL in it as `loggableUrl` shows it, and the credentials before the host of an
 * address of any other scheme (`postgres://user:pass@host/db`, `redis://:pass@host`) as `***@`.
 */
export function loggableText(text: string): string {
  // Most texts hold no address at all: nothing to look for without a `//`.
  if (!text.includes('//')) return text;
  // a sentence's punctuation after a URL stays outside it
  return text
    .replace(/\bhttps?:\/\/[^\s"'<>]*[^\s"'<>.,;:!?)\]]/gi, (url) => loggableUrl(url))
    .replace(/\b([A-Za-z][A-Za-z0-9+.-]*:\/\/)[^\s"'<>/?#@]*@/g, (whole, scheme: string) => (whole === `${scheme}***@` ? whole : `${scheme}***@`));
}
