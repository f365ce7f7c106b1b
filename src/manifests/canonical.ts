/** JSON with every object's keys sorted: two manifests (or statuses) are the same when their texts are. */
export const canonical = (v: unknown): string =>
  JSON.stringify(v, (_k, value) =>
    value && typeof value === 'object' && !Array.isArray(value)
      ? Object.fromEntries(Object.entries(value as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))
      : value,
  );

/**
 * Whether a manifest is the one stored: the same JSON but for the order of keys. The one comparison
 * of every apply, over HTTP and from the operator: an apply of the stored manifest writes nothing
 * (no `updatedAt`, no owner's change warnings forgotten) and answers that nothing changed.
 */
export const sameManifest = (stored: unknown, manifest: unknown): boolean => canonical(stored) === canonical(manifest);

/**
 * Whether an apply would change nothing: the manifest is the one stored (sameManifest) and so is
 * what the running code makes of it, its normalised form (with what it takes from other objects, a
 * Workflow's default scope from its Entity). A form stored by an older version that normalised the
 * same manifest otherwise, or derived from an object changed since, is written again.
 */
export const unchangedApply = (stored: { manifest: unknown; normalised: unknown }, manifest: unknown, normalised: unknown): boolean =>
  sameManifest(stored.manifest, manifest) && sameManifest(stored.normalised, normalised);
