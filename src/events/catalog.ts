import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { packageRoot } from '../package-root.js';

/**
 * Module declarations (src/events/modules/*.yaml), loaded once at start: each module's name,
 * version, event types and hooks. The catalog served at /api/platform/events is exactly what was
 * loaded; adding an event type is a redeploy, not a migration (spec 1 Events rule 4).
 */

const PAYLOAD_TYPES = ['long', 'string', 'boolean', 'map'] as const;
type PayloadType = (typeof PAYLOAD_TYPES)[number];

export interface CatalogEntry {
  module: string;
  type: string;
  description: string;
  payload: Record<string, PayloadType>;
}

export interface HookDecl {
  id: string;
  module: string;
  target: string;
  events: string[];
  priority: number;
  enabled: boolean;
}

interface ModuleDecl {
  name: string;
  version: string;
  events: CatalogEntry[];
  hooks: HookDecl[];
}

export class Catalog {
  private readonly byType = new Map<string, CatalogEntry>();

  constructor(readonly modules: ModuleDecl[]) {
    for (const module of modules) {
      for (const entry of module.events) {
        if (this.byType.has(entry.type)) throw new Error(`event type ${entry.type} is declared twice (${this.byType.get(entry.type)!.module}, ${module.name})`);
        this.byType.set(entry.type, entry);
      }
    }
  }

  entries(): CatalogEntry[] {
    return [...this.byType.values()];
  }

  get(type: string): CatalogEntry | undefined {
    return this.byType.get(type);
  }

  hooks(): HookDecl[] {
    return this.modules.flatMap((m) => m.hooks).sort((a, b) => a.priority - b.priority || a.id.localeCompare(b.id));
  }

  versions(): Record<string, string> {
    return Object.fromEntries(this.modules.map((m) => [m.name, m.version]));
  }
}

/** `decision.*` is a dynamic family minted by processes and workflows: delivered, never catalogued. */
export function isDecision(type: string): boolean {
  return type.startsWith('decision.');
}

/** Why a payload does not match its declaration, or undefined when it does. */
export function payloadMismatch(entry: CatalogEntry, payload: Record<string, unknown>): string | undefined {
  for (const [field, type] of Object.entries(entry.payload)) {
    const value = payload[field];
    if (value === undefined) return `missing field ${field} (${type})`;
    if (value === null) continue;
    const ok =
      type === 'long'
        ? Number.isInteger(value)
        : type === 'string'
          ? typeof value === 'string'
          : type === 'boolean'
            ? typeof value === 'boolean'
            : typeof value === 'object' && !Array.isArray(value);
    if (!ok) return `field ${field} must be ${type}, got ${JSON.stringify(value)}`;
  }
  const extra = Object.keys(payload).filter((k) => !(k in entry.payload));
  if (extra.length) return `undeclared field(s) ${extra.join(', ')}`;
  return undefined;
}

const MODULES_DIR = 'src/events/modules';

export function loadCatalog(dir: string = join(packageRoot(), MODULES_DIR)): Catalog {
  const files = readdirSync(dir).filter((f) => f.endsWith('.yaml')).sort();
  return new Catalog(files.map((file) => parseModule(file, readFileSync(join(dir, file), 'utf8'))));
}

export function parseModule(file: string, text: string): ModuleDecl {
  const doc = parseYaml(text) as Record<string, unknown> | null;
  const fail = (what: string): never => {
    throw new Error(`module declaration ${file}: ${what}`);
  };
  if (!doc || typeof doc !== 'object') return fail('not a YAML map');
  const name = typeof doc.module === 'string' && doc.module ? doc.module : fail('module (a name) is required');
  const version = typeof doc.version === 'string' && doc.version ? doc.version : fail('version (a string) is required');
  const events = (Array.isArray(doc.events) ? doc.events : fail('events must be a list')) as Array<Record<string, unknown>>;
  const hooks = (doc.hooks === undefined ? [] : Array.isArray(doc.hooks) ? doc.hooks : fail('hooks must be a list')) as Array<Record<string, unknown>>;
  return {
    name,
    version,
    events: events.map((e, i) => {
      const type = typeof e.type === 'string' && /^[a-z][\w-]*(\.[a-z][\w-]*)+$/.test(e.type) ? e.type : fail(`events[${i}].type must be a dotted lower-case type`);
      const payload = (e.payload ?? {}) as Record<string, unknown>;
      for (const [field, t] of Object.entries(payload)) {
        if (!(PAYLOAD_TYPES as readonly string[]).includes(String(t))) fail(`events[${i}].payload.${field}: ${String(t)} is not one of ${PAYLOAD_TYPES.join(', ')}`);
      }
      if (isDecision(type)) fail(`events[${i}].type: decision.* types are not catalogued`);
      return { module: name, type, description: String(e.description ?? ''), payload: payload as Record<string, PayloadType> };
    }),
    hooks: hooks.map((h, i) => ({
      id: typeof h.id === 'string' && h.id ? h.id : fail(`hooks[${i}].id is required`),
      module: name,
      target: typeof h.target === 'string' && h.target ? h.target : fail(`hooks[${i}].target is required`),
      events: Array.isArray(h.events) && h.events.length ? h.events.map(String) : fail(`hooks[${i}].events must be a non-empty list`),
      priority: Number.isInteger(h.priority) ? (h.priority as number) : 100,
      enabled: h.enabled === undefined ? true : Boolean(h.enabled),
    })),
  };
}
