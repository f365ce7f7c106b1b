import { renderBounded } from '../template-render.js';

/**
 * A process's `message`: `{{path}}` placeholders filled from the event (docs/processes.md). A path
 * is dotted from the event: `payload.run_id`, `type`, `tenantId`, `id`. A string renders as is, any
 * other value as JSON, an unknown path as the empty string.
 */

const PLACEHOLDER = /\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}/g;

/**
 * The most characters a rendered message keeps. A template of at most 2,000 characters may name the
 * whole payload a hundred times and more (`{{payload}}` is 11 characters): each decision event, and
 * each inbox entry, would carry as many copies. What is past the limit is cut, the cut said.
 */
export const RENDERED_MESSAGE_MAX = 16 * 1024;

export function renderMessage(template: string, event: Record<string, unknown>): string {
  const textAt = (path: string): string => {
    let value: unknown = event;
    for (const part of path.split('.')) {
      if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part)) return '';
      value = (value as Record<string, unknown>)[part];
    }
    if (value === undefined) return '';
    return typeof value === 'string' ? value : JSON.stringify(value);
  };
  return renderBounded(template, PLACEHOLDER, textAt, RENDERED_MESSAGE_MAX);
}
