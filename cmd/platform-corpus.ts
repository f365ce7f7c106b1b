import { allRoutes } from '../apiserver/app.js';
import { describeGate } from '../src/auth/principal.js';
import type { Catalog } from '../src/events/catalog.js';
import { MANIFEST_KINDS, apiVersionOf } from '../src/manifests/kinds.js';
import type { PlatformDocument } from '../src/retrieval/platform-corpus.js';

/**
 * The platform corpus (tenant 0, corpus `system`): one document per HTTP operation of the hub's own
 * API, per manifest kind (its fields from the same JSON Schema the apply path validates with), and
 * per declared hook. Built here because only the composition root sees both the API and the areas.
 */
export function platformDocuments(catalog: Catalog): PlatformDocument[] {
  const docs: PlatformDocument[] = [];
  for (const r of allRoutes()) {
    const roles = r.auth === 'public' ? 'no authentication' : `roles ${describeGate(r.auth)}`;
    docs.push({ key: `openapi:${r.method} ${r.path}`, content: `${r.method} ${r.path}: ${r.summary}.${r.description ? ` ${r.description}` : ''} (${roles}; ${(r.tags ?? []).join(', ')})` });
  }
  for (const k of MANIFEST_KINDS) {
    const spec = ((k.schema.properties as Record<string, { properties?: Record<string, { description?: string }> }> | undefined)?.spec?.properties) ?? {};
    const fields = Object.entries(spec).map(([name, s]) => (s.description ? `${name} (${s.description})` : name));
    docs.push({ key: `kind:${k.kind}`, content: `${k.kind} manifest (apiVersion ${apiVersionOf(k)}, kubectl ${k.plural}): spec fields ${fields.join(', ')}` });
  }
  for (const h of catalog.hooks()) {
    docs.push({ key: `hook:${h.id}`, content: `Hook ${h.id} of module ${h.module}: runs ${h.target} on ${h.events.join(', ')} (priority ${h.priority}${h.enabled ? '' : ', disabled by default'})` });
  }
  return docs;
}
