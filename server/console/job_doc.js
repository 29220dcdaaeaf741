import { childrenDoc } from './job_policies.js';

// The job document that the create/edit form fills in and the job page shows (docFromJob),
// the choices of its option fields, and the time zones the form offers.

export const BALANCES = [
  'round_robin', 'random', 'weighted', 'least_busy', 'consistent_hash', 'first', 'last',
  'least_frequently_used', 'least_recently_used', 'failover', 'busyover',
];
export const BACKOFFS = ['fixed', 'exponential'];
export const MISFIRES = ['fire_once', 'skip', 'catch_up'];
export const OVERLAPS = ['allow', 'skip', 'queue', 'replace'];
export const ALERT_FORMATS = ['json', 'slack'];
export const COMMON_ZONES = [
  'UTC', 'Europe/London', 'Europe/Dublin', 'Europe/Lisbon', 'Europe/Paris', 'Europe/Berlin',
  'Europe/Madrid', 'Europe/Rome', 'Europe/Amsterdam', 'Europe/Brussels', 'Europe/Zurich',
  'Europe/Stockholm', 'Europe/Warsaw', 'Europe/Athens', 'Europe/Helsinki', 'Europe/Kyiv',
  'Europe/Istanbul', 'Europe/Moscow', 'Africa/Cairo', 'Africa/Johannesburg', 'Africa/Lagos',
  'Africa/Nairobi', 'Asia/Dubai', 'Asia/Karachi', 'Asia/Kolkata', 'Asia/Dhaka', 'Asia/Bangkok',
  'Asia/Jakarta', 'Asia/Singapore', 'Asia/Shanghai', 'Asia/Hong_Kong', 'Asia/Taipei',
  'Asia/Seoul', 'Asia/Tokyo', 'Australia/Perth', 'Australia/Adelaide', 'Australia/Sydney',
  'Pacific/Auckland', 'Pacific/Honolulu', 'America/Anchorage', 'America/Los_Angeles',
  'America/Vancouver', 'America/Denver', 'America/Phoenix', 'America/Chicago',
  'America/Mexico_City', 'America/New_York', 'America/Toronto', 'America/Bogota',
  'America/Lima', 'America/Santiago', 'America/Sao_Paulo', 'America/Argentina/Buenos_Aires',
  'Atlantic/Reykjavik',
];

/** The job document the form shows, from a JobView (for edits) or the defaults. */
export function docFromJob(job) {
  const sharding = job.sharding || {};
  const retry = job.retry || {};
  const alerts = job.alerts && job.alerts.webhook ? job.alerts : null;
  return {
    name: job.name,
    app: job.app,
    handler: job.handler,
    schedule: job.schedule,
    timezone: job.timezone,
    args: job.args === undefined ? null : job.args,
    balance: job.balance || 'round_robin',
    retry: {
      max_attempts: retry.max_attempts ?? 1,
      backoff: retry.backoff || 'fixed',
      initial_delay_ms: retry.initial_delay_ms ?? 1000,
      max_delay_ms: retry.max_delay_ms ?? 60000,
    },
    timeout_ms: job.timeout_ms ?? null,
    misfire: job.misfire || 'fire_once',
    catch_up_window_ms: job.catch_up_window_ms ?? 3600000,
    overlap: job.overlap || 'allow',
    priority: job.priority ?? 5,
    sharding: sharding.split ? { split: true } : sharding.broadcast ? { broadcast: true } : sharding.count ? { count: sharding.count } : {},
    alerts: alerts ? { webhook: alerts.webhook, format: alerts.format || 'json', late_after_ms: alerts.late_after_ms ?? 60000 } : null,
    bounds: job.bounds ?? null,
    jitter_ms: job.jitter_ms ?? null,
    calendars: job.calendars || [],
    pause_after_failures: job.pause_after_failures ?? null,
    children: childrenDoc(job.children),
    http: job.http ?? null,
    flow: job.flow ? { on_full: 'queue', ...job.flow } : null,
  };
}

export function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}
