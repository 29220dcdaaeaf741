// A real OpenID provider (npm's oidc-provider, a certified implementation) for Carillon's
// tests: people sign in through its own login and consent pages, and it issues JWT access
// tokens for the Carillon API (RFC 9068, through its resource indicators), signed with keys it
// generates at start, which it publishes as its JWKS.
//
// Run by the Rust tests as `node server/tests/oidc/provider.mjs` with:
//   OIDC_PORT      the port to listen on, 127.0.0.1 (default 0: any free one)
//   OIDC_AUDIENCE  the resource indicator of the Carillon API (required); access tokens for it
//                  carry it as `aud`; a client may ask for any other https resource too
//   OIDC_ACCOUNTS  JSON: login -> list of groups, e.g. {"alice": ["team-a-dev"]}; any other
//                  login signs in with no groups
//   OIDC_ALG       RS256 (default) or ES256: the key it signs with
//   OIDC_SHORT_TTL seconds an access token of client `carillon-short` lives (default 2)
// Prints one JSON line when it listens: {"issuer": ..., "kid": ...}. Stops on SIGTERM.

import { createServer } from 'node:http';
import { generateKeyPair, exportJWK, calculateJwkThumbprint } from 'jose';
import Provider from 'oidc-provider';

const AUDIENCE = process.env.OIDC_AUDIENCE;
if (!AUDIENCE) {
  console.error('OIDC_AUDIENCE is required');
  process.exit(2);
}
const ACCOUNTS = JSON.parse(process.env.OIDC_ACCOUNTS || '{}');
const ALG = process.env.OIDC_ALG || 'RS256';
const SHORT_TTL = Number(process.env.OIDC_SHORT_TTL || '2');

const { privateKey } = await generateKeyPair(ALG, { extractable: true });
const jwk = await exportJWK(privateKey);
jwk.alg = ALG;
jwk.use = 'sig';
jwk.kid = await calculateJwkThumbprint(jwk);

const server = createServer();
await new Promise((resolve) => server.listen(Number(process.env.OIDC_PORT || '0'), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const publicClient = (clientId) => ({
  client_id: clientId,
  application_type: 'native',
  token_endpoint_auth_method: 'none',
  // The CLI's loopback answer, and the console served by a node on this machine (a native
  // client's loopback redirect takes any port, RFC 8252).
  redirect_uris: ['http://127.0.0.1/callback', 'http://127.0.0.1/'],
  grant_types: ['authorization_code', 'refresh_token', 'urn:ietf:params:oauth:grant-type:device_code'],
  response_types: ['code'],
  id_token_signed_response_alg: ALG,
});

const provider = new Provider(issuer, {
  clients: [publicClient('carillon'), publicClient('carillon-short')],
  jwks: { keys: [jwk] },
  enabledJWA: { authorizationSigningAlgValues: [ALG], idTokenSigningAlgValues: [ALG] },
  claims: { openid: ['sub'], profile: ['preferred_username'], groups: ['groups'] },
  scopes: ['openid', 'offline_access', 'profile', 'groups'],
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, groups: ACCOUNTS[id] || [] };
      },
    };
  },
  async extraTokenClaims(_ctx, token) {
    if (token.kind !== 'AccessToken' || !token.accountId) return undefined;
    return { preferred_username: token.accountId, groups: ACCOUNTS[token.accountId] || [] };
  },
  features: {
    devInteractions: { enabled: true },
    deviceFlow: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: () => AUDIENCE,
      useGrantedResource: () => true,
      getResourceServerInfo: (_ctx, resource, client) => ({
        scope: 'carillon',
        audience: resource,
        accessTokenFormat: 'jwt',
        accessTokenTTL: client.clientId === 'carillon-short' ? SHORT_TTL : 3600,
        jwt: { sign: { alg: ALG } },
      }),
    },
  },
  pkce: { required: () => true },
  // The console exchanges its code from the page: a public client may be called from a
  // loopback origin of any port (its redirect URIs name none).
  clientBasedCORS(_ctx, origin, client) {
    return client.clientAuthMethod === 'none' && /^http:\/\/127\.0\.0\.1:\d+$/.test(origin);
  },
});
// Quiet: a test reads stdout for the line below only.
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

server.on('request', provider.callback());
process.on('SIGTERM', () => server.close(() => process.exit(0)));
console.log(JSON.stringify({ issuer, kid: jwk.kid }));
