//! The README's promise, on the demo binary itself: started as `cargo run -p carillon-demo`
//! starts it (on its own port and data directory here), its jobs fire within seconds, and
//! Ctrl-C drains its executor, deregisters it and stops its node, with no warning on the way.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Lines of the child's stdout and stderr, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let streams: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    for stream in streams {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    rx
}

/// Waits for a line containing `needle`, keeping every line seen in `seen`.
fn wait_for(rx: &mpsc::Receiver<String>, seen: &mut Vec<String>, needle: &str, limit: Duration) {
    let until = Instant::now() + limit;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) => {
                let found = line.contains(needle);
                seen.push(line);
                if found {
                    return;
                }
            }
            Err(_) => break,
        }
    }
    panic!(
        "no line with {needle:?} within {limit:?}; the demo printed:\n{}",
        seen.join("\n")
    );
}

/// `demo.long_report` fires every five minutes and runs for two: a Ctrl-C during it waits out
/// the drain and says so. The test starts where no such instant falls within its window.
fn clear_of_the_long_report() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let to_boundary = 300 - now % 300;
    if to_boundary < 40 {
        std::thread::sleep(Duration::from_secs(to_boundary + 1));
    }
}

#[test]
fn ctrl_c_drains_the_executor_then_stops_the_node_without_a_warning() {
    clear_of_the_long_report();
    let data = tempfile::tempdir().expect("a temporary directory");
    let mut child = Command::new(env!("CARGO_BIN_EXE_carillon-demo"))
        .env("CARILLON_LISTEN", "127.0.0.1:0")
        .env("CARILLON_DATA_DIR", data.path())
        .env("RUST_LOG", "info")
        .env_remove("CARILLON_DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the demo");
    let rx = lines_of(&mut child);
    let mut seen = Vec::new();

    wait_for(&rx, &mut seen, "demo running", Duration::from_secs(60));
    // A job declared in code fires every 5 s.
    wait_for(&rx, &mut seen, "hello run_id", Duration::from_secs(20));

    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("running kill");
    assert!(interrupted.success(), "kill -INT failed: {interrupted}");
    let until = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("waiting for the demo") {
            break status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!(
                "the demo did not stop within 60 s of Ctrl-C; it printed:\n{}",
                seen.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // The pipes close with the process: every line is in.
    seen.extend(rx.iter());
    let printed = seen.join("\n");

    assert!(
        status.success(),
        "the demo exited with {status}:\n{printed}"
    );
    let warnings: Vec<&String> = seen
        .iter()
        .filter(|l| l.contains("WARN") || l.contains("ERROR"))
        .collect();
    assert!(
        warnings.is_empty(),
        "a clean start and stop warns of nothing; these were printed:\n{warnings:#?}\n\nall:\n{printed}"
    );
    // The executor left through its node, which was still there to hear it.
    assert!(
        printed.contains("executor deregistered"),
        "the node never heard the executor leave:\n{printed}"
    );
}
