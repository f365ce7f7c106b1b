/**
 * A process's `message`: `{{path}}` placeholders filled from the event (docs/processes.md). A path
 * is dotted from the event: `payload.run_id`, `type`, `tenantId`, `id`. A string renders as is, any
 * other value as JSON, an unknown path as the empty string.
 */

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g;

export function renderMessage(template: string, event: Record<string, unknown>): string {
  return template.replace(PLACEHOLDER, (_, path: string) => {
    let value: unknown = event;
    for (const part of path.split('.')) {
      if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part)) return '';
      value = (value as Record<string, unknown>)[part];
    }
    if (value === undefined) return '';
    return typeof value === 'string' ? value : JSON.stringify(value);
  });
}
