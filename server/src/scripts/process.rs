//! A script's process group, and its output read line by line.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process_group, test_kill_process_group};
use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::sync::OwnedSemaphorePermit;

/// Longest line kept whole; a longer one is cut into lines of this length, so a script that
/// never ends a line cannot grow the executor's memory.
pub(super) const MAX_LINE: usize = 16 * 1024;
/// How often a stopping group is looked at until it is gone.
const POLL: Duration = Duration::from_millis(50);

/// The process group a script leads (it was started with `process_group(0)`). Dropped —
/// the script ended, or its attempt was cancelled or timed out and the handler's future
/// dropped — it stops what is left of the group: SIGTERM, then SIGKILL to whatever outlives
/// the grace. A script that ended cleanly leaves nothing and nothing is signalled. The slot
/// it holds (`slot`) is given back only once its group is gone, so scripts winding down still
/// count against the executor's concurrency.
///
/// It keeps its own ends of the script's stdout and stderr (`outputs`) and reads them empty
/// while the group winds down: a script that logs while it cleans up after SIGTERM would
/// otherwise die of SIGPIPE once the attempt's readers are gone.
#[derive(Debug)]
pub(super) struct Group {
    leader: Option<Pid>,
    grace: Duration,
    slot: Option<OwnedSemaphorePermit>,
    outputs: Vec<OwnedFd>,
}

impl Group {
    pub(super) fn led_by(
        pid: Option<u32>,
        grace: Duration,
        slot: OwnedSemaphorePermit,
        outputs: &[BorrowedFd<'_>],
    ) -> Self {
        let leader = pid
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(Pid::from_raw);
        Self {
            leader,
            grace,
            slot: Some(slot),
            outputs: outputs
                .iter()
                .filter_map(|fd| fd.try_clone_to_owned().ok())
                .collect(),
        }
    }
}

/// Reads what is waiting in `outputs` (non-blocking: tokio made them so) and drops it.
fn read_away(outputs: &[OwnedFd]) {
    let mut buf = [0u8; 8192];
    for fd in outputs {
        while matches!(rustix::io::read(fd, &mut buf), Ok(n) if n > 0) {}
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let slot = self.slot.take();
        let Some(group) = self.leader else { return };
        if kill_process_group(group, Signal::TERM).is_err() {
            return; // No process is left in the group.
        }
        let grace = self.grace;
        let outputs = std::mem::take(&mut self.outputs);
        let stopping = Stopping::begin();
        // A thread rather than a task: this runs while a runtime may be shutting down. The
        // executor waits for these threads before it exits (`wait_stopped`), so a group is
        // never left to outlive it.
        std::thread::spawn(move || {
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                read_away(&outputs);
                if test_kill_process_group(group).is_err() {
                    drop((slot, stopping));
                    return;
                }
                std::thread::sleep(POLL);
            }
            let _ = kill_process_group(group, Signal::KILL);
            drop((slot, stopping));
        });
    }
}

/// Groups being stopped, counted until their thread is done.
static STOPPING: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

/// One group being stopped: counted while it lives.
struct Stopping;

impl Stopping {
    fn begin() -> Self {
        *STOPPING.0.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Stopping
    }
}

impl Drop for Stopping {
    fn drop(&mut self) {
        let mut count = STOPPING.0.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        STOPPING.1.notify_all();
    }
}

/// Waits (blocking) until every group being stopped is gone, at most `limit`; whether they
/// all are.
pub(crate) fn wait_stopped(limit: Duration) -> bool {
    let count = STOPPING.0.lock().unwrap_or_else(PoisonError::into_inner);
    let (count, _) = STOPPING
        .1
        .wait_timeout_while(count, limit, |count| *count > 0)
        .unwrap_or_else(PoisonError::into_inner);
    *count == 0
}

/// Reads `reader` to its end, giving each line (without its line break, invalid UTF-8
/// replaced) to `each`.
pub(super) async fn read_lines<R: AsyncRead + Unpin>(reader: R, mut each: impl FnMut(String)) {
    let mut reader = BufReader::new(reader);
    let mut line: Vec<u8> = Vec::new();
    // A line just cut at the cap: its line break, if it comes next, ends nothing new.
    let mut cut = false;
    // A read error ends the output as its end would.
    while let Ok(chunk) = reader.fill_buf().await {
        if chunk.is_empty() {
            break;
        }
        let (taken, ended) = match chunk.iter().position(|&b| b == b'\n') {
            Some(at) => (at + 1, true),
            None => (chunk.len(), false),
        };
        if cut && chunk[0] == b'\n' {
            reader.consume(1);
            cut = false;
            continue;
        }
        cut = false;
        let room = MAX_LINE - line.len();
        let kept = taken.min(room);
        line.extend_from_slice(&chunk[..kept]);
        reader.consume(kept);
        if ended && kept == taken {
            each(text_of(&line));
            line.clear();
        } else if line.len() >= MAX_LINE {
            each(text_of(&line));
            line.clear();
            cut = true;
        }
    }
    if !line.is_empty() {
        each(text_of(&line));
    }
}

fn text_of(line: &[u8]) -> String {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    String::from_utf8_lossy(line).into_owned()
}

/// A signal's name, for the message of a script it ended.
pub(super) fn signal_name(signal: i32) -> String {
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("{name} (signal {signal})")
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        read_lines(input, |line| lines.push(line)).await;
        lines
    }

    #[tokio::test]
    async fn lines_are_split_trimmed_and_capped() {
        assert_eq!(
            lines_of(b"one\r\ntwo\n\nlast without end").await,
            ["one", "two", "", "last without end"]
        );
        let long = vec![b'x'; MAX_LINE * 2 + 10];
        let lines = lines_of(&[long.as_slice(), b"\nafter\n"].concat()).await;
        let lengths: Vec<usize> = lines.iter().map(String::len).collect();
        assert_eq!(lengths, [MAX_LINE, MAX_LINE, 10, 5]);
        let exact = vec![b'y'; MAX_LINE];
        let lines = lines_of(&[exact.as_slice(), b"\nnext\n"].concat()).await;
        assert_eq!(lines.len(), 2, "a line of exactly the cap is one line");
        assert_eq!(lines_of(b"caf\xc3\xa9 \xff\n").await, ["café \u{fffd}"]);
    }

    #[test]
    fn signals_are_named() {
        assert_eq!(signal_name(9), "SIGKILL (signal 9)");
        assert_eq!(signal_name(42), "signal 42");
    }
}
