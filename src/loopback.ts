/**
 * A host that names this machine's loopback interface, as written (no name is resolved): `localhost`,
 * an IPv4 address in 127.0.0.0/8, `::1` (bracketed as a URL writes it, or not). The hub refuses the
 * dev bypass on any other listening host; `svc login` refuses to send a token over plain http to one.
 */
export function isLoopback(host: string): boolean {
  const name = (host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host).toLowerCase();
  return name === 'localhost' || name === '::1' || /^127\.\d+\.\d+\.\d+$/.test(name);
}
