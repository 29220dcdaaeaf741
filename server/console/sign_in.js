// Signing a person in through the cluster's OpenID provider, in the page: the authorization
// code flow with PKCE (RFC 7636) as the provider's public client, the page's own address as
// the redirect URI. The access token (a JWT for this API's audience) is then kept for the tab
// like a pasted token; the provider's pages, never this one, see the person's password.

import { ApiError } from './api.js';

const PENDING_KEY = 'carillon.console.sign-in';

/** How people sign in here (`GET /auth/oidc`: issuer, client id, audience, scopes), or null
 *  when they do not. */
export async function signInSettings() {
  let res;
  try {
    res = await fetch('/auth/oidc', { headers: { Accept: 'application/json' }, credentials: 'omit', cache: 'no-store' });
  } catch {
    throw new ApiError(0, { title: 'Network error', detail: 'the server could not be reached; check your connection and retry' });
  }
  if (res.status === 404) return null;
  const answer = await res.json().catch(() => null);
  if (!res.ok || !answer) throw new ApiError(res.status, answer);
  return answer;
}

/** The address the provider sends the browser back to: this page, without hash or query. */
function redirectUri() {
  return `${location.origin}/`;
}

function base64url(bytes) {
  let text = '';
  for (const b of bytes) text += String.fromCharCode(b);
  return btoa(text).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function randomText(bytes) {
  const b = new Uint8Array(bytes);
  crypto.getRandomValues(b);
  return base64url(b);
}

/** The provider's discovery document, checked to be the issuer's own (OpenID Connect
 *  Discovery 1.0, section 4.3). */
async function discover(issuer) {
  const url = `${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`;
  let res;
  try {
    res = await fetch(url, { credentials: 'omit', cache: 'no-store' });
  } catch {
    throw new Error(`the identity provider (${issuer}) could not be reached`);
  }
  if (!res.ok) throw new Error(`the identity provider answered ${res.status} for its discovery document`);
  const doc = await res.json().catch(() => null);
  if (!doc || doc.issuer !== issuer) throw new Error(`the discovery document at ${url} is not issuer ${issuer}'s`);
  if (!doc.authorization_endpoint || !doc.token_endpoint) throw new Error('the identity provider publishes no authorization or token endpoint');
  return doc;
}

/** Sends the browser to the provider's sign-in page; `returnTo` is the console's address to
 *  open once signed in. */
export async function startSignIn(settings, returnTo) {
  if (!globalThis.crypto || !crypto.subtle) {
    throw new Error('this page is not served over HTTPS (or from this machine), so the browser offers no hashing to sign in with');
  }
  const doc = await discover(settings.issuer);
  const verifier = randomText(48);
  const state = randomText(24);
  const digest = await crypto.subtle.digest('SHA-256', new TextEncoder().encode(verifier));
  sessionStorage.setItem(PENDING_KEY, JSON.stringify({
    state,
    verifier,
    issuer: settings.issuer,
    tokenEndpoint: doc.token_endpoint,
    clientId: settings.client_id,
    audience: settings.audience,
    returnTo,
  }));
  const q = new URLSearchParams({
    response_type: 'code',
    client_id: settings.client_id,
    redirect_uri: redirectUri(),
    scope: settings.scopes,
    state,
    code_challenge: base64url(new Uint8Array(digest)),
    code_challenge_method: 'S256',
    resource: settings.audience,
  });
  location.assign(`${doc.authorization_endpoint}?${q}`);
}

/** Finishes a sign-in the provider sent the browser back from (`?code=…&state=…` on the
 *  page's address): `{ token, returnTo }`; null when the address carries none, or one that is
 *  not for the sign-in this tab started. Throws, naming what went wrong, when the provider
 *  refused or the exchange fails. */
export async function finishSignIn() {
  const params = new URLSearchParams(location.search);
  const code = params.get('code');
  const error = params.get('error');
  if (!code && !error) return null;
  // The code is single-use and must not stay in the address bar or the history.
  history.replaceState(null, '', `${location.pathname}${location.hash}`);
  let pending = null;
  try {
    pending = JSON.parse(sessionStorage.getItem(PENDING_KEY) || 'null');
  } catch {
    pending = null;
  }
  // An answer to no sign-in of this tab (a link someone sent) is ignored, and leaves a
  // sign-in under way, or the tab's session, as it was.
  if (!pending || pending.state !== params.get('state')) return null;
  sessionStorage.removeItem(PENDING_KEY);
  if (error) throw new Error(`the identity provider did not sign you in: ${params.get('error_description') || error}`);
  // RFC 9207: a provider that names itself must be the one this tab asked.
  const iss = params.get('iss');
  if (iss && iss !== pending.issuer) throw new Error(`the answer came from ${iss}, not ${pending.issuer}`);
  const body = new URLSearchParams({
    grant_type: 'authorization_code',
    code,
    redirect_uri: redirectUri(),
    client_id: pending.clientId,
    code_verifier: pending.verifier,
    resource: pending.audience,
  });
  let res;
  try {
    res = await fetch(pending.tokenEndpoint, { method: 'POST', body, credentials: 'omit', cache: 'no-store' });
  } catch {
    throw new Error('the identity provider could not be reached to finish the sign-in (does it allow this page\u2019s origin?)');
  }
  const answer = await res.json().catch(() => ({}));
  if (!res.ok || typeof answer.access_token !== 'string') {
    throw new Error(`the identity provider gave no token: ${answer.error_description || answer.error || `HTTP ${res.status}`}`);
  }
  return { token: answer.access_token, returnTo: pending.returnTo };
}
