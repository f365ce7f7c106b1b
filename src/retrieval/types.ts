/** A search hit as spec 2 shows it. */
export interface SearchHit {
  rowHash: string;
  content: string;
  similarity: number;
  /** `key`: the row's key at its source (external id), or what a platform chunk describes. */
  metadata: { row_hash: string | null; table: string | null; corpus: string; scopes: string[]; key?: string };
}

export interface SearchRequest {
  query: string;
  topK: number;
  corpus?: string;
  /** Chunks carrying one of these tags; undefined: no tag filter (the platform corpus included). */
  scopes?: string[];
}
