/**
 * A URL as a log line or a message may show it: scheme, host, port and path kept; the userinfo
 * written `***@`, every query value `***` (names kept) and a fragment dropped. A key set's, a
 * webhook's or a base URL may carry a credential in either place (`https://x/hook?token=…`,
 * `https://user:pass@x/`), and no log needs it to say where a call went. Text that does not parse as
 * a URL comes back with anything between `//` and an `@` masked.
 */
export function loggableUrl(address: string): string {
  let url: URL;
  try {
    url = new URL(address);
  } catch {
    return address.replace(/\/\/[^/?#]*@/, '//***@');
  }
  if (url.username || url.password) {
    url.username = '***';
    url.password = '';
  }
  const names = [...url.searchParams.keys()];
  if (names.length) url.search = names.map((name) => `${encodeURIComponent(name)}=***`).join('&');
  url.hash = '';
  return url.href;
}

/** `text` (an error's message: fetch quotes the URL it refused) with every http(s) URL in it as `loggableUrl` shows it. */
export function loggableText(text: string): string {
  // a sentence's punctuation after a URL stays outside it
  return text.replace(/\bhttps?:\/\/[^\s"'<>]*[^\s"'<>.,;:!?)\]]/gi, (url) => loggableUrl(url));
}
