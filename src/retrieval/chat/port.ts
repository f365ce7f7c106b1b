export interface ChatMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/** A language model that answers a conversation (an OpenAI-compatible chat completions endpoint). */
export interface ChatPort {
  readonly model: string;
  /** The model's answer; throws PortUnavailable when the backend is unreachable, times out or answers nonsense. */
  complete(messages: ChatMessage[]): Promise<string>;
}
