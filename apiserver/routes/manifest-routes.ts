import type { JsonSchema, ResponseDecl } from '../route.js';
import { errorBody, refusals } from './schemas.js';

/**
 * What the manifest routes (connectors, entities, exports, processes, workflows) declare alike. Each
 * kind's manifest module checks the manifest and names the field at fault, so the router only needs
 * an object; these pieces keep the five routes' bodies and answers the same in /q/openapi.
 */

/**
 * YAML is what people write and `kubectl apply` takes (`application/x-yaml` is its older name, which some
 * clients still send); JSON is what tools send. All parse to the same object.
 */
export const MANIFEST_TYPES = ['application/yaml', 'text/yaml', 'application/x-yaml', 'application/json'];

/**
 * The router checks the body only as an object, so the manifest module can answer `{error, field}`
 * with a path into the manifest instead of a router message. /q/openapi shows the manifest's own JSON
 * Schema (the one apply and validate check against), so the document and the console show what a
 * manifest may hold, less its `$schema`: that names the dialect of a standalone schema, not of one
 * embedded in the document.
 */
export function manifestBodies(description: string, schema: JsonSchema): { body: JsonSchema; documentedBody: JsonSchema } {
  const { $schema: _dialect, ...documented } = schema;
  return { body: { type: 'object', description }, documentedBody: { ...documented, description } };
}

/** One manifest error or warning, `field` a path into the manifest so a console or CLI can point at it. */
export const manifestIssue: JsonSchema = { type: 'object', required: ['field', 'message'], properties: { field: { type: 'string' }, message: { type: 'string' } } };

/**
 * What apply answers: the name, the id where the kind has one (connectors, entities and exports are
 * referenced by UUID; workflows only by name), whether the manifest was the one stored (nothing
 * written), and the warnings that did not stop it.
 */
export function appliedSchema({ withId }: { withId: boolean }): JsonSchema {
  return {
    type: 'object',
    required: withId ? ['name', 'id', 'unchanged', 'warnings'] : ['name', 'unchanged', 'warnings'],
    properties: {
      name: { type: 'string' },
      ...(withId ? { id: { type: 'string', format: 'uuid' } } : {}),
      unchanged: { type: 'boolean', description: 'The manifest was the one stored (keys in any order): nothing was written, `updatedAt` stays' },
      warnings: { type: 'array', items: manifestIssue },
    },
  };
}

/**
 * Apply's answer (appliedSchema), its status set on `ctx`: 201 for a new name, 200 for an update
 * or a manifest that was the one stored (`unchanged`).
 */
export function appliedAnswer<W>(ctx: { status: number }, result: { created: boolean; unchanged: boolean }, applied: { name: string; id?: string; warnings: W }) {
  ctx.status = result.created ? 201 : 200;
  const { name, id, warnings } = applied;
  return { name, ...(id === undefined ? {} : { id }), unchanged: result.unchanged, warnings };
}

/**
 * Apply creates or updates by name, so 201 and 200 carry the same body; the check stops at the first
 * error, hence a single 400. `refused` is there for kinds that refuse more than a missing role (an
 * export's scope).
 */
export function applyResponses(applied: JsonSchema, refused: Record<number, ResponseDecl> = refusals(false)): Record<number, ResponseDecl> {
  return {
    200: { description: 'Updated, or unchanged (`unchanged: true`: the manifest was the one stored, nothing written)', schema: applied },
    201: { description: 'Created', schema: applied },
    400: { description: 'The first manifest error, `field` naming it', schema: errorBody },
    ...refused,
  };
}
