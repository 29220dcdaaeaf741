//! The one guard of what a node calls on a user's behalf: HTTP jobs' calls, the alert webhooks
//! of jobs and namespaces, and executors' addresses. Whoever may write those (an editor, a
//! namespace's admin, an executor token) must not be able to point the node at its own
//! machine, its network or a cloud's metadata service (SSRF, XXL-JOB's CVE-2025-7787).
//!
//! One policy, `[egress]`: the networks such calls may reach (by default `public`, every
//! globally routable address, and nothing else: no loopback, private or link-local address
//! unless the operator names it) and host names allowed wherever they resolve. It is checked
//! where an address is given (an address literal at once, a name by what it resolves to) and
//! again on every connection: names resolve through [`EgressResolver`], which drops addresses
//! the policy refuses, so a name that looked well cannot be rebound inward later. Redirects are
//! never followed. What the operator configures for the node itself (its database, its own
//! alert webhook, its identity provider, a collector) is not a user's and passes no guard.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use serde::Deserialize;

/// `[egress]`: where the node may call on a user's behalf.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EgressConfig {
    /// Networks HTTP jobs, job and namespace webhooks and executors may be at: `public` (every
    /// globally routable address), `loopback`, `private` (RFC 1918, shared, ULA),
    /// `link-local`, or networks and addresses (`10.0.0.0/8`, `fd00::/8`, `10.1.2.3`).
    pub allowed_networks: Vec<String>,
    /// Host names allowed wherever they resolve (`api.example.com`, or `*.example.com` for its
    /// subdomains).
    pub allowed_hosts: Vec<String>,
}

impl Default for EgressConfig {
    fn default() -> Self {
        Self {
            allowed_networks: vec![PUBLIC.to_owned()],
            allowed_hosts: Vec::new(),
        }
    }
}

const PUBLIC: &str = "public";

/// Named groups of networks, besides `public`.
const GROUPS: [(&str, &[&str]); 3] = [
    ("loopback", &["127.0.0.0/8", "::1/128"]),
    (
        "private",
        &[
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "100.64.0.0/10",
            "fc00::/7",
        ],
    ),
    ("link-local", &["169.254.0.0/16", "fe80::/10"]),
];

/// What `public` leaves out besides the groups: addresses of no host on the internet, which a
/// machine may still answer on (this network, documentation, benchmarking, multicast,
/// reserved, NAT64 with any address inside).
const NOT_PUBLIC: [&str; 12] = [
    "0.0.0.0/8",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/3",
    "::/128",
    "64:ff9b::/96",
    "100::/64",
    "2001:db8::/32",
    "ff00::/8",
];

/// One network: an address and how many leading bits of it count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    /// Parses `10.0.0.0/8`, `fd00::/8`, or a single address (all its bits count).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| {
            format!(
                "{text:?} is not public, loopback, private, link-local, an address or a network \
                 like 10.0.0.0/8"
            )
        })?;
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= bits)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {bits}"))?,
            None => bits,
        };
        Ok(Self { addr, prefix })
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// Whether `ip` is a globally routable address.
pub fn is_public(ip: IpAddr) -> bool {
    static NOT: std::sync::LazyLock<Vec<Network>> = std::sync::LazyLock::new(|| {
        GROUPS
            .iter()
            .flat_map(|(_, list)| list.iter())
            .chain(NOT_PUBLIC.iter())
            .filter_map(|n| Network::parse(n).ok())
            .collect()
    });
    let ip = ip.to_canonical();
    !NOT.iter().any(|n| n.contains(ip))
}

/// The policy, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Egress {
    public: bool,
    networks: Vec<Network>,
    hosts: Vec<String>,
}

impl Egress {
    /// The policy of `config`; the error names the setting and the entry at fault.
    pub fn new(config: &EgressConfig) -> Result<Self, (&'static str, String)> {
        let mut egress = Egress {
            public: false,
            networks: Vec::new(),
            hosts: Vec::new(),
        };
        for entry in &config.allowed_networks {
            let entry = entry.trim();
            if entry == PUBLIC {
                egress.public = true;
            } else if let Some((_, list)) = GROUPS.iter().find(|(name, _)| *name == entry) {
                for network in *list {
                    egress.networks.extend(Network::parse(network));
                }
            } else {
                egress
                    .networks
                    .push(Network::parse(entry).map_err(|why| ("egress.allowed_networks", why))?);
            }
        }
        for host in &config.allowed_hosts {
            let bare = host.strip_prefix("*.").unwrap_or(host);
            let label =
                |l: &str| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !bare.split('.').all(label) || bare.parse::<IpAddr>().is_ok() {
                return Err((
                    "egress.allowed_hosts",
                    format!(
                        "{host:?} is not a host name or *.domain (addresses go in \
                         egress.allowed_networks)"
                    ),
                ));
            }
            egress.hosts.push(host.to_ascii_lowercase());
        }
        Ok(egress)
    }

    /// Whether it lets users' calls reach this machine's own services.
    pub fn opens_loopback(&self) -> bool {
        ["127.0.0.1", "::1"]
            .iter()
            .filter_map(|ip| ip.parse().ok())
            .any(|ip| self.permits_ip(ip))
    }

    /// Whether a call may connect to `ip`. The unspecified address reaches the machine itself
    /// whatever the list says: never.
    pub fn permits_ip(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        !ip.is_unspecified()
            && ((self.public && is_public(ip)) || self.networks.iter().any(|n| n.contains(ip)))
    }

    /// Whether `host` is an allowed host name (then every address it resolves to is).
    pub fn permits_host(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts
            .iter()
            .any(|allowed| match allowed.strip_prefix("*.") {
                Some(domain) => host
                    .strip_suffix(domain)
                    .is_some_and(|sub| sub.ends_with('.') && sub.len() > 1),
                None => host == *allowed,
            })
    }

    /// How every refusal reads.
    pub fn refusal(ip: IpAddr) -> String {
        format!("{ip} is outside egress.allowed_networks: the node does not call it")
    }

    /// For a URL whose host is an address literal (which skips name resolution), whether it
    /// may be called; a name is judged when it resolves ([`EgressResolver`]).
    pub fn check_literal(&self, url: &str) -> Result<(), String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        match host_of(&url) {
            Some(Host::Ip(ip)) if !self.permits_ip(ip) => Err(Self::refusal(ip)),
            Some(_) => Ok(()),
            None => Err(format!("{url} has no host")),
        }
    }

    /// Whether `url` may be called now: an address literal as it is, an allowed host name
    /// anywhere, another name only if every address it resolves to is allowed.
    pub async fn check_url(&self, url: &str) -> Result<(), String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| format!("{url:?}: {e}"))?;
        let port = parsed.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = match host_of(&parsed) {
            Some(Host::Ip(ip)) => vec![SocketAddr::new(ip, port)],
            Some(Host::Name(name)) if self.permits_host(name) => return Ok(()),
            Some(Host::Name(name)) => tokio::net::lookup_host((name, port))
                .await
                .map_err(|e| format!("{name:?} does not resolve: {e}"))?
                .collect(),
            None => return Err(format!("{url:?} has no host")),
        };
        match addrs.iter().find(|a| !self.permits_ip(a.ip())) {
            Some(outside) => Err(Self::refusal(outside.ip())),
            None if addrs.is_empty() => Err(format!("{url:?} resolves to no address")),
            None => Ok(()),
        }
    }

    /// `builder` as every guarded client is: names resolved through the guard, no redirect
    /// followed, no proxy of the environment (which would resolve names out of its reach).
    pub fn guard(self: &Arc<Self>, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        builder
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .dns_resolver(EgressResolver(Arc::clone(self)))
    }
}

enum Host<'a> {
    Ip(IpAddr),
    Name(&'a str),
}

/// A URL's host: an address literal (IPv6 without its brackets) or a name.
fn host_of(url: &reqwest::Url) -> Option<Host<'_>> {
    let host = url.host_str()?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    Some(match bare.parse::<IpAddr>() {
        Ok(ip) => Host::Ip(ip),
        Err(_) => Host::Name(host),
    })
}

/// Resolves names for a guarded client: an allowed host keeps every address, another name only
/// the addresses the policy allows.
#[derive(Debug, Clone)]
pub struct EgressResolver(Arc<Egress>);

impl reqwest::dns::Resolve for EgressResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let egress = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let listed = egress.permits_host(&host);
            let allowed: Vec<SocketAddr> = resolved
                .filter(|a| listed || egress.permits_ip(a.ip()))
                .collect();
            if allowed.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> = format!(
                    "{host} is not in egress.allowed_hosts and resolves to no address in \
                     egress.allowed_networks: the node does not call it"
                )
                .into();
                return Err(err);
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests;
