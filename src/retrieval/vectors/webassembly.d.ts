/**
 * The part of the WebAssembly JavaScript API the vector kernels use. Node has it as a global, but
 * the project compiles against ES2023 and @types/node 20, neither of which declares it (the DOM
 * library would, with much else). Remove this file when @types/node provides these.
 */
declare namespace WebAssembly {
  interface MemoryDescriptor {
    initial: number;
    maximum?: number;
  }
  class Memory {
    constructor(descriptor: MemoryDescriptor);
    readonly buffer: ArrayBuffer;
    grow(delta: number): number;
  }
  class Module {
    constructor(bytes: Uint8Array);
  }
  class Instance {
    constructor(module: Module, imports?: Record<string, Record<string, unknown>>);
    readonly exports: Record<string, unknown>;
  }
  function validate(bytes: Uint8Array): boolean;
}
