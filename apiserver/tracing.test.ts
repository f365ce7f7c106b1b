import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import * as grpc from '@grpc/grpc-js';
import { startTestHub, type TestHub } from '../test/harness/hub.js';

/**
 * Traces leave over OTLP/gRPC. The receiver is a real gRPC server implementing the collector's
 * TraceService/Export method; it keeps the raw protobuf requests, in which span names and
 * attribute strings appear as UTF-8.
 */
const received: Buffer[] = [];
let server: grpc.Server;
let endpoint: string;
let hub: TestHub;

const identity = (b: Buffer) => b;

beforeAll(async () => {
  server = new grpc.Server();
  server.addService(
    {
      Export: {
        path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
        requestStream: false,
        responseStream: false,
        requestSerialize: identity,
        requestDeserialize: identity,
        responseSerialize: identity,
        responseDeserialize: identity,
      },
    },
    {
      Export: (call: grpc.ServerUnaryCall<Buffer, Buffer>, callback: grpc.sendUnaryData<Buffer>) => {
        received.push(call.request);
        callback(null, Buffer.alloc(0));
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  endpoint = `http://127.0.0.1:${port}`;
  hub = await startTestHub({ 'svc.tracing.enabled': true, 'svc.tracing.endpoint': endpoint, 'svc.tracing.service-name': 'svc-hub-under-test' });
});

afterAll(() => {
  server.forceShutdown();
});

describe('OpenTelemetry tracing', () => {
  it('exports request spans and database spans over OTLP/gRPC, continuing the caller trace', async () => {
    const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
    const res = await fetch(`${hub.url}/api/platform/migrations`, {
      headers: { 'X-Tenant-ID': '1', traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    });
    expect(res.status).toBe(200);
    // A path no route serves names no span: its name is the method, the path an attribute only.
    const madeUp = `/api/made-up-${Date.now()}`;
    expect((await fetch(`${hub.url}${madeUp}`)).status).toBe(404);
    await hub.stop(); // flushes the batch processor
    const all = Buffer.concat(received);
    expect(received.length).toBeGreaterThan(0);
    expect(all.includes('svc-hub-under-test')).toBe(true);
    expect(all.includes('GET /api/platform/migrations')).toBe(true);
    expect(all.includes('db SELECT')).toBe(true);
    const occurrences = (text: string) => all.toString('latin1').split(text).length - 1;
    expect(occurrences(madeUp)).toBe(1);
    expect(occurrences(`GET ${madeUp}`)).toBe(0);
    expect(all.includes('postgresql')).toBe(true);
    // trace ids travel as 16 raw bytes in OTLP protobuf
    expect(all.includes(Buffer.from(traceId, 'hex'))).toBe(true);
  });
});
