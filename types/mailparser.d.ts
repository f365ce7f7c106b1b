// The parts of mailparser@3 the tests use (the package ships no types).
declare module 'mailparser' {
  import type { Readable } from 'node:stream';

  export interface EmailAddress {
    address?: string;
    name: string;
  }

  export interface AddressObject {
    value: EmailAddress[];
    text: string;
    html: string;
  }

  export interface ParsedMail {
    subject?: string;
    text?: string;
    html?: string | false;
    to?: AddressObject | AddressObject[];
    from?: AddressObject;
    cc?: AddressObject | AddressObject[];
    messageId?: string;
    date?: Date;
    headers: Map<string, unknown>;
  }

  export function simpleParser(source: Readable | Buffer | string, options?: Record<string, unknown>): Promise<ParsedMail>;

  const mailparser: { simpleParser: typeof simpleParser };
  export default mailparser;
}
