//! The HTTP side of the command line: finds the server and token, calls the API, turns
//! problem+json answers into readable errors.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::client_config::{ClientConfig, ClientConfigError};
use crate::config::Config;
use crate::data_dir::DataDir;

/// Where the API is and the token to use.
#[derive(Debug, Clone)]
pub(crate) struct ApiTarget {
    pub(crate) url: String,
    token: String,
    /// Trusted for an `https://` node, beside the system's roots.
    ca_file: Option<PathBuf>,
    /// The namespace of the calls that work in one (the server's `default` when `None`).
    namespace: Option<String>,
    /// `namespace` was given on the command line or in the environment, not by the settings
    /// file: a file to apply that names another is refused rather than followed.
    namespace_given: bool,
}

/// How the server and token were not found, or a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error(
        "no token: pass --token, set CARILLON_TOKEN, sign in with `carillon login`, or run on \
         the machine of a default node (its token is in {0})"
    )]
    NoToken(PathBuf),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{status}: {detail}")]
    Refused { status: u16, detail: String },
    #[error(transparent)]
    Settings(#[from] ClientConfigError),
    #[error("--namespace: {0}")]
    Namespace(String),
    #[error("sign-in: {0}")]
    SignIn(String),
}

/// The node client commands talk to, and the CA trusted for it: from flags or environment,
/// else the client settings file ([`ClientConfig`]), else the default local node.
pub(crate) fn node_of(
    url: Option<String>,
    ca_file: Option<PathBuf>,
) -> Result<(String, Option<PathBuf>), ClientError> {
    let settings = ClientConfig::load()?;
    let url = url
        .or(settings.url)
        .unwrap_or_else(|| format!("http://{}", Config::default().http.listen));
    Ok((
        url.trim_end_matches('/').to_owned(),
        ca_file.or(settings.ca_file),
    ))
}

impl ApiTarget {
    /// The node as [`node_of`] finds it; the token from flags or environment, else the
    /// person's sign-in there (`carillon login`, refreshed when it has expired), else the
    /// default local node's admin token.
    pub(crate) async fn find(
        url: Option<String>,
        token: Option<String>,
        ca_file: Option<PathBuf>,
        namespace: Option<String>,
    ) -> Result<Self, ClientError> {
        let settings = ClientConfig::load()?;
        let config = Config::default();
        let (url, ca_file) = node_of(url, ca_file)?;
        let namespace_given = namespace.is_some();
        if let Some(name) = &namespace {
            crate::namespaces::check_name(name).map_err(ClientError::Namespace)?;
        }
        let namespace = namespace.or(settings.namespace);
        let token = match token {
            Some(token) => token,
            None => match super::login::stored_token(&url, ca_file.as_ref()).await? {
                Some(token) => token,
                None => {
                    let path = config.data_dir().join("admin-token");
                    let found = DataDir::open(&config.data_dir())
                        .ok()
                        .filter(|_| path.is_file())
                        .and_then(|dir| dir.admin_token().ok());
                    found
                        .ok_or(ClientError::NoToken(path))?
                        .value
                        .expose()
                        .to_owned()
                }
            },
        };
        Ok(Self {
            url,
            token,
            ca_file,
            namespace,
            namespace_given,
        })
    }

    /// The same node and token, working in `namespace` (a file's): refused when the command
    /// line or environment named another.
    pub(crate) fn in_namespace(&self, namespace: &str) -> Result<Self, String> {
        crate::namespaces::check_name(namespace).map_err(|why| format!("namespace: {why}"))?;
        match &self.namespace {
            Some(given) if self.namespace_given && given != namespace => Err(format!(
                "it is for namespace {namespace:?}, and --namespace (or CARILLON_NAMESPACE) \
                 says {given:?}"
            )),
            _ => Ok(Self {
                namespace: Some(namespace.to_owned()),
                namespace_given: true,
                ..self.clone()
            }),
        }
    }

    /// `path` with this target's namespace added when its operation works in one.
    fn scoped(&self, path: &str) -> String {
        let Some(namespace) = &self.namespace else {
            return path.to_owned();
        };
        let (bare, query) = match path.split_once('?') {
            Some((bare, query)) => (bare, Some(query)),
            None => (path, None),
        };
        // Which operations work in a namespace is read from the node's own API document: a
        // resource's path (`/jobs/{id}`) takes none, ids being unique across namespaces.
        let in_one = crate::api::takes_namespace(bare);
        let named = query.is_some_and(|q| q.split('&').any(|p| p.starts_with("namespace=")));
        if !in_one || named {
            return path.to_owned();
        }
        let separator = if query.is_some() { '&' } else { '?' };
        // A namespace's name is lowercase letters, digits and `-`: nothing to encode.
        format!("{path}{separator}namespace={namespace}")
    }

    /// Calls `method path` with an optional JSON body; the answer's JSON, or a readable error.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let unreachable = |reason: String| ClientError::Unreachable {
            url: self.url.clone(),
            reason,
        };
        let tls = carillon_tls::ClientTls {
            ca: self.ca_file.clone(),
            ..carillon_tls::ClientTls::default()
        };
        let client = tls
            .apply(carillon_tls::http_client_builder().timeout(Duration::from_secs(30)))
            .map_err(|e| unreachable(format!("--ca-file: {e}")))?
            .build()
            .map_err(|e| unreachable(e.to_string()))?;
        let mut request = client
            .request(method, format!("{}{}", self.url, self.scoped(path)))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(carillon_tls::with_causes(&e.without_url())))?;
        let status = response.status();
        let bytes = response.bytes().await.unwrap_or_default();
        let json: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(json);
        }
        let detail = json["detail"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        Err(ClientError::Refused {
            status: status.as_u16(),
            detail,
        })
    }
}
