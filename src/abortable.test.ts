import { describe, expect, it } from '@jest/globals';
import { retained } from '../test/harness/memory.js';
import { unlessAborted } from './abortable.js';

describe('unlessAborted', () => {
  it('answers the work, or the abort as soon as it comes (at once when it came before)', async () => {
    const controller = new AbortController();
    expect(await unlessAborted(Promise.resolve(7), controller.signal)).toBe(7);
    await expect(unlessAborted(Promise.reject(new Error('failed')), controller.signal)).rejects.toThrow('failed');
    const never = new Promise<number>(() => {});
    const waiting = unlessAborted(never, controller.signal);
    controller.abort(new Error('stopped'));
    await expect(waiting).rejects.toThrow('stopped');
    await expect(unlessAborted(Promise.resolve(1), controller.signal)).rejects.toThrow('stopped');
    expect(await unlessAborted(Promise.resolve(2), undefined)).toBe(2);
  });

  it('a loop of waits under one signal keeps nothing of what each wait answered', async () => {
    const controller = new AbortController();
    const before = await retained();
    // 200 items of 1 MB, one after the other, as a run reads pages or an upload reads parts.
    for (let i = 0; i < 200; i++) {
      const item = await unlessAborted(Promise.resolve({ bytes: Buffer.alloc(1024 * 1024, i) }), controller.signal);
      expect(item.bytes[0]).toBe(i % 256);
    }
    const grown = (await retained()) - before;
    // One Promise.race against a single abort promise kept them all: 200 MB.
    expect(grown).toBeLessThan(20 * 1024 * 1024);
  });
});
