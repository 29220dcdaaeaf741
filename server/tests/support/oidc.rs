//! A real OpenID provider for the tests: npm's `oidc-provider` (`tests/oidc/provider.mjs`),
//! run with Node.js on a loopback port. People sign in through its own login and consent
//! pages, driven here over HTTP as a browser would (authorization code with PKCE), and get
//! the JWT access tokens it signs for the Carillon API.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The audience the provider gives Carillon's API.
pub const AUDIENCE: &str = "https://carillon.test/api";

/// The redirect URI of the provider's clients (never fetched: the code is read from it).
const REDIRECT_URI: &str = "http://127.0.0.1/callback";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc")
}

/// Panics, saying what to install, when the provider cannot run here.
pub fn require_provider() {
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(node, "the OpenID provider needs Node.js (`node`)");
    assert!(
        dir().join("node_modules/oidc-provider").is_dir(),
        "oidc-provider is not installed: run `npm ci` in {}",
        dir().display()
    );
}

/// How a provider is started.
#[derive(Debug, Clone)]
pub struct ProviderSpec {
    /// login -> its groups.
    pub accounts: serde_json::Value,
    /// `RS256` or `ES256`.
    pub alg: &'static str,
    /// A fixed port (to restart it where it was), or any.
    pub port: Option<u16>,
}

/// A running provider; stopped when dropped.
#[derive(Debug)]
pub struct Provider {
    child: Child,
    pub issuer: String,
    /// The id of the key it signs with.
    pub kid: String,
    pub port: u16,
}

impl Drop for Provider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Provider {
    pub fn start(spec: &ProviderSpec) -> Provider {
        require_provider();
        let mut child = Command::new("node")
            .arg("provider.mjs")
            .current_dir(dir())
            .env("OIDC_AUDIENCE", AUDIENCE)
            .env("OIDC_ACCOUNTS", spec.accounts.to_string())
            .env("OIDC_ALG", spec.alg)
            .env("OIDC_PORT", spec.port.unwrap_or(0).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node starts the provider");
        let stdout = child.stdout.take().expect("the provider's stdout");
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader
            .read_line(&mut line)
            .expect("the provider's first line");
        // Its output is read to the end, so that it never writes into a closed pipe.
        std::thread::spawn(move || reader.lines().for_each(drop));
        let started: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|_| panic!("the provider did not start: {line:?}"));
        let issuer = started["issuer"].as_str().expect("issuer").to_owned();
        let port = issuer
            .rsplit(':')
            .next()
            .and_then(|port| port.parse().ok())
            .expect("the issuer's port");
        Provider {
            child,
            kid: started["kid"].as_str().expect("kid").to_owned(),
            issuer,
            port,
        }
    }

    /// `login` signs in through the provider's pages as client `client_id`, asking for a token
    /// for `resource`; the access token.
    pub async fn sign_in(&self, login: &str, client_id: &str, resource: &str) -> String {
        let http = self.http();
        let verifier = format!("verifier-{login}-{}", std::process::id()).repeat(3);
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(Sha256::digest(verifier.as_bytes()));
        let authorize = reqwest::Url::parse_with_params(
            &format!("{}/auth", self.issuer),
            &[
                ("client_id", client_id),
                ("response_type", "code"),
                ("redirect_uri", REDIRECT_URI),
                ("scope", "openid carillon"),
                ("code_challenge", &challenge),
                ("code_challenge_method", "S256"),
                ("state", "s"),
                ("resource", resource),
            ],
        )
        .expect("the authorization URL");
        let location = self.follow(authorize.to_string(), None, login).await;
        let query = location
            .strip_prefix(&format!("{REDIRECT_URI}?"))
            .unwrap_or_else(|| panic!("signing in ended at {location}"));
        let code = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("code="))
            .unwrap_or_else(|| panic!("no code in {location}"));
        self.exchange(&http, client_id, code, &verifier, resource)
            .await
    }

    /// `login` confirms a device's sign-in at the page `carillon login` printed
    /// (`verification_uri_complete`), signing in on the provider's pages.
    pub async fn confirm_device(&self, page: &str, login: &str) {
        let form_page = self.http().get(page).send().await.expect("the device page");
        let mut jar = Jar::default();
        jar.take(&form_page);
        let html = form_page.text().await.expect("the device page's text");
        let field = |name: &str| {
            let marker = format!("name=\"{name}\" value=\"");
            let at = html.find(&marker).map(|at| at + marker.len());
            at.and_then(|at| html[at..].split('"').next().map(str::to_owned))
                .unwrap_or_else(|| panic!("no {name} on the device page: {html}"))
        };
        let form = vec![
            ("xsrf", field("xsrf")),
            ("user_code", field("user_code")),
            ("confirm", "yes".to_owned()),
        ];
        let ended = self
            .follow_with(jar, format!("{}/device", self.issuer), Some(form), login)
            .await;
        assert!(ended.is_empty(), "the device sign-in ended at {ended}");
    }

    /// Follows the provider's redirects from `url` (sent as a form POST when `form` is set),
    /// signing `login` in and consenting on its pages, until it sends the browser elsewhere
    /// (that address) or answers a page of its own (an empty string).
    pub async fn follow(
        &self,
        url: String,
        form: Option<Vec<(&str, String)>>,
        login: &str,
    ) -> String {
        self.follow_with(Jar::default(), url, form, login).await
    }

    fn http(&self) -> reqwest::Client {
        carillon_tls::http_client_builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .expect("a client")
    }

    async fn follow_with(
        &self,
        mut jar: Jar,
        mut next: String,
        mut form: Option<Vec<(&str, String)>>,
        login: &str,
    ) -> String {
        let http = self.http();
        for _ in 0..12 {
            let request = match form.take() {
                Some(form) => http.post(&next).form(&form),
                None => http.get(&next),
            };
            let answer = request
                .header(reqwest::header::COOKIE, jar.header())
                .send()
                .await
                .unwrap_or_else(|e| panic!("{next}: {e}"));
            jar.take(&answer);
            let Some(location) = answer
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
            else {
                let status = answer.status();
                let body = answer.text().await.unwrap_or_default();
                // An interaction page: answer its form (login, then consent).
                if next.contains("/interaction/") && status.is_success() {
                    let prompt = if body.contains("value=\"login\"") {
                        "login"
                    } else {
                        "consent"
                    };
                    form = Some(vec![
                        ("prompt", prompt.to_owned()),
                        ("login", login.to_owned()),
                        ("password", "any".to_owned()),
                    ]);
                    continue;
                }
                assert!(status.is_success(), "{next} answered {status}: {body}");
                return String::new();
            };
            let location = if location.starts_with('/') {
                format!("{}{location}", self.issuer)
            } else {
                location
            };
            if !location.starts_with(&self.issuer) {
                return location;
            }
            next = location;
        }
        panic!("signing {login} in took more than twelve steps");
    }

    async fn exchange(
        &self,
        http: &reqwest::Client,
        client_id: &str,
        code: &str,
        verifier: &str,
        resource: &str,
    ) -> String {
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT_URI),
            ("code_verifier", verifier),
            ("client_id", client_id),
            ("resource", resource),
        ];
        let answer: serde_json::Value = http
            .post(format!("{}/token", self.issuer))
            .form(&form)
            .send()
            .await
            .expect("the token endpoint")
            .json()
            .await
            .expect("the token endpoint's JSON");
        answer["access_token"]
            .as_str()
            .unwrap_or_else(|| panic!("no access token: {answer}"))
            .to_owned()
    }
}

/// The provider's cookies, sent back on every step (they are scoped by path there; sending
/// them all is harmless).
#[derive(Debug, Default)]
struct Jar(Vec<(String, String)>);

impl Jar {
    fn take(&mut self, answer: &reqwest::Response) {
        for value in answer.headers().get_all(reqwest::header::SET_COOKIE) {
            let Some((name, value)) = value
                .to_str()
                .ok()
                .and_then(|cookie| cookie.split(';').next())
                .and_then(|pair| pair.split_once('='))
            else {
                continue;
            };
            self.0.retain(|(held, _)| held != name);
            if !value.is_empty() {
                self.0.push((name.to_owned(), value.to_owned()));
            }
        }
    }

    fn header(&self) -> String {
        self.0
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join("; ")
    }
}
