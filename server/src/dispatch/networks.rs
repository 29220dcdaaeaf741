//! The networks nodes may dispatch to (`dispatch.allowed_networks`), so that whoever holds an
//! executor token cannot point the nodes at internal services (SSRF).
//!
//! The list is checked twice: when an executor registers (its address, resolved if it is a
//! name), and when a connection is made: names resolve through [`AllowlistResolver`], which
//! drops addresses outside the list (a name that resolved well at registration cannot be
//! rebound to an internal address later), and an address literal is checked before the
//! request. An empty list allows every address.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

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
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("{text:?} is not an address or a network like 10.0.0.0/8"))?;
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

/// The allowed networks; empty allows everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist(Vec<Network>);

impl Allowlist {
    /// Parses every entry; the error names the first one that is not a network.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Self, String> {
        entries
            .iter()
            .map(|e| Network::parse(e.as_ref()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub fn is_open(&self) -> bool {
        self.0.is_empty()
    }

    pub fn permits(&self, ip: IpAddr) -> bool {
        self.is_open() || self.0.iter().any(|n| n.contains(ip))
    }

    /// Whether the nodes may dispatch to `address` (a base URL): every address its host
    /// resolves to now must be allowed.
    pub async fn check_address(&self, address: &str) -> Result<(), String> {
        if self.is_open() {
            return Ok(());
        }
        let url = reqwest::Url::parse(address).map_err(|e| format!("{address:?}: {e}"))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs: Vec<SocketAddr> = match host_of(&url) {
            Some(Host::Ip(ip)) => vec![SocketAddr::new(ip, port)],
            Some(Host::Name(name)) => tokio::net::lookup_host((name, port))
                .await
                .map_err(|e| format!("{name:?} does not resolve: {e}"))?
                .collect(),
            None => return Err(format!("{address:?} has no host")),
        };
        match addrs.iter().find(|a| !self.permits(a.ip())) {
            Some(outside) => Err(format!(
                "{} is outside dispatch.allowed_networks",
                outside.ip()
            )),
            None if addrs.is_empty() => Err(format!("{address:?} resolves to no address")),
            None => Ok(()),
        }
    }

    /// For a URL whose host is an address literal (which skips name resolution), whether it
    /// is allowed; names are checked by [`AllowlistResolver`].
    pub fn permits_literal(&self, url: &str) -> bool {
        let Ok(url) = reqwest::Url::parse(url) else {
            return false;
        };
        match host_of(&url) {
            Some(Host::Ip(ip)) => self.permits(ip),
            Some(Host::Name(_)) => true,
            None => false,
        }
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

/// Resolves names for the dispatch client, keeping only allowed addresses.
#[derive(Debug, Clone)]
pub struct AllowlistResolver(pub Arc<Allowlist>);

impl reqwest::dns::Resolve for AllowlistResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allowlist = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let resolved = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let allowed: Vec<SocketAddr> = resolved.filter(|a| allowlist.permits(a.ip())).collect();
            if allowed.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> =
                    format!("{host} resolves to no address in dispatch.allowed_networks").into();
                return Err(err);
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_contain_their_addresses_only() {
        let net = Network::parse("10.1.0.0/16").unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(
            net.contains("::ffff:10.1.0.9".parse().unwrap()),
            "v4-mapped v6"
        );
        let one = Network::parse("192.168.1.7").unwrap();
        assert!(one.contains("192.168.1.7".parse().unwrap()));
        assert!(!one.contains("192.168.1.8".parse().unwrap()));
        let v6 = Network::parse("fd00::/8").unwrap();
        assert!(v6.contains("fd12::1".parse().unwrap()));
        assert!(!v6.contains("fe80::1".parse().unwrap()));
        assert!(
            Network::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
    }

    #[test]
    fn bad_entries_are_named() {
        for bad in [
            "10.0.0.0/33",
            "example.com/8",
            "10.0.0/8",
            "::/129",
            "10.0.0.0/x",
        ] {
            let err = Allowlist::parse(&[bad]).unwrap_err();
            assert!(err.contains(bad.split('/').next().unwrap()), "{bad}: {err}");
        }
    }

    #[tokio::test]
    async fn addresses_are_checked_literal_or_resolved() {
        let private = Allowlist::parse(&["10.0.0.0/8"]).unwrap();
        let err = private
            .check_address("http://127.0.0.1:9100")
            .await
            .unwrap_err();
        assert!(err.contains("dispatch.allowed_networks"), "{err}");
        private.check_address("http://10.3.4.5:9100").await.unwrap();
        // A name is judged by what it resolves to.
        assert!(
            private
                .check_address("http://localhost:9100")
                .await
                .is_err()
        );
        assert!(!private.permits_literal("http://127.0.0.1:1/x"));
        assert!(private.permits_literal("http://10.0.0.1:1/x"));
        let open = Allowlist::default();
        open.check_address("http://127.0.0.1:9100").await.unwrap();
        assert!(open.permits_literal("http://127.0.0.1:1/x"));
    }

    #[tokio::test]
    async fn the_client_resolver_drops_addresses_outside_the_list() {
        use reqwest::dns::Resolve;
        let name = |n: &str| n.parse::<reqwest::dns::Name>().unwrap();
        let private = AllowlistResolver(Arc::new(Allowlist::parse(&["10.0.0.0/8"]).unwrap()));
        let refused = private.resolve(name("localhost")).await;
        assert!(refused.is_err(), "localhost is outside 10.0.0.0/8");
        let loopback = AllowlistResolver(Arc::new(Allowlist::parse(&["127.0.0.0/8"]).unwrap()));
        let addrs: Vec<SocketAddr> = loopback.resolve(name("localhost")).await.unwrap().collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
