use super::*;

fn policy(networks: &[&str], hosts: &[&str]) -> Egress {
    Egress::new(&EgressConfig {
        allowed_networks: networks.iter().map(|n| (*n).to_owned()).collect(),
        allowed_hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
    })
    .unwrap()
}

/// The spellings an outsider tries for the machine itself, its network and a cloud's metadata
/// service: every one is an address literal once the URL is read.
const INWARD: [&str; 18] = [
    "http://169.254.169.254/latest/meta-data/iam",
    "http://[::ffff:169.254.169.254]/",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[fd00:ec2::254]/",
    "http://100.100.100.200/",
    "http://127.0.0.1:9001/api/v1/jobs",
    "http://127.1/",
    "http://0x7f000001/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://[::1]/",
    "http://[0:0:0:0:0:ffff:127.0.0.1]/",
    "http://0.0.0.0:9001/",
    "http://[::]/",
    "http://10.0.0.1/",
    "http://172.16.5.4/",
    "http://[fe80::1]/",
];

#[test]
fn the_default_reaches_public_addresses_only() {
    let closed = Egress::new(&EgressConfig::default()).unwrap();
    for url in INWARD {
        let refused = closed.check_literal(url).unwrap_err();
        assert!(
            refused.contains("egress.allowed_networks"),
            "{url}: {refused}"
        );
    }
    for url in [
        "http://93.184.215.14/",
        "https://[2606:4700::1111]/",
        "http://example.com/",
    ] {
        closed.check_literal(url).unwrap();
    }
    assert!(!closed.opens_loopback());
}

#[test]
fn named_groups_and_networks_open_what_they_name_and_nothing_else() {
    let laptop = policy(&["public", "loopback"], &[]);
    assert!(laptop.opens_loopback());
    laptop.check_literal("http://127.0.0.1:9001/").unwrap();
    laptop.check_literal("http://[::1]/").unwrap();
    assert!(laptop.check_literal("http://169.254.169.254/").is_err());
    assert!(laptop.check_literal("http://10.0.0.1/").is_err());
    assert!(
        laptop.check_literal("http://0.0.0.0:9001/").is_err(),
        "the unspecified address is never called"
    );
    let cluster = policy(&["10.0.0.0/8", "fd00::/8"], &[]);
    cluster.check_literal("http://10.3.4.5:9100/").unwrap();
    cluster.check_literal("http://[fd12::1]/").unwrap();
    assert!(
        cluster.check_literal("http://93.184.215.14/").is_err(),
        "not public"
    );
    assert!(cluster.check_literal("http://192.168.1.1/").is_err());
    let private = policy(&["private", "link-local"], &[]);
    private.check_literal("http://192.168.1.1/").unwrap();
    private.check_literal("http://169.254.1.1/").unwrap();
    let nothing = policy(&[], &[]);
    assert!(nothing.check_literal("http://93.184.215.14/").is_err());
}

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
    assert!(
        Network::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap())
    );
}

#[test]
fn bad_entries_are_named_with_their_setting() {
    for bad in [
        "10.0.0.0/33",
        "example.com/8",
        "10.0.0/8",
        "::/129",
        "publik",
    ] {
        let config = EgressConfig {
            allowed_networks: vec![bad.to_owned()],
            allowed_hosts: Vec::new(),
        };
        let (setting, why) = Egress::new(&config).unwrap_err();
        assert_eq!(setting, "egress.allowed_networks");
        assert!(why.contains(bad.split('/').next().unwrap()), "{bad}: {why}");
    }
    for bad in ["10.0.0.1", "a..b", "-x y"] {
        let config = EgressConfig {
            allowed_networks: Vec::new(),
            allowed_hosts: vec![bad.to_owned()],
        };
        assert_eq!(Egress::new(&config).unwrap_err().0, "egress.allowed_hosts");
    }
}

#[test]
fn hosts_match_exactly_or_below_their_domain() {
    let hosts = policy(&[], &["api.example.com", "*.corp.example"]);
    assert!(hosts.permits_host("api.example.com"));
    assert!(hosts.permits_host("API.example.com."));
    assert!(!hosts.permits_host("evil-api.example.com"));
    assert!(hosts.permits_host("billing.corp.example"));
    assert!(!hosts.permits_host("corp.example"));
    assert!(!hosts.permits_host("evilcorp.example"));
}

#[tokio::test]
async fn names_are_judged_by_what_they_resolve_to() {
    let closed = Egress::new(&EgressConfig::default()).unwrap();
    let refused = closed.check_url("http://localhost:9100").await.unwrap_err();
    assert!(refused.contains("egress.allowed_networks"), "{refused}");
    let listed = policy(&[], &["localhost"]);
    listed.check_url("http://localhost:9100").await.unwrap();
    let laptop = policy(&["loopback"], &[]);
    laptop.check_url("http://localhost:9100").await.unwrap();
}

#[tokio::test]
async fn the_resolver_drops_addresses_the_policy_refuses() {
    use reqwest::dns::Resolve;
    let name = |n: &str| n.parse::<reqwest::dns::Name>().unwrap();
    let closed = EgressResolver(Arc::new(Egress::new(&EgressConfig::default()).unwrap()));
    let refused = closed.resolve(name("localhost")).await;
    assert!(refused.is_err(), "localhost is not public");
    let loopback = EgressResolver(Arc::new(policy(&["loopback"], &[])));
    let addrs: Vec<SocketAddr> = loopback.resolve(name("localhost")).await.unwrap().collect();
    assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
}
