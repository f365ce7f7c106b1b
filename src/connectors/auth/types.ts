/** What an auth kind adds to every request of a read. */
export interface AuthParts {
  /** Headers set after the declared ones (an auth-injected header wins a name clash). */
  headers: Array<[name: string, value: string]>;
  /** Query parameters set on every request URL (api-key in query). */
  query: Array<[name: string, value: string]>;
  /** Resolved credential values: kept out of messages, composed URLs and log lines. */
  secrets: string[];
}

/** Resolves an auth `*_env` name: stored secret, then environment variable, then configuration property. */
export type CredentialResolver = (name: string) => Promise<string | undefined>;

export const NO_AUTH: AuthParts = Object.freeze({ headers: [], query: [], secrets: [] }) as AuthParts;
