// The one helper of node-postgres's lib/utils the hub uses (src/db/opening-query.ts): how a value becomes a parameter's text.
declare module 'pg/lib/utils.js' {
  const utils: {
    /** A parameter value as node-postgres sends it (arrays as array literals, dates, buffers, JSON). */
    prepareValue(value: unknown): unknown;
  };
  export default utils;
}
