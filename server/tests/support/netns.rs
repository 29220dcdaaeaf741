//! Test hosts: each node, executor and database of a test in a network namespace of its own,
//! all on one private bridge, so a test can break the network between any two of them as
//! production does: cut a link (packets dropped, no reset: a half-open connection), lose a
//! share of its packets, either way or both, and heal it.
//!
//! The bridge lives in a namespace of its own (`<tag>-sw`); the test process reaches every
//! host through one more veth pair, whose root end holds the subnet's first address (the
//! gateway). Nothing routes the subnet anywhere else: its addresses never leave the machine.
//! Rules are `iptables` rules inside the host's own namespace, so a host's every link is
//! healed at once by flushing them. Everything is deleted when the `TestNet` is dropped (a
//! failing test included), and a run that died without dropping it has its namespaces
//! deleted by the next one.
//!
//! Needs root, `ip` (iproute2) and `iptables`: the tests using it are ignored by a plain
//! `cargo test` and run by `.ci/run`, which installs `iptables`.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Names of this module's namespaces start with it, then the pid that made them.
const PREFIX: &str = "ctn";

/// The first two octets of every test subnet (a `/24` each).
const SUBNET: [u8; 2] = [10, 213];

/// A host: its namespace and its address on the bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetHost {
    pub name: String,
    pub netns: String,
    pub ip: Ipv4Addr,
}

impl NetHost {
    /// `program` to be run inside this host's namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.netns]).arg(program);
        command
    }
}

/// Which packets of a link a rule takes: those `from` sends to the peer, those it receives
/// from the peer, or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Out,
    In,
    Both,
}

/// A private network of test hosts.
#[derive(Debug)]
pub struct TestNet {
    tag: String,
    subnet: u8,
    hosts: Vec<NetHost>,
}

fn ip(args: &[&str]) {
    run("ip", args);
}

fn run(program: &str, args: &[&str]) {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program} {}: {e}", args.join(" ")));
    assert!(
        output.status.success(),
        "{program} {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn output_of(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Deletes the namespaces of test nets whose process is gone (a run killed mid-test).
fn delete_stale() {
    for line in output_of("ip", &["netns", "list"]).lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split(['x', '-']).next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// A `/24` of [`SUBNET`] no interface of the machine is on.
fn free_subnet(seed: u32) -> u8 {
    let taken = output_of("ip", &["-o", "-4", "addr", "show"]);
    (0..250u32)
        .map(|k| u8::try_from((seed + k) % 250 + 1).unwrap_or(1))
        .find(|x| !taken.contains(&format!("{}.{}.{x}.", SUBNET[0], SUBNET[1])))
        .expect("a free test subnet")
}

impl TestNet {
    /// A new network with its bridge and the gateway the test process reaches hosts by.
    pub fn new() -> TestNet {
        static NETS: AtomicU32 = AtomicU32::new(0);
        delete_stale();
        let pid = std::process::id();
        let n = NETS.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{PREFIX}{pid}x{n}");
        let subnet = free_subnet(pid.wrapping_mul(7).wrapping_add(n));
        let net = TestNet {
            tag,
            subnet,
            hosts: Vec::new(),
        };
        let switch = net.switch();
        ip(&["netns", "add", &switch]);
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        let uplink = net.uplink();
        ip(&[
            "link", "add", &uplink, "type", "veth", "peer", "name", "gw", "netns", &switch,
        ]);
        ip(&[
            "-n", &switch, "link", "set", "dev", "gw", "master", "br0", "up",
        ]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", net.gateway()),
            "dev",
            &uplink,
        ]);
        ip(&["link", "set", &uplink, "up"]);
        net
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.tag)
    }

    /// The root end of the gateway's veth pair: at most 15 characters.
    fn uplink(&self) -> String {
        let name = format!("{}u", self.tag.trim_start_matches(PREFIX));
        format!("cn{}", &name[name.len().saturating_sub(13)..])
    }

    fn address(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(SUBNET[0], SUBNET[1], self.subnet, last)
    }

    /// The test process's own address on the network.
    pub fn gateway(&self) -> Ipv4Addr {
        self.address(1)
    }

    /// A new host named `name` (letters and digits), up, with `lo` and its address.
    pub fn host(&mut self, name: &str) -> NetHost {
        let index = self.hosts.len();
        let host = NetHost {
            name: name.to_owned(),
            netns: format!("{}-{name}", self.tag),
            ip: self.address(u8::try_from(10 + index).expect("at most 240 hosts")),
        };
        let switch = self.switch();
        let port = format!("h{index}");
        ip(&["netns", "add", &host.netns]);
        ip(&[
            "-n",
            &switch,
            "link",
            "add",
            &port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &host.netns,
        ]);
        ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"]);
        ip(&[
            "-n",
            &host.netns,
            "addr",
            "add",
            &format!("{}/24", host.ip),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &host.netns, "link", "set", "eth0", "up"]);
        ip(&["-n", &host.netns, "link", "set", "lo", "up"]);
        self.hosts.push(host.clone());
        host
    }

    fn iptables(host: &NetHost, args: &[&str]) {
        let mut full = vec!["netns", "exec", &host.netns, "iptables", "-w"];
        full.extend_from_slice(args);
        run("ip", &full);
    }

    /// Appends a rule dropping the packets of the link between `from` and `peer` that `way`
    /// names; `extra` narrows it (`-m statistic …` for a share).
    fn drop_packets(from: &NetHost, peer: Ipv4Addr, way: Way, extra: &[&str]) {
        let peer = peer.to_string();
        if matches!(way, Way::Out | Way::Both) {
            let mut rule = vec!["-A", "OUTPUT", "-d", &peer];
            rule.extend_from_slice(extra);
            rule.extend_from_slice(&["-j", "DROP"]);
            Self::iptables(from, &rule);
        }
        if matches!(way, Way::In | Way::Both) {
            let mut rule = vec!["-A", "INPUT", "-s", &peer];
            rule.extend_from_slice(extra);
            rule.extend_from_slice(&["-j", "DROP"]);
            Self::iptables(from, &rule);
        }
    }

    /// Cuts the link between `from` and `peer` (`way` as seen from `from`): packets are
    /// dropped silently, so open connections hang half-open rather than reset.
    pub fn cut(&self, from: &NetHost, peer: &NetHost, way: Way) {
        Self::drop_packets(from, peer.ip, way, &[]);
    }

    /// Drops what `from` sends `peer` that carries data, letting the bare handshake and
    /// acknowledgements through (a bare TCP segment is at most 60 bytes): `peer` connects and
    /// sends, `from` receives it and acts, and its answers never arrive.
    pub fn lose_answers(&self, from: &NetHost, peer: &NetHost) {
        Self::drop_packets(
            from,
            peer.ip,
            Way::Out,
            &["-p", "tcp", "-m", "length", "--length", "100:65535"],
        );
    }

    /// Drops the bodies of the direct results `from` answers `peer` from its `port` (the
    /// segments holding `"outcome"`), letting the status line and headers through, and every
    /// other answer: an answer cut after its headers, the connection then silent.
    pub fn cut_results_after_headers(&self, from: &NetHost, peer: &NetHost, port: u16) {
        let port = port.to_string();
        Self::drop_packets(
            from,
            peer.ip,
            Way::Out,
            &[
                "-p",
                "tcp",
                "--sport",
                &port,
                "-m",
                "string",
                "--string",
                "\"outcome\"",
                "--algo",
                "bm",
            ],
        );
    }

    /// Drops `share` (0 to 1) of the packets between `from` and the test process (where the
    /// tests' proxies listen), at random, either way.
    pub fn lose_to_gateway(&self, from: &NetHost, share: f64) {
        let probability = format!("{share:.4}");
        Self::drop_packets(from, self.gateway(), Way::Both, &at_random(&probability));
    }

    /// Drops `share` (0 to 1) of the packets of the link, at random.
    pub fn lose(&self, from: &NetHost, peer: &NetHost, way: Way, share: f64) {
        let probability = format!("{share:.4}");
        Self::drop_packets(from, peer.ip, way, &at_random(&probability));
    }

    /// Makes the connections `from` has open to `peer`'s `port` half-open: their packets are
    /// dropped from now on, either way, while new connections go through (a NAT or firewall
    /// that forgot them, a peer that failed over). How many it severed.
    pub fn sever_open_connections(&self, from: &NetHost, peer: &NetHost, port: u16) -> usize {
        let listed = from
            .command("ss")
            .args(["-Htn", "state", "established"])
            .arg(format!("dst {}:{port}", peer.ip))
            .output()
            .expect("ss");
        let text = String::from_utf8_lossy(&listed.stdout);
        let local_ports: Vec<String> = text
            .lines()
            .filter_map(|line| line.split_whitespace().nth(2))
            .filter_map(|local| local.rsplit(':').next())
            .map(str::to_owned)
            .collect();
        let peer_ip = peer.ip.to_string();
        for local in &local_ports {
            Self::iptables(
                from,
                &[
                    "-A", "OUTPUT", "-p", "tcp", "-d", &peer_ip, "--sport", local, "-j", "DROP",
                ],
            );
            Self::iptables(
                from,
                &[
                    "-A", "INPUT", "-p", "tcp", "-s", &peer_ip, "--dport", local, "-j", "DROP",
                ],
            );
        }
        local_ports.len()
    }

    /// Cuts every link of `host`, the test process's own included.
    pub fn isolate(&self, host: &NetHost) {
        for other in self.hosts.iter().filter(|h| *h != host) {
            self.cut(host, other, Way::Both);
        }
        Self::drop_packets(host, self.gateway(), Way::Both, &[]);
    }

    /// Heals every link of `host`: its rules are flushed.
    pub fn heal(&self, host: &NetHost) {
        Self::iptables(host, &["-F", "INPUT"]);
        Self::iptables(host, &["-F", "OUTPUT"]);
    }
}

impl Drop for TestNet {
    fn drop(&mut self) {
        for host in &self.hosts {
            let _ = Command::new("ip")
                .args(["netns", "del", &host.netns])
                .status();
        }
        // The bridge and the gateway's veth pair go with the switch's namespace.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.switch()])
            .status();
    }
}

/// An iptables match for a share of the packets, at random (`probability` from 0 to 1).
fn at_random(probability: &str) -> [&str; 6] {
    [
        "-m",
        "statistic",
        "--mode",
        "random",
        "--probability",
        probability,
    ]
}
