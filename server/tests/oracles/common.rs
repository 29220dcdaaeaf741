//! What the oracle tests (`quartz_oracle.rs`, `rrule_oracle.rs`) share: a seedable random
//! source, numbers from the environment, and one run of an oracle process over every case.

use std::io::Write;
use std::process::{Command, Stdio};

/// SplitMix64: small, seedable, and the same sequence on every machine.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub(crate) fn range<T>(&mut self, low: T, high: T) -> T
    where
        T: Copy + Into<i64> + TryFrom<i64>,
    {
        let (low, high) = (low.into(), high.into());
        let value = low + (self.next() % (high - low + 1) as u64) as i64;
        T::try_from(value).ok().unwrap()
    }

    pub(crate) fn percent(&mut self) -> u32 {
        self.range(0, 99)
    }

    pub(crate) fn chance(&mut self, percent: u32) -> bool {
        self.percent() < percent
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.range(0, items.len() as i64 - 1) as usize]
    }
}

/// `name` from the environment as a number, or `default`.
pub(crate) fn env_number<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(text) => text
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        Err(_) => default,
    }
}

/// Runs `oracle` once with `input` on its standard input; its answer, line by line.
pub(crate) fn ask(oracle: &mut Command, input: String) -> Vec<String> {
    let mut child = oracle
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{oracle:?} runs: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()).unwrap());
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        output.status.success(),
        "the oracle {oracle:?} exited with {}",
        output.status
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}
