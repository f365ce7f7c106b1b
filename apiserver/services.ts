export type { HubServices } from '../src/runtime/services.js';
