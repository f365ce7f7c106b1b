import type { AuthParts } from '../auth/types.js';
import { faultOf, readAnswer, type SoapAnswer, SoapEnvelopeError } from '../soap/envelope.js';
import type { EndpointSpec, SoapCall } from '../types.js';
import { type EngineError, quote, SoapFaultError, SoapUnauthorizedError, UnreadableResponseError, UpstreamHttpError } from './errors.js';
import { contentType, type Exchange, type ExchangeOptions, type ResponseHeaders } from './http.js';
import { redactText, redirectLocation } from './request.js';

/**
 * What a SOAP endpoint changes in the engine's HTTP path: bodies are read as SOAP envelopes (a real
 * XML parser, the same page-size bound), a Fault is an answer (never retried, on 500 or 200), and a
 * 401 names the session setting. Requests, the bucket, the retry policy and the egress dispatcher
 * are the REST ones.
 */
export function soapExchange(call: SoapCall): Pick<ExchangeOptions, 'parse' | 'isFinal'> {
  return {
    parse: (text, status, headers) => parseAnswer(text, status, headers, call),
    isFinal: (_status, text) => faultOf(text) !== undefined,
  };
}

async function parseAnswer(text: string, status: number, headers: ResponseHeaders, call: SoapCall): Promise<SoapAnswer> {
  try {
    return await readAnswer(text, call);
  } catch (err) {
    if (!(err instanceof SoapEnvelopeError)) throw err;
    // The reason may name what the answer holds (a root element's name, an attribute's): quoted, as the body is.
    throw new UnreadableResponseError(`upstream answered HTTP ${status} with a body that is not a SOAP envelope: ${quote(err.message)} (content-type ${contentType(headers)}): ${quote(text, 200)}`, status);
  }
}

/** A 2xx answer that holds a Fault fails the read at once. */
export function checkSoapAnswer(status: number, body: unknown, auth: AuthParts): void {
  const fault = (body as SoapAnswer | null)?.fault;
  if (fault !== undefined) throw new SoapFaultError(status, redactText(fault, auth));
}

/** The error a final non-2xx SOAP answer ends the read with. */
export function soapFailure(answer: Extract<Exchange, { ok: false }>, endpoint: EndpointSpec, auth: AuthParts): EngineError {
  const fault = faultOf(answer.text);
  if (answer.status === 401) {
    const session = endpoint.soap?.session;
    const advice = session
      ? `check the session token named by soap.session.token_env (${session.token_env}) and the soap.session.header it is sent in`
      : 'this endpoint sends no session token: set soap.session (token_env, header) if the service needs one, and check spec.auth';
    return new SoapUnauthorizedError(fault === undefined ? undefined : redactText(fault, auth), advice);
  }
  if (fault !== undefined) return new SoapFaultError(answer.status, redactText(fault, auth));
  return new UpstreamHttpError(answer.status, redactText(answer.text, auth), redirectLocation(answer, auth));
}
