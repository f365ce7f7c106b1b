import { type FieldError, fieldErrors } from './kube-schema.js';

/**
 * Part of the SCRIPTED KUBERNETES API STAND-IN (test/harness/kube-api.ts): the validation
 * kube-apiserver gives a batch/v1 CronJob. `spec.schedule` parses as robfig/cron's ParseStandard
 * does (5 fields, or a descriptor); `spec.timeZone` is an IANA name; the name fits in 52 characters;
 * the job's pod template has containers and a Job restart policy; the job template's counts and
 * `activeDeadlineSeconds` are not negative, the pod's `activeDeadlineSeconds` is 1 to 2^31 - 1.
 */

const FIELDS: Array<{ name: string; min: number; max: number; names?: Record<string, number> }> = [
  { name: 'minute', min: 0, max: 59 },
  { name: 'hour', min: 0, max: 23 },
  { name: 'dom', min: 1, max: 31 },
  { name: 'month', min: 1, max: 12, names: Object.fromEntries(['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'].map((m, i) => [m, i + 1])) },
  { name: 'dow', min: 0, max: 6, names: Object.fromEntries(['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'].map((d, i) => [d, i])) },
];

const DESCRIPTORS = new Set(['@yearly', '@annually', '@monthly', '@weekly', '@daily', '@midnight', '@hourly']);
const GO_DURATION = /^[-+]?(0|((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+)$/;

function parseNumber(field: (typeof FIELDS)[number], s: string): number {
  const named = field.names?.[s.toLowerCase()];
  if (named !== undefined) return named;
  if (!/^-?\d+$/.test(s)) throw new Error(`failed to parse int from ${s}: strconv.Atoi: parsing ${JSON.stringify(s)}: invalid syntax`);
  // Go's int (64 bits).
  if (BigInt(s) > 2n ** 63n - 1n || BigInt(s) < -(2n ** 63n)) throw new Error(`failed to parse int from ${s}: strconv.Atoi: parsing ${JSON.stringify(s)}: value out of range`);
  const n = Number(s);
  if (n < 0) throw new Error(`negative number (${n}) not allowed: ${s}`);
  return n;
}

function parseRange(field: (typeof FIELDS)[number], expr: string): void {
  const [range, step, ...extra] = expr.split('/');
  if (extra.length > 0) throw new Error(`too many slashes: ${expr}`);
  let start: number;
  let end: number;
  if (range === '*' || range === '?') {
    start = field.min;
    end = field.max;
  } else {
    const bounds = range!.split('-');
    if (bounds.length > 2) throw new Error(`too many hyphens: ${expr}`);
    start = parseNumber(field, bounds[0]!);
    end = bounds.length === 2 ? parseNumber(field, bounds[1]!) : step !== undefined ? field.max : start;
  }
  if (step !== undefined) {
    const n = parseNumber(field, step);
    if (n === 0) throw new Error(`step of range should be a positive number: ${expr}`);
  }
  if (start < field.min) throw new Error(`beginning of range (${start}) below minimum (${field.min}): ${expr}`);
  if (end > field.max) throw new Error(`end of range (${end}) above maximum (${field.max}): ${expr}`);
  if (start > end) throw new Error(`beginning of range (${start}) beyond end of range (${end}): ${expr}`);
}

/** Throws robfig/cron's error for what ParseStandard refuses. */
export function parseStandardCron(spec: string): void {
  const trimmed = spec.trim();
  if (trimmed === '') throw new Error('empty spec string');
  if (trimmed.startsWith('@')) {
    if (trimmed.startsWith('@every ')) {
      const d = trimmed.slice('@every '.length).trim();
      if (!GO_DURATION.test(d)) throw new Error(`failed to parse duration ${trimmed}: time: invalid duration ${JSON.stringify(d)}`);
      return;
    }
    if (!DESCRIPTORS.has(trimmed)) throw new Error(`unrecognized descriptor: ${trimmed}`);
    return;
  }
  const fields = trimmed.split(/\s+/);
  if (fields.length !== 5) throw new Error(`expected exactly 5 fields, found ${fields.length}: [${fields.join(' ')}]`);
  fields.forEach((f, i) => {
    for (const expr of f.split(',')) parseRange(FIELDS[i]!, expr);
  });
}

let zones: Set<string> | undefined;
function knownTimeZone(tz: string): boolean {
  zones ??= new Set([...Intl.supportedValuesOf('timeZone'), 'UTC', 'Etc/UTC']);
  if (zones.has(tz)) return true;
  // Links the tz database keeps (US/Eastern, Etc/GMT+1…), which Intl accepts without listing them.
  if (!/^[A-Za-z_]+(\/[A-Za-z0-9_+-]+)+$/.test(tz)) return false;
  try {
    new Intl.DateTimeFormat('en', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

type Obj = Record<string, unknown>;
const obj = (v: unknown): Obj | undefined => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Obj) : undefined);

/** The field errors of a CronJob (its name is checked elsewhere for the DNS-1123 form). */
export function validateCronJob(cronJob: Obj): FieldError[] {
  const errors: FieldError[] = [];
  const name = String(obj(cronJob.metadata)?.name ?? '');
  if (name.length > 52) errors.push(fieldErrors.invalid('metadata.name', name, 'must be no more than 52 characters'));
  const spec = obj(cronJob.spec);
  if (!spec) return [...errors, fieldErrors.required('spec.schedule')];
  const schedule = spec.schedule;
  if (typeof schedule !== 'string' || schedule === '') errors.push(fieldErrors.required('spec.schedule'));
  else if (schedule.includes('TZ')) errors.push(fieldErrors.invalid('spec.schedule', schedule, 'cannot use TZ or CRON_TZ in schedule, use timeZone field instead'));
  else {
    try {
      parseStandardCron(schedule);
    } catch (err) {
      errors.push(fieldErrors.invalid('spec.schedule', schedule, (err as Error).message));
    }
  }
  const tz = spec.timeZone;
  if (tz !== undefined && tz !== null) {
    if (typeof tz !== 'string' || tz.toLowerCase() === 'local') {
      errors.push(fieldErrors.invalid('spec.timeZone', tz, 'timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones'));
    } else if (!knownTimeZone(tz)) errors.push(fieldErrors.invalid('spec.timeZone', tz, `unknown time zone ${tz}`));
  }
  const policy = spec.concurrencyPolicy ?? 'Allow';
  if (!['Allow', 'Forbid', 'Replace'].includes(String(policy))) errors.push(fieldErrors.notSupported('spec.concurrencyPolicy', policy, ['Allow', 'Forbid', 'Replace']));
  for (const limit of ['successfulJobsHistoryLimit', 'failedJobsHistoryLimit', 'startingDeadlineSeconds']) {
    const v = spec[limit];
    if (v !== undefined && v !== null && (typeof v !== 'number' || v < 0)) errors.push(fieldErrors.invalid(`spec.${limit}`, v, 'must be greater than or equal to 0'));
  }
  // validateJobSpec: these fields of the job template are ValidateNonnegativeField (an
  // activeDeadlineSeconds of 0 is taken, and fails the Job at once); non-integers are refused as
  // the JSON is decoded (kube-builtin.ts).
  const jobSpec = obj(obj(spec.jobTemplate)?.spec);
  for (const field of ['parallelism', 'completions', 'activeDeadlineSeconds', 'backoffLimit']) {
    const v = jobSpec?.[field];
    if (typeof v === 'number' && v < 0) errors.push(fieldErrors.invalid(`spec.jobTemplate.spec.${field}`, v, 'must be greater than or equal to 0'));
  }
  const podSpec = obj(obj(jobSpec?.template)?.spec);
  const base = 'spec.jobTemplate.spec.template.spec';
  const containers = podSpec?.containers;
  if (!Array.isArray(containers) || containers.length === 0) errors.push(fieldErrors.required(`${base}.containers`));
  else {
    containers.forEach((c, i) => {
      const cname = obj(c)?.name;
      if (typeof cname !== 'string' || cname === '') errors.push(fieldErrors.required(`${base}.containers[${i}].name`));
      else if (cname.length > 63 || !DNS_LABEL.test(cname)) errors.push(fieldErrors.invalid(`${base}.containers[${i}].name`, cname, "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"));
    });
  }
  // ValidatePodSpec: a pod's own deadline is InclusiveRangeError(1, math.MaxInt32).
  const podDeadline = podSpec?.activeDeadlineSeconds;
  if (typeof podDeadline === 'number' && (podDeadline < 1 || podDeadline > 2_147_483_647)) {
    errors.push(fieldErrors.invalid(`${base}.activeDeadlineSeconds`, podDeadline, 'must be between 1 and 2147483647, inclusive'));
  }
  // A pod template's restartPolicy defaults to Always, which no Job accepts.
  const restart = podSpec?.restartPolicy ?? 'Always';
  if (restart !== 'OnFailure' && restart !== 'Never') errors.push(fieldErrors.notSupported(`${base}.restartPolicy`, restart, ['OnFailure', 'Never']));
  return errors;
}
