//! A TCP proxy the test controls, between nodes and their database: it forwards until it is
//! cut, then resets every open connection and holds new ones unanswered, as a network
//! partition does, until it is restored.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug)]
pub struct TcpProxy {
    pub port: u16,
    /// `true` while cut; every connection task watches it.
    cut: Arc<watch::Sender<bool>>,
    accept: JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on a loopback port and forwards to `target`.
    pub async fn start(target: SocketAddr) -> TcpProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(watch::channel(false).0);
        let watcher = cut.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, target, watcher.subscribe()));
            }
        });
        TcpProxy { port, cut, accept }
    }

    /// Resets every open connection; new ones are accepted and never answered.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Forwards again. Connections held while cut are closed: their clients connect anew.
    pub fn restore(&self) {
        self.cut.send_replace(false);
    }

    /// `url` with its host and port replaced by this proxy's.
    pub fn url_through(&self, url: &str) -> String {
        with_address(url, &format!("127.0.0.1:{}", self.port))
    }
}

async fn serve(mut client: TcpStream, target: SocketAddr, mut cut: watch::Receiver<bool>) {
    if *cut.borrow_and_update() {
        // A black hole: the connection stays open, unanswered, until the cut ends.
        let _ = cut.wait_for(|cut| !*cut).await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(target).await else {
        return;
    };
    tokio::select! {
        _ = copy_bidirectional(&mut client, &mut server) => {}
        // Dropping both ends closes them: the database aborts the open transaction, the
        // node's next statement on that connection fails.
        _ = cut.wait_for(|cut| *cut) => {}
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Database `url` with its host and port replaced by `address` (`host:port`).
pub fn with_address(url: &str, address: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a database url");
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let user = authority
        .rsplit_once('@')
        .map(|(user, _)| format!("{user}@"));
    format!("{scheme}://{}{address}/{path}", user.unwrap_or_default())
}
