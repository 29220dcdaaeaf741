//! `carillon login` and `carillon logout`: a person signs in with the cluster's identity
//! provider (`GET /auth/oidc` says which), by the device flow (RFC 8628: a code entered on any
//! device, for SSH sessions and machines without a browser) or in a browser on this machine
//! (authorization code with PKCE, answered to a loopback address: RFC 8252). The tokens are
//! kept by [`credentials`](super::credentials) for the client commands, which refresh the
//! access token when it has expired.

use std::path::PathBuf;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::client::ClientError;
use super::credentials::{self, Credential};

/// How long a person has to finish signing in in the browser.
const BROWSER_WAIT: Duration = Duration::from_secs(300);

/// A token this close to its expiry is refreshed before it is used.
const REFRESH_BEFORE_S: i64 = 30;

/// How the person signs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    /// A code to enter at the provider's page, on any device.
    Device,
    /// The provider's page in a browser on this machine; `open` starts one.
    Browser { open: bool },
}

/// What `GET /auth/oidc` answers.
#[derive(Debug, Deserialize)]
struct SignIn {
    issuer: String,
    client_id: String,
    audience: String,
    scopes: String,
}

/// The provider's endpoints, from its discovery document.
#[derive(Debug, Deserialize)]
struct Endpoints {
    token_endpoint: String,
    authorization_endpoint: Option<String>,
    device_authorization_endpoint: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Tokens {
    access_token: String,
    refresh_token: Option<String>,
    expires_in: Option<i64>,
}

fn failed(why: impl Into<String>) -> ClientError {
    ClientError::SignIn(why.into())
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_secs()).unwrap_or(i64::MAX)
        })
}

/// When a token the provider says lives `expires_in` seconds expires: its word taken within a
/// day (a provider's number never overflows anything here), five minutes when it says nothing.
fn expiry(expires_in: Option<i64>) -> i64 {
    now_s().saturating_add(expires_in.unwrap_or(300).clamp(0, 86_400))
}

fn http(ca_file: Option<&PathBuf>) -> Result<reqwest::Client, ClientError> {
    let tls = carillon_tls::ClientTls {
        ca: ca_file.cloned(),
        ..carillon_tls::ClientTls::default()
    };
    tls.apply(
        carillon_tls::http_client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(30)),
    )
    .map_err(|err| failed(format!("--ca-file: {err}")))?
    .build()
    .map_err(|err| failed(err.to_string()))
}

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value, ClientError> {
    let answer = http
        .get(url)
        .send()
        .await
        .map_err(|err| failed(format!("{url}: {}", err.without_url())))?;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        Ok(body)
    } else {
        let detail = body["detail"].as_str().unwrap_or("no detail");
        Err(failed(format!("{url} answered {status}: {detail}")))
    }
}

/// Posts `fields` as a form to the provider: its JSON answer, or its OAuth error
/// (`error`, `error_description`).
async fn post_form(
    http: &reqwest::Client,
    url: &str,
    fields: &[(&str, &str)],
) -> Result<Result<Value, (String, String)>, ClientError> {
    let answer = http
        .post(url)
        .form(fields)
        .send()
        .await
        .map_err(|err| failed(format!("{url}: {}", err.without_url())))?;
    let status = answer.status();
    let body: Value = answer.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        return Ok(Ok(body));
    }
    let code = body["error"].as_str().unwrap_or("unknown_error").to_owned();
    let description = body["error_description"]
        .as_str()
        .unwrap_or("no description")
        .to_owned();
    Ok(Err((code, description)))
}

fn tokens_of(answer: Value) -> Result<Tokens, ClientError> {
    serde_json::from_value(answer)
        .map_err(|_| failed("the provider's token answer holds no access_token"))
}

/// Signs a person in for the node at `url` by `flow`, and keeps the tokens.
pub(crate) async fn login(
    url: &str,
    ca_file: Option<&PathBuf>,
    flow: Flow,
) -> Result<String, ClientError> {
    let http = http(ca_file)?;
    let sign_in: SignIn = serde_json::from_value(
        get_json(&http, &format!("{url}/auth/oidc")).await?,
    )
    .map_err(|_| {
        failed(format!(
            "{url}/auth/oidc is not a Carillon node's sign-in settings"
        ))
    })?;
    let discovery = format!(
        "{}/.well-known/openid-configuration",
        sign_in.issuer.trim_end_matches('/')
    );
    let endpoints: Endpoints = serde_json::from_value(get_json(&http, &discovery).await?)
        .map_err(|_| failed(format!("{discovery} names no token_endpoint")))?;
    let tokens = match flow {
        Flow::Device => device(&http, &sign_in, &endpoints).await?,
        Flow::Browser { open } => browser(&http, &sign_in, &endpoints, open).await?,
    };
    let name = display_name(&tokens.access_token);
    credentials::save(
        url,
        Credential {
            issuer: sign_in.issuer,
            client_id: sign_in.client_id,
            audience: sign_in.audience,
            token_endpoint: endpoints.token_endpoint,
            expires_at_s: expiry(tokens.expires_in),
            access_token: tokens.access_token,
            refresh_token: tokens.refresh_token,
        },
    )
    .map_err(|err| failed(err.to_string()))?;
    Ok(name)
}

/// Forgets the tokens kept for `url`: false when there were none.
pub(crate) fn logout(url: &str) -> Result<bool, ClientError> {
    credentials::remove(url).map_err(|err| failed(err.to_string()))
}

/// The access token kept for `url`, refreshed first when it has (nearly) expired; `None`
/// when nobody signed in there.
pub(crate) async fn stored_token(
    url: &str,
    ca_file: Option<&PathBuf>,
) -> Result<Option<String>, ClientError> {
    let Some(credential) = credentials::load(url).map_err(|err| failed(err.to_string()))? else {
        return Ok(None);
    };
    if credential.expires_at_s.saturating_sub(REFRESH_BEFORE_S) > now_s() {
        return Ok(Some(credential.access_token));
    }
    let Some(refresh_token) = credential.refresh_token.clone() else {
        return Err(failed(
            "the sign-in has expired and the provider gave no refresh token: run `carillon login`",
        ));
    };
    let http = http(ca_file)?;
    let answer = post_form(
        &http,
        &credential.token_endpoint,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh_token),
            ("client_id", &credential.client_id),
            ("resource", &credential.audience),
        ],
    )
    .await?
    .map_err(|(code, description)| {
        failed(format!(
            "the sign-in could not be renewed ({code}: {description}): run `carillon login`"
        ))
    })?;
    let tokens = tokens_of(answer)?;
    let access_token = tokens.access_token.clone();
    credentials::save(
        url,
        Credential {
            expires_at_s: expiry(tokens.expires_in),
            access_token: tokens.access_token,
            // A provider that rotates refresh tokens sends a new one; others keep the old.
            refresh_token: tokens.refresh_token.or(Some(refresh_token)),
            ..credential
        },
    )
    .map_err(|err| failed(err.to_string()))?;
    Ok(Some(access_token))
}

/// The device flow: a code the person enters at the provider's page, then the token
/// endpoint asked until the person has signed in.
async fn device(
    http: &reqwest::Client,
    sign_in: &SignIn,
    endpoints: &Endpoints,
) -> Result<Tokens, ClientError> {
    let Some(device_endpoint) = &endpoints.device_authorization_endpoint else {
        return Err(failed(
            "the provider offers no device flow: sign in with `carillon login --browser`",
        ));
    };
    let started = post_form(
        http,
        device_endpoint,
        &[
            ("client_id", &sign_in.client_id),
            ("scope", &sign_in.scopes),
            ("resource", &sign_in.audience),
        ],
    )
    .await?
    .map_err(|(code, description)| {
        failed(format!("the provider refused: {code}: {description}"))
    })?;
    let field = |name: &str| started[name].as_str().map(str::to_owned);
    let (Some(device_code), Some(user_code)) = (field("device_code"), field("user_code")) else {
        return Err(failed(
            "the provider's device answer holds no device_code or user_code",
        ));
    };
    let page = field("verification_uri_complete")
        .or_else(|| field("verification_uri"))
        .ok_or_else(|| failed("the provider's device answer names no page to visit"))?;
    eprintln!("To sign in, open {page}\nand confirm the code {user_code}");
    let mut interval = started["interval"].as_u64().unwrap_or(5).max(1);
    let deadline = now_s() + started["expires_in"].as_i64().unwrap_or(600);
    loop {
        tokio::time::sleep(Duration::from_secs(interval)).await;
        let asked = post_form(
            http,
            &endpoints.token_endpoint,
            &[
                ("grant_type", "urn:ietf:params:oauth:grant-type:device_code"),
                ("device_code", &device_code),
                ("client_id", &sign_in.client_id),
                ("resource", &sign_in.audience),
            ],
        )
        .await;
        let answer = match asked {
            Ok(answer) => answer,
            // A network blip while the person signs in: ask again, until the code expires.
            Err(err) if now_s() < deadline => {
                eprintln!("carillon: {err}; asking again");
                continue;
            }
            Err(err) => return Err(err),
        };
        match answer {
            Ok(answer) => return tokens_of(answer),
            Err((code, _)) if code == "authorization_pending" && now_s() < deadline => {}
            Err((code, _)) if code == "slow_down" && now_s() < deadline => interval += 5,
            Err((code, description)) => {
                return Err(failed(match code.as_str() {
                    "access_denied" => "the sign-in was declined at the provider".to_owned(),
                    "expired_token" | "authorization_pending" | "slow_down" => {
                        "the code expired before the sign-in was confirmed".to_owned()
                    }
                    _ => format!("the provider refused: {code}: {description}"),
                }));
            }
        }
    }
}

fn random_b64(bytes: usize) -> Result<String, ClientError> {
    let mut random = vec![0u8; bytes];
    getrandom::fill(&mut random).map_err(|err| failed(format!("no randomness: {err}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random))
}

/// The browser flow: the provider's page opened here, its answer taken on a loopback port,
/// the code exchanged with the PKCE verifier only this process knows.
async fn browser(
    http: &reqwest::Client,
    sign_in: &SignIn,
    endpoints: &Endpoints,
    open: bool,
) -> Result<Tokens, ClientError> {
    let Some(authorization_endpoint) = &endpoints.authorization_endpoint else {
        return Err(failed("the provider names no authorization_endpoint"));
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|err| failed(format!("cannot listen on a loopback port: {err}")))?;
    let port = listener
        .local_addr()
        .map_err(|err| failed(err.to_string()))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let (state, verifier) = (random_b64(16)?, random_b64(32)?);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(Sha256::digest(verifier.as_bytes()));
    let page = reqwest::Url::parse_with_params(
        authorization_endpoint,
        &[
            ("response_type", "code"),
            ("client_id", sign_in.client_id.as_str()),
            ("redirect_uri", &redirect_uri),
            ("scope", &sign_in.scopes),
            ("state", &state),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("resource", &sign_in.audience),
        ],
    )
    .map_err(|_| failed(format!("{authorization_endpoint} is not a URL")))?;
    eprintln!("To sign in, open {page}");
    if open {
        // Best effort: the address is printed above for when no browser starts.
        let opener = if cfg!(target_os = "macos") {
            "open"
        } else {
            "xdg-open"
        };
        let _ = std::process::Command::new(opener)
            .arg(page.as_str())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
    }
    let code = tokio::time::timeout(BROWSER_WAIT, callback(&listener, &state))
        .await
        .map_err(|_| failed("nobody signed in within 5 minutes"))??;
    let answer = post_form(
        http,
        &endpoints.token_endpoint,
        &[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", &redirect_uri),
            ("code_verifier", &verifier),
            ("client_id", &sign_in.client_id),
            ("resource", &sign_in.audience),
        ],
    )
    .await?
    .map_err(|(code, description)| {
        failed(format!("the provider refused: {code}: {description}"))
    })?;
    tokens_of(answer)
}

/// The value of `name` in the query string `query`.
fn query_param(query: &str, name: &str) -> Option<String> {
    reqwest::Url::parse(&format!("http://127.0.0.1/?{query}"))
        .ok()?
        .query_pairs()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// Waits for the provider's answer, through the browser, on `listener`: the code of the
/// request to `/callback` with this sign-in's `state`. Anything else (a browser's
/// `favicon.ico`, another program's request, one that sends nothing for 5 seconds) is
/// answered or dropped and waited past, so nothing but the provider's answer ends the wait.
async fn callback(listener: &tokio::net::TcpListener, state: &str) -> Result<String, ClientError> {
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|err| failed(err.to_string()))?;
        let Ok(head) = tokio::time::timeout(Duration::from_secs(5), read_head(&mut stream)).await
        else {
            continue;
        };
        let target = head
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("GET "))
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default()
            .to_owned();
        let query = target.strip_prefix("/callback?").unwrap_or_default();
        if query.is_empty() || query_param(query, "state").as_deref() != Some(state) {
            answer(&mut stream, "404 Not Found", "").await;
            continue;
        }
        if let Some(error) = query_param(query, "error") {
            let description = query_param(query, "error_description").unwrap_or_default();
            answer(
                &mut stream,
                "200 OK",
                "The sign-in was refused: see the terminal.",
            )
            .await;
            return Err(failed(format!(
                "the provider refused: {error}: {description}"
            )));
        }
        let Some(code) = query_param(query, "code") else {
            answer(&mut stream, "400 Bad Request", "No code in the answer.").await;
            return Err(failed("the browser's answer holds no code"));
        };
        answer(
            &mut stream,
            "200 OK",
            "Signed in to Carillon: you can close this page.",
        )
        .await;
        return Ok(code);
    }
}

/// A request's head, up to 16 KiB.
async fn read_head(stream: &mut tokio::net::TcpStream) -> String {
    let mut head = Vec::new();
    let mut buffer = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

async fn answer(stream: &mut tokio::net::TcpStream, status: &str, page: &str) {
    let answer = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{page}",
        page.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
}

/// Who a token names, for the "signed in as" line: its name claim, read without checking
/// (the node checks it on every call).
fn display_name(token: &str) -> String {
    let claims: Value = token
        .split('.')
        .nth(1)
        .and_then(|part| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(part)
                .ok()
        })
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or(Value::Null);
    ["preferred_username", "email", "sub"]
        .iter()
        .find_map(|claim| claims[*claim].as_str())
        .unwrap_or("someone")
        .to_owned()
}
