import { describe, expect, it } from '@jest/globals';
import { CelError, compileWhen, evaluateWhen } from './cel.js';

const input = (payload: Record<string, unknown>, type = 'connector.run.completed') => ({ type, tenantId: 7, payload });

describe('when (CEL)', () => {
  it('compiles and evaluates conditions over type, tenantId and payload', () => {
    const big = compileWhen('payload.records_out > 1000');
    expect(evaluateWhen(big, input({ records_out: 1500 }))).toEqual({ result: true });
    expect(evaluateWhen(big, input({ records_out: 10 }))).toEqual({ result: false });
    const typed = compileWhen('type.startsWith("connector.") && tenantId == 7 && payload.type == "x"');
    expect(evaluateWhen(typed, input({ type: 'x' }))).toEqual({ result: true });
    expect(evaluateWhen(typed, input({ type: 'x' }, 'data.row.changed'))).toEqual({ result: false });
    // JSON integers are CEL ints (int arithmetic), other numbers doubles; comparisons mix them.
    expect(evaluateWhen(compileWhen('type(payload.n) == int && payload.n + 1 == 4 && payload.n > 2.5'), input({ n: 3 }))).toEqual({ result: true });
    expect(evaluateWhen(compileWhen('type(payload.x) == double && payload.x > 1'), input({ x: 1.5 }))).toEqual({ result: true });
    expect(evaluateWhen(compileWhen('payload.tables["ext.a"] == 2 && payload.l[1] == 2 && payload.z == null && !has(payload.q)'), input({ tables: { 'ext.a': 2 }, l: [1, 2], z: null }))).toEqual({ result: true });
  });

  it('counts a missing field as false, with the reason', () => {
    const outcome = evaluateWhen(compileWhen('payload.records_out > 1000'), input({}));
    expect(outcome.result).toBe(false);
    expect('error' in outcome && outcome.error).toBeTruthy();
  });

  it('refuses syntax and type errors and non-conditions', () => {
    expect(() => compileWhen('payload.x >')).toThrow(CelError);
    expect(() => compileWhen('type > 1')).toThrow(/type-check/);
    expect(() => compileWhen('tenantId + "a" == "b"')).toThrow(/type-check/);
    expect(() => compileWhen('unknown_var == 1')).toThrow(/type-check/);
    expect(() => compileWhen('"text"')).toThrow(/bool/);
    expect(() => compileWhen('payload.l.all(a, payload.l.all(b, payload.l.all(c, a + b + c > 0)))')).toThrow(/nests macros .* 3 deep/);
  });

  it('stops an expensive evaluation and counts it as false', () => {
    const l = Array.from({ length: 3000 }, (_, i) => i);
    const when = compileWhen('payload.l.all(a, payload.l.all(b, a + b > -1)) && cel.bind(x, payload.l + payload.l, size(x) > 0)');
    const started = Date.now();
    const timeoutMs = 30;
    const outcome = evaluateWhen(when, input({ l }), timeoutMs);
    expect(outcome).toEqual({ result: false, error: `evaluation stopped after ${timeoutMs} ms`, timedOut: true });
    // Unbounded, this is 9 million steps and a growing list: stopped within a small multiple of the bound.
    expect(Date.now() - started).toBeLessThan(timeoutMs * 20);
    // The evaluator still works afterwards.
    expect(evaluateWhen(compileWhen('size(payload.l) == 3000'), input({ l }))).toEqual({ result: true });
  });
});
