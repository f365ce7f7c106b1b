/** Turns texts into vectors (L2-normalised). */
export interface EmbeddingPort {
  readonly provider: string;
  readonly model: string;
  readonly dimensions: number;
  embed(texts: string[]): Promise<Float32Array[]>;
}
