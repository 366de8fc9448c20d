// The portal's REST API, as the pages use it: a session cookie, and the CSRF token
// (returned by login and /api/me) in X-CSRF-Token on every change.

let csrf = null;

export function setCsrf(token) { csrf = token; }

export class ApiError extends Error {
  constructor(status, body) {
    super(body && body.error ? body.error : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

export async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && csrf) headers['X-CSRF-Token'] = csrf;
  const r = await fetch(`/api${path}`, {
    method, headers, credentials: 'same-origin',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const type = r.headers.get('content-type') || '';
  const data = type.includes('json') ? await r.json() : null;
  if (!r.ok) throw new ApiError(r.status, data);
  return data;
}

export function wsUrl(path) {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}/api${path}`;
}

export const enc = encodeURIComponent;
