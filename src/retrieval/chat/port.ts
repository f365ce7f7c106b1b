export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** A language model that answers a conversation (an OpenAI-compatible chat completions endpoint). */
export interface ChatPort {
  readonly model: string;
  /** The most characters of retrieved context semantic chat sends it (`svc.llm.context-chars`); undefined: no budget. */
  readonly contextChars?: number;
  /**
   * The model's answer; throws PortUnavailable when the backend is unreachable, times out or answers
   * nonsense. `signal` (the asking client went away) ends the call at once, the request to the model
   * closed: it throws the signal's reason.
   */
  complete(messages: ChatMessage[], signal?: AbortSignal): Promise<string>;
}
