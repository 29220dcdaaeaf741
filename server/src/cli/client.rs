//! The HTTP side of the command line: finds the server and token, calls the API, turns
//! problem+json answers into readable errors.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::config::Config;
use crate::data_dir::DataDir;

/// Where the API is and the token to use.
#[derive(Debug, Clone)]
pub(crate) struct ApiTarget {
    pub(crate) url: String,
    token: String,
    /// Trusted for an `https://` node, beside the system's roots.
    ca_file: Option<PathBuf>,
}

/// An error with its causes, as one line (reqwest says "error sending request" and keeps the
/// reason, a refused certificate for one, in its sources).
fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// How the server and token were not found, or a call failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ClientError {
    #[error(
        "no token: pass --token, set CARILLON_TOKEN, or run on the machine of a default node \
         (its token is in {0})"
    )]
    NoToken(PathBuf),
    #[error("cannot reach {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{status}: {detail}")]
    Refused { status: u16, detail: String },
}

impl ApiTarget {
    /// From flags or environment, else the default local node and its data directory.
    pub(crate) fn find(
        url: Option<String>,
        token: Option<String>,
        ca_file: Option<PathBuf>,
    ) -> Result<Self, ClientError> {
        let config = Config::default();
        let url = url.unwrap_or_else(|| format!("http://{}", config.http.listen));
        let token = match token {
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
        };
        Ok(Self {
            url: url.trim_end_matches('/').to_owned(),
            token,
            ca_file,
        })
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
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| unreachable(with_causes(&e.without_url())))?;
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
