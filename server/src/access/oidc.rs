//! People signing in with the bearer JWTs of an OpenID Connect provider. The node keeps the
//! provider's keys, read through its discovery document's `jwks_uri`: again when they are
//! older than [`REFRESH_EVERY`], and when a token names a key the node does not know (the
//! provider rotated its keys), at most once per [`REFETCH_AT_MOST_EVERY`] so that tokens
//! naming made-up keys cannot make the node hammer the provider. The token itself is checked by
//! [`super::jwt`]; which roles its groups carry is [`super::grants`]'.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::jwt::{self, Expected, Identity, Refusal, VerifyingKey};

/// How long the provider's keys are used before they are read again.
const REFRESH_EVERY: Duration = Duration::from_secs(15 * 60);

/// How long keys read once keep serving while the provider cannot be reached: a key the
/// provider dropped (leaked, say) is not trusted for ever by a node cut off from it.
const KEYS_SERVE_AT_MOST: Duration = Duration::from_secs(24 * 3600);

/// How often a token naming an unknown key may make the node read the keys again.
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(5);

/// How long a call to the provider may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// `[auth.oidc]`: bearer JWTs of an OpenID Connect provider, mapped to roles by group.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OidcConfig {
    /// The provider's issuer URL, exactly as its tokens' `iss` says; its discovery document
    /// is read from `{issuer}/.well-known/openid-configuration`. `https://` (plain `http://`
    /// only on a loopback address).
    pub issuer: String,
    /// What the tokens' `aud` must name: the identifier the provider gives this API.
    pub audience: String,
    /// The claim holding the person's groups; a dotted path reaches into objects
    /// (`realm_access.roles`).
    pub groups_claim: String,
    /// The claim naming the person in the audit trail; `sub` when a token lacks it.
    pub name_claim: String,
    /// Seconds of clock difference with the provider tolerated on `exp` and `nbf`.
    pub clock_skew_s: u64,
    /// Groups whose members administer the whole cluster, every namespace included.
    pub cluster_admin_groups: Vec<String>,
    /// Groups whose members read the whole cluster.
    pub cluster_viewer_groups: Vec<String>,
    /// CA certificates (PEM) trusted for the provider, beside the system's roots.
    pub tls_ca: Option<PathBuf>,
    /// The provider's public client (no secret) that `carillon login` signs people in with;
    /// `GET /auth/oidc` tells the CLI where and how. None: people bring their own tokens.
    pub client_id: Option<String>,
    /// The scopes `carillon login` asks for (`offline_access` for a refresh token; add the
    /// scope the provider ties to this API's audience, if it has one).
    pub scopes: String,
}

impl Default for OidcConfig {
    fn default() -> Self {
        Self {
            issuer: String::new(),
            audience: String::new(),
            groups_claim: "groups".to_owned(),
            name_claim: "preferred_username".to_owned(),
            clock_skew_s: 30,
            cluster_admin_groups: Vec::new(),
            cluster_viewer_groups: Vec::new(),
            tls_ca: None,
            client_id: None,
            scopes: "openid offline_access".to_owned(),
        }
    }
}

/// Whether `url` is `https://`, or `http://` on a loopback address (a provider on this
/// machine): where a provider's keys may be read from.
pub fn secure_or_loopback(url: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(url) else {
        return false;
    };
    let loopback = url.host_str().is_some_and(|host| {
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    url.scheme() == "https" || (url.scheme() == "http" && loopback)
}

/// Why a bearer JWT opened nothing.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    /// The token is not good: `401`.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The provider's keys could not be read, so no token can be checked: `503`.
    #[error("the identity provider's keys could not be read: {0}")]
    Provider(String),
}

#[derive(Debug, Default)]
struct Keys {
    keys: Vec<VerifyingKey>,
    /// When the keys in hand were read.
    read_at: Option<Instant>,
    /// When they were last asked for, read or not.
    tried_at: Option<Instant>,
}

/// The part of the provider's discovery document used.
#[derive(Debug, Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

/// Checks bearer JWTs against the provider of `[auth.oidc]`.
#[derive(Debug)]
pub struct OidcVerifier {
    settings: OidcConfig,
    http: reqwest::Client,
    keys: Mutex<Keys>,
    /// One read of the keys at a time: tokens arriving meanwhile wait for it.
    reading: tokio::sync::Mutex<()>,
}

impl OidcVerifier {
    pub fn new(settings: OidcConfig) -> Result<Self, carillon_tls::TlsError> {
        let tls = carillon_tls::ClientTls {
            ca: settings.tls_ca.clone(),
            cert: None,
            key: None,
        };
        // The provider's answers are read as they are: a redirect elsewhere is not followed.
        let http = tls
            .apply(
                carillon_tls::http_client_builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .timeout(CALL_TIMEOUT)
                    .connect_timeout(CALL_TIMEOUT),
            )?
            .build()
            .map_err(|err| carillon_tls::TlsError::Config(err.to_string()))?;
        Ok(Self {
            settings,
            http,
            keys: Mutex::new(Keys::default()),
            reading: tokio::sync::Mutex::new(()),
        })
    }

    pub fn settings(&self) -> &OidcConfig {
        &self.settings
    }

    /// Who `token` names, at `now_s` (seconds since the epoch).
    pub async fn verify(&self, token: &str, now_s: i64) -> Result<Identity, SignInError> {
        let header = jwt::header(token)?;
        let expected = Expected {
            issuer: &self.settings.issuer,
            audience: &self.settings.audience,
            leeway_s: i64::try_from(self.settings.clock_skew_s).unwrap_or(300),
            now_s,
            groups_claim: &self.settings.groups_claim,
            name_claim: &self.settings.name_claim,
        };
        self.read_keys(Reason::Stale).await?;
        let mut candidates = self.candidates(&header);
        if candidates.is_empty() {
            self.read_keys(Reason::UnknownKey).await?;
            candidates = self.candidates(&header);
        }
        if candidates.is_empty() {
            let kid = header
                .kid
                .as_deref()
                .map_or_else(|| "none".to_owned(), jwt::shown);
            return Err(Refusal::UnknownKey(kid).into());
        }
        // Of several keys, the one that verified says why its claims fail.
        let mut refusal = Refusal::Signature;
        for key in &candidates {
            match jwt::verify(token, key, &expected) {
                Ok(identity) => return Ok(identity),
                Err(Refusal::Signature) => {}
                Err(err) => refusal = err,
            }
        }
        Err(refusal.into())
    }

    /// The keys that may have signed a token of `header`: the one its `kid` names, or every
    /// key of its algorithm when it names none.
    fn candidates(&self, header: &jwt::Header) -> Vec<VerifyingKey> {
        self.keys()
            .keys
            .iter()
            .filter(|key| key.algorithm == header.algorithm)
            .filter(|key| header.kid.is_none() || key.kid == header.kid)
            .cloned()
            .collect()
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, Keys> {
        self.keys
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wants_read(&self, reason: Reason) -> bool {
        let keys = self.keys();
        match reason {
            Reason::Stale => {
                keys.read_at.is_none_or(|at| at.elapsed() >= REFRESH_EVERY)
                    && keys
                        .tried_at
                        .is_none_or(|at| at.elapsed() >= REFETCH_AT_MOST_EVERY)
            }
            Reason::UnknownKey => keys
                .tried_at
                .is_none_or(|at| at.elapsed() >= REFETCH_AT_MOST_EVERY),
        }
    }

    /// Reads the keys again when `reason` calls for it. A failed read keeps the keys in hand
    /// (tokens keep working while the provider is down); with none in hand it is an error.
    async fn read_keys(&self, reason: Reason) -> Result<(), SignInError> {
        if !self.wants_read(reason) {
            return self.any_keys();
        }
        let _reading = self.reading.lock().await;
        if !self.wants_read(reason) {
            return self.any_keys();
        }
        self.keys().tried_at = Some(Instant::now());
        match self.fetch_keys().await {
            Ok(keys) => {
                tracing::info!(issuer = %self.settings.issuer, keys = keys.len(), "read the identity provider's keys");
                let mut held = self.keys();
                held.keys = keys;
                held.read_at = Some(Instant::now());
                Ok(())
            }
            Err(err) => {
                tracing::warn!(issuer = %self.settings.issuer, error = %err, "could not read the identity provider's keys");
                self.any_keys().map_err(|_| SignInError::Provider(err))
            }
        }
    }

    /// Whether keys in hand may serve: read, and not longer ago than [`KEYS_SERVE_AT_MOST`].
    fn any_keys(&self) -> Result<(), SignInError> {
        match self.keys().read_at {
            Some(at) if at.elapsed() < KEYS_SERVE_AT_MOST => Ok(()),
            Some(_) => Err(SignInError::Provider(
                "the keys in hand are over a day old and could not be read again".to_owned(),
            )),
            None => Err(SignInError::Provider(
                "they were not read yet; the last try failed".to_owned(),
            )),
        }
    }

    async fn fetch_keys(&self) -> Result<Vec<VerifyingKey>, String> {
        let issuer = self.settings.issuer.trim_end_matches('/');
        let discovery_url = format!("{issuer}/.well-known/openid-configuration");
        let discovery: Discovery = serde_json::from_slice(&self.get(&discovery_url).await?)
            .map_err(|_| {
                format!("{discovery_url} is not a discovery document with issuer and jwks_uri")
            })?;
        if discovery.issuer.trim_end_matches('/') != issuer {
            return Err(format!(
                "{discovery_url} names issuer {:?}, not the configured {issuer:?}",
                discovery.issuer
            ));
        }
        if !secure_or_loopback(&discovery.jwks_uri) {
            return Err(format!(
                "{discovery_url} names jwks_uri {:?}: keys are read over https:// only (http:// \
                 on a loopback address)",
                discovery.jwks_uri
            ));
        }
        let document = self.get(&discovery.jwks_uri).await?;
        let keys =
            jwt::keys_of_jwks(&document).map_err(|why| format!("{}: {why}", discovery.jwks_uri))?;
        if keys.is_empty() {
            return Err(format!(
                "{} holds no RS256 or ES256 signing key",
                discovery.jwks_uri
            ));
        }
        Ok(keys)
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let answer = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|err| format!("{url}: {err}"))?;
        if !answer.status().is_success() {
            return Err(format!("{url} answered {}", answer.status()));
        }
        Ok(answer
            .bytes()
            .await
            .map_err(|err| format!("{url}: {err}"))?
            .to_vec())
    }
}

#[derive(Debug, Clone, Copy)]
enum Reason {
    /// Every check: read when the keys are older than [`REFRESH_EVERY`] or were never read.
    Stale,
    /// A token names a key the node does not hold.
    UnknownKey,
}
