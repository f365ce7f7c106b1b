export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** A language model that answers a conversation (an OpenAI-compatible chat completions endpoint). */
export interface ChatPort {
  readonly model: string;
  /**
   * The model's answer; throws PortUnavailable when the backend is unreachable, times out or answers
   * nonsense. `signal` (the asking client went away) ends the call at once, the request to the model
   * closed: it throws the signal's reason.
   */
  complete(messages: ChatMessage[], signal?: AbortSignal): Promise<string>;
}
