// The REST API (/api/v1): the fetch wrapper and its ApiError, the token and the namespace
// kept for the tab, the query-string helper, and the cache of job names (runs show their job
// by name).

const TOKEN_KEY = 'carillon.console.token';
const NAMESPACE_KEY = 'carillon.console.namespace';
const API = '/api/v1';

// The collections that are a namespace's: calls to them name the namespace chosen in the
// page (`?namespace=`); a resource by id is found in its own, whatever is chosen.
const NAMESPACED = new Set(['/jobs', '/jobs/bulk', '/workflows', '/runs', '/dead-letters',
  '/tasks', '/schedules/preview', '/calendars', '/audit', '/tokens', '/grants', '/apps',
  '/executors']);

export class ApiError extends Error {
  constructor(status, problem) {
    const p = problem && typeof problem === 'object' ? problem : {};
    super(p.detail || p.title || `HTTP ${status}`);
    this.status = status;
    this.title = p.title || '';
    this.detail = p.detail || '';
    this.field = p.field || '';
    this.type = p.type || '';
  }
}

/** The token the tab signed in with, or null. */
export function token() {
  try {
    return sessionStorage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

/** Keeps the token for this tab; throws when the browser refuses to store it. */
export function storeToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
}

/** Forgets the token and what was learnt with it (the namespace, the job names). */
export function endSession() {
  try {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(NAMESPACE_KEY);
  } catch {
    /* ignore */
  }
  jobNames.clear();
}

/** The namespace the tab works in; '' before one is chosen (the server's default then). */
export function namespace() {
  try {
    return sessionStorage.getItem(NAMESPACE_KEY) || '';
  } catch {
    return '';
  }
}

export function chooseNamespace(name) {
  sessionStorage.setItem(NAMESPACE_KEY, name);
  jobNames.clear();
}

/** `path` naming the chosen namespace when it is a namespace's collection and names none. */
function inNamespace(path) {
  const chosen = namespace();
  const [bare, q = ''] = path.split('?');
  if (!chosen || !NAMESPACED.has(bare)) return path;
  const params = new URLSearchParams(q);
  if (params.has('namespace')) return path;
  params.set('namespace', chosen);
  return `${bare}?${params}`;
}

// What to do when the server refuses the token in use (the shell signs the user out).
let onTokenRefused = () => {};
export function whenTokenRefused(fn) {
  onTokenRefused = fn;
}

/** Calls the API; answers the parsed JSON (null for 204). A 401 signs the user out. A
 *  namespace's collection is called in the chosen namespace unless `allNamespaces`. */
export async function api(method, path, body, { signal, tokenOverride, noSignOut, allNamespaces } = {}) {
  const headers = { Accept: 'application/json, application/problem+json' };
  const t = tokenOverride ?? token();
  if (t) headers.Authorization = `Bearer ${t}`;
  const init = { method, headers, cache: 'no-store', credentials: 'omit', signal };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(API + (allNamespaces ? path : inNamespace(path)), init);
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError(0, { title: 'Network error', detail: 'the server could not be reached; check your connection and retry' });
  }
  const text = await res.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data || { title: res.statusText, detail: text.slice(0, 500) || `HTTP ${res.status}` });
    // Only if the refused token is still the one in use: a late answer to a request made
    // with an older token must not sign out whoever has just signed in again.
    if (res.status === 401 && !noSignOut && t && t === token()) onTokenRefused('Your token was refused: sign in again.');
    throw err;
  }
  learnJobNames(data);
  return data;
}

// Runs carry their job's name (`job_name`, null once the job is deleted): remember it, so a
// run shows its job without asking for the job.
function learnJobNames(data) {
  if (!data || typeof data !== 'object') return;
  const learn = (r) => {
    if (!r || r.job_id === undefined || !('job_name' in r)) return;
    if (typeof r.job_name === 'string') rememberJob({ id: r.job_id, name: r.job_name });
    else forgetJob(r.job_id);
  };
  learn(data);
  for (const r of data.runs || []) learn(r);
  for (const r of data.recent_failures || []) learn(r);
  for (const l of data.late_fires || []) learn(l && l.run);
}

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const enc = encodeURIComponent;

// Job names, fetched once per id (runs show their job by name). `null` = the job is gone.
const jobNames = new Map();
const nameQueue = [];
let namesInFlight = 0;

export function rememberJob(job) {
  if (job && job.id !== undefined) jobNames.set(String(job.id), { name: job.name, promise: Promise.resolve(job.name) });
}

export function forgetJob(id) {
  jobNames.set(String(id), { name: null, promise: Promise.resolve(null) });
}

export function jobName(id) {
  const key = String(id);
  const known = jobNames.get(key);
  if (known) return known.promise;
  const entry = { name: undefined };
  entry.promise = new Promise((resolve) => {
    nameQueue.push(async () => {
      try {
        const job = await api('GET', `/jobs/${enc(key)}`);
        entry.name = job.name;
      } catch (e) {
        // A deleted job shows as its id; a passing error is retried next time.
        if (e instanceof ApiError && e.status === 404) entry.name = null;
        else jobNames.delete(key);
      }
      resolve(entry.name ?? null);
    });
    pumpNames();
  });
  jobNames.set(key, entry);
  return entry.promise;
}

/** The name of a job as known now: a string, null for a deleted job, undefined when not
 *  (yet) known. */
export function cachedJobName(id) {
  const known = jobNames.get(String(id));
  return known ? known.name : undefined;
}

function pumpNames() {
  while (namesInFlight < 4 && nameQueue.length) {
    const task = nameQueue.shift();
    namesInFlight += 1;
    task().finally(() => {
      namesInFlight -= 1;
      pumpNames();
    });
  }
}
