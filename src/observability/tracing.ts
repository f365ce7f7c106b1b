import { context, INVALID_SPAN_CONTEXT, propagation, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-grpc';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, NodeTracerProvider, type SpanProcessor } from '@opentelemetry/sdk-trace-node';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { loggableMessage } from './database-errors.js';
import { logger } from './logger.js';

/**
 * Traces only (spec 1 Observability): request spans from the apiserver and one span per database
 * statement, exported over OTLP/gRPC. Off unless enabled; with no provider registered, the API's
 * no-op tracer makes every span call free.
 */

const TRACER = 'svc-hub';

let provider: NodeTracerProvider | undefined;

interface TracingOptions {
  endpoint: string;
  serviceName: string;
  /** Replaces the OTLP exporter (tests use an in-memory one). */
  processor?: SpanProcessor;
}

export function startTracing(options: TracingOptions): void {
  if (provider) return;
  const processor = options.processor ?? new BatchSpanProcessor(new OTLPTraceExporter({ url: options.endpoint }));
  provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': options.serviceName }),
    spanProcessors: [processor],
  });
  provider.register({ propagator: new W3CTraceContextPropagator() });
}

/** How long a stop waits for the spans still buffered to be exported (docs/operations.md, "Tracing"). */
export const TRACES_FLUSH_MS = 3_000;

/**
 * Exports the spans still buffered, waiting at most `flushMs`, and unregisters the provider. A
 * collector that does not answer, or refuses them, loses those spans (said in a warning) and
 * neither holds the stop (the exporter's own deadline is 10 s) nor fails it: the hub's stop exits 1
 * only when something of the hub may be left behind.
 */
export async function stopTracing(flushMs = TRACES_FLUSH_MS): Promise<void> {
  const current = provider;
  provider = undefined;
  if (!current) return;
  let timer: NodeJS.Timeout | undefined;
  try {
    await Promise.race([
      current.shutdown(),
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`the collector did not take them within ${flushMs} ms`)), flushMs);
      }),
    ]);
  } catch (err) {
    logger().warn({ err: loggableMessage(err) }, 'the last traces were not exported');
  } finally {
    clearTimeout(timer);
    trace.disable();
    propagation.disable();
    context.disable();
  }
}

function tracer() {
  return trace.getTracer(TRACER);
}

/** Whether spans are made and exported: tracing was started (`startTracing`) and not stopped since. */
export function tracingOn(): boolean {
  return provider !== undefined;
}

/** The span work runs in while tracing is off: records nothing, as the API's no-op tracer's spans do. */
const NO_SPAN: Span = trace.wrapSpanContext(INVALID_SPAN_CONTEXT);

/**
 * Runs fn inside a span that ends with fn, marked as an error when fn throws. fn runs at once in
 * both cases. With tracing off it runs in no span at all: the no-op tracer's span, its context
 * and the wrapper around fn cost every request and every statement something, for nothing.
 */
export function inSpan<T>(
  name: string,
  attributes: Record<string, string | number | boolean>,
  fn: (span: Span) => Promise<T>,
  kind: SpanKind = SpanKind.INTERNAL,
): Promise<T> {
  if (!provider) {
    try {
      return fn(NO_SPAN);
    } catch (err) {
      return Promise.reject(err);
    }
  }
  return tracer().startActiveSpan(name, { kind, attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err as Error);
      span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** The parent context carried by a request's `traceparent` header. */
export function extractContext(headers: Record<string, string | string[] | undefined>) {
  return propagation.extract(context.active(), headers);
}

export { context, SpanKind };
