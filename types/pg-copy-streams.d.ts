// The part of pg-copy-streams the hub uses (the package ships no types).
declare module 'pg-copy-streams' {
  import type { Writable } from 'node:stream';
  import type { Submittable } from 'pg';

  /** A `COPY … FROM STDIN` statement as a writable stream, for `client.query()`. */
  export interface CopyStreamQuery extends Writable, Submittable {
    /** Rows the server reports copied, once the stream has finished. */
    rowCount: number;
  }

  export function from(text: string): CopyStreamQuery;
}
