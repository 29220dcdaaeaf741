//! HAProxy (Debian's) of a test's own, on a free loopback port, in TCP mode in front of a
//! PostgreSQL primary and its standby: new connections go to the primary while its health
//! check passes (every 200 ms), else to the standby, and the sessions of a server marked down
//! are closed. It is how clients find the primary after a failover when Patroni or an operator
//! promotes the standby (Patroni's own setups check its REST API instead of the port).
//!
//! Without the binary the test fails, saying what to install (`.ci/run` installs it).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

const HAPROXY: &str = "/usr/sbin/haproxy";

#[derive(Debug)]
pub struct Haproxy {
    pub port: u16,
    _dir: tempfile::TempDir,
    child: Child,
}

impl Haproxy {
    /// Routes to `primary`, or to `standby` while `primary` is down.
    pub async fn start(primary: SocketAddr, standby: SocketAddr) -> Haproxy {
        assert!(
            Path::new(HAPROXY).exists(),
            "the failover tests need Debian's haproxy (apt-get install haproxy; .ci/run \
             installs it)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let port = super::free_port();
        let config = format!(
            "global\n\
             \x20   maxconn 2000\n\
             defaults\n\
             \x20   mode tcp\n\
             \x20   timeout connect 1s\n\
             \x20   timeout client 1h\n\
             \x20   timeout server 1h\n\
             \x20   default-server inter 200ms fall 2 rise 2 on-marked-down shutdown-sessions\n\
             frontend postgres\n\
             \x20   bind 127.0.0.1:{port}\n\
             \x20   default_backend servers\n\
             backend servers\n\
             \x20   server primary {primary} check\n\
             \x20   server standby {standby} check backup\n"
        );
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, config).expect("haproxy.cfg");
        let child = Command::new(HAPROXY)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("haproxy");
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "haproxy did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Haproxy {
            port,
            _dir: dir,
            child,
        }
    }

    /// `url` (of the primary) through it.
    pub fn url_through(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let user = authority.split_once('@').map_or("", |(user, _)| user);
        let at = if user.is_empty() { "" } else { "@" };
        format!("{scheme}://{user}{at}127.0.0.1:{}/{path}", self.port)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
