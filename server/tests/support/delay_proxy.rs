//! A TCP proxy that holds every chunk it forwards for a delay the test sets, each way: a slow
//! link, which the kernel here cannot make (it has no netem). Order is kept, and bandwidth is
//! not limited: only latency is added.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

#[derive(Debug)]
pub struct DelayProxy {
    pub addr: SocketAddr,
    /// Added to each direction, in milliseconds.
    each_way_ms: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl DelayProxy {
    /// Listens on `listen` (a port of its own) and forwards to `target`, with no delay yet.
    pub async fn start(listen: IpAddr, target: SocketAddr) -> DelayProxy {
        let listener = TcpListener::bind((listen, 0)).await.expect("proxy bind");
        let addr = listener.local_addr().expect("proxy address");
        let each_way_ms = Arc::new(AtomicU64::new(0));
        let delay = each_way_ms.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(serve(client, target, delay.clone()));
            }
        });
        DelayProxy {
            addr,
            each_way_ms,
            accept,
        }
    }

    /// Adds `round_trip` to every round trip from now on, half each way (`ZERO` ends it).
    pub fn delay_round_trips(&self, round_trip: Duration) {
        let each_way = u64::try_from(round_trip.as_millis() / 2).unwrap_or(u64::MAX);
        self.each_way_ms.store(each_way, Ordering::Relaxed);
    }

    /// `url` with its host and port replaced by this proxy's.
    pub fn url_through(&self, url: &str) -> String {
        super::proxy::with_address(url, &self.addr.to_string())
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

async fn serve(client: TcpStream, target: SocketAddr, each_way_ms: Arc<AtomicU64>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_reads, client_writes) = client.into_split();
    let (server_reads, server_writes) = server.into_split();
    tokio::join!(
        forward(client_reads, server_writes, each_way_ms.clone()),
        forward(server_reads, client_writes, each_way_ms),
    );
}

/// Copies `from` to `to`, each chunk written the delay after it was read.
async fn forward(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, each_way_ms: Arc<AtomicU64>) {
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(read @ 1..) = from.read(&mut buf).await {
            let due = Instant::now() + Duration::from_millis(each_way_ms.load(Ordering::Relaxed));
            if queue.send((due, buf[..read].to_vec())).is_err() {
                break;
            }
        }
    };
    let writing = async move {
        while let Some((due, chunk)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reading, writing);
}
