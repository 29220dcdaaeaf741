//! `carillon ready`: whether the node on this host is ready (`GET /readyz` answers `200`), for
//! probes that run a command rather than call a URL — a container's `HEALTHCHECK`, in an image
//! that has no curl.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::config::Config;

/// How long the probe waits for the node's answer.
const WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, Args)]
pub(super) struct ReadyArgs {
    /// The node to ask, e.g. https://node-a.example.com:9001; default: the port the node's
    /// settings listen on (CARILLON_LISTEN, http.listen), on loopback.
    #[arg(long)]
    url: Option<String>,
    #[arg(long, env = "CARILLON_LISTEN", hide = true)]
    listen: Option<SocketAddr>,
}

/// Exits with success when the node answers ready; otherwise says why on standard error.
pub(super) async fn ready(args: ReadyArgs, config: &Config) -> ExitCode {
    let url = match args.url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None => {
            let listen = args.listen.unwrap_or(config.http.listen);
            let scheme = if config.http.tls_cert.is_some() {
                "https"
            } else {
                "http"
            };
            format!(
                "{scheme}://{}",
                SocketAddr::new(loopback(listen.ip()), listen.port())
            )
        }
    };
    let client = match carillon_tls::http_client_builder().timeout(WAIT).build() {
        Ok(client) => client,
        Err(err) => {
            return not_ready(&format!(
                "no HTTP client: {}",
                carillon_tls::with_causes(&err)
            ));
        }
    };
    match client.get(format!("{url}/readyz")).send().await {
        Ok(answer) if answer.status().is_success() => ExitCode::SUCCESS,
        Ok(answer) => {
            let status = answer.status();
            let body = answer.text().await.unwrap_or_default();
            not_ready(&format!("{url} answered {status}: {body}"))
        }
        Err(err) => not_ready(&format!(
            "{url} did not answer: {}",
            carillon_tls::with_causes(&err.without_url())
        )),
    }
}

/// Where to reach a node listening on `ip` from the same host.
fn loopback(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        other => other,
    }
}

fn not_ready(why: &str) -> ExitCode {
    eprintln!("carillon: not ready: {why}");
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_listening_everywhere_is_asked_on_loopback() {
        let asked = |listen: &str| loopback(listen.parse::<SocketAddr>().unwrap().ip());
        assert_eq!(asked("0.0.0.0:9001"), IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(asked("[::]:9001"), IpAddr::V6(Ipv6Addr::LOCALHOST));
        assert_eq!(
            asked("10.0.0.7:9001"),
            "10.0.0.7".parse::<IpAddr>().unwrap()
        );
    }
}
