import { describe, expect, it } from '@jest/globals';
import { CelError, compileWhen, evaluateWhen, evaluateWhens } from './cel.js';

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

  it('refuses a string literal given to matches() that is not a regular expression, naming the regex error', () => {
    expect(() => compileWhen('payload.x.matches("(")')).toThrow(new CelError('gives matches() a pattern that is not a valid regular expression: Invalid regular expression: /(/: Unterminated group'));
    expect(() => compileWhen('payload.x == "a" || payload.l.exists(s, s.matches("[b-a]"))')).toThrow(/not a valid regular expression: Invalid regular expression: \/\[b-a\]\/: Range out of order/);
    // RE2-only syntax the evaluator (JavaScript regular expressions) cannot compile: always false at run time.
    expect(() => compileWhen("payload.x.matches('(?i)abc')")).toThrow(/not a valid regular expression/);
    // Valid patterns, a computed one (checked only when evaluated), and `matches` as a map key are accepted.
    expect(compileWhen('payload.x.matches("^(a|aa)+$") && type.matches(r"^connector\\.")').source).toBeTruthy();
    expect(compileWhen('payload.x.matches(payload.pattern)').source).toBeTruthy();
    expect(compileWhen('payload.matches == "("').source).toBeTruthy();
    // The consumer compiles without the check: a process stored before it is evaluated as before (false).
    expect(evaluateWhen(compileWhen('payload.x.matches("(")', { checkPatterns: false }), input({ x: 'a' }))).toMatchObject({ result: false, timedOut: false });
    const computed = evaluateWhen(compileWhen('payload.x.matches(payload.pattern)'), input({ x: 'a', pattern: '(' }));
    expect(computed).toMatchObject({ result: false, timedOut: false });
  });

  it('evaluates several conditions under one bound, and says which one the bound stopped', () => {
    const plain = compileWhen('payload.n > 1');
    const failing = compileWhen('payload.missing > 1');
    const costly = compileWhen('payload.name.matches("^(a|aa)+$")');
    const event = input({ n: 2, name: `${'a'.repeat(50)}!` });
    expect(evaluateWhens([plain, failing, plain].map((when) => ({ when, input: event })))).toEqual({
      outcomes: [{ result: true }, { result: false, error: expect.any(String), timedOut: false }, { result: true }],
      stopped: false,
    });
    const run = evaluateWhens([plain, costly, plain].map((when) => ({ when, input: event })), 30);
    expect(run).toEqual({ outcomes: [{ result: true }], stopped: true });
    expect(evaluateWhen(costly, event, 30)).toEqual({ result: false, error: 'evaluation stopped after 30 ms', timedOut: true });
  });

  it('a bound that fires as the last condition has finished stopped nothing: all outcomes, not stopped', () => {
    // Conditions of a fraction of a millisecond under a bound of one: V8 often delivers the stop as
    // the run returns, after the last outcome was recorded (seen as a crash of the process consumer,
    // which then looked for a condition after the last one).
    const costly = compileWhen('payload.name.matches("^(a|aa)+$")');
    let stopped = 0;
    for (const n of [19, 20, 21, 22, 23, 24, 25]) {
      const event = input({ name: `${'a'.repeat(n)}!` });
      for (let i = 0; i < 100; i++) {
        const run = evaluateWhens([0, 1, 2].map(() => ({ when: costly, input: event })), 1);
        expect(run.outcomes.length).toBeLessThanOrEqual(3);
        if (run.stopped) {
          stopped++;
          expect(run.outcomes.length).toBeLessThan(3);
        } else expect(run.outcomes).toHaveLength(3);
      }
    }
    // The bound did stop some runs (the condition grows with n), so both sides were seen.
    expect(stopped).toBeGreaterThan(0);
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
