//! `wstune bench deflate`: the measurements in `crate::bench`, a table or JSON.

use crate::bench::{self, parse_size, Settings};
use crate::outcome::Outcome;
use crate::output;
use crate::report::{self, ListFormat};
use anyhow::{bail, Result};

/// `bench deflate` as given; the sizes and codec settings are checked here, where they are used.
#[derive(Debug, Clone)]
pub struct DeflateRequest {
    /// Message sizes, comma-separated (1k = 1024 bytes).
    pub sizes: String,
    /// Round trips per size, stream and mode.
    pub iterations: usize,
    pub window_bits: u8,
    pub mem_level: u8,
    pub level: u8,
    /// The broadcast cost to this many recipients instead of round trips.
    pub broadcast: Option<usize>,
    /// What this many connections' own contexts cost instead of round trips.
    pub contexts: Option<usize>,
    pub format: ListFormat,
}

pub fn deflate(a: &DeflateRequest) -> Result<Outcome> {
    let sizes: Vec<usize> = a.sizes.split(',').map(parse_size).collect::<Result<_>>()?;
    if a.iterations == 0 {
        bail!("--iterations must be at least 1");
    }
    if !(9..=15).contains(&a.window_bits) || !(1..=9).contains(&a.mem_level) || a.level > 9 {
        bail!("--window-bits 9..=15, --mem-level 1..=9, --level 0..=9");
    }
    let settings = Settings {
        iterations: a.iterations,
        window_bits: a.window_bits,
        mem_level: a.mem_level,
        level: a.level,
    };
    if let Some(n) = a.contexts {
        if !(1..=10_000_000).contains(&n) {
            bail!("--contexts {n}: give 1..=10000000 connections");
        }
        // Every context stays alive for the second pass: refuse before allocating what the
        // host does not have, rather than let the OOM killer end the run.
        let need =
            n as u64 * embedded_server::memory::deflate_bytes_per_conn(a.window_bits, a.mem_level);
        if let Some(avail) = crate::selftest::sizing::mem_available(&crate::host::Machine::live()) {
            if need > avail / 2 {
                bail!(
                    "--contexts {n}: {n} connections' contexts at window {} / memLevel {} need \
                     about {} MiB, more than half of the {} MiB available; give fewer",
                    a.window_bits,
                    a.mem_level,
                    need >> 20,
                    avail >> 20
                );
            }
        }
        let row = bench::contexts(n, sizes[0], &settings);
        let text = match a.format {
            ListFormat::Json => serde_json::to_string_pretty(&row)? + "\n",
            ListFormat::Table => report::contexts_table(&row, &settings),
        };
        output::emit(None, &text)?;
        return Ok(Outcome::Ok);
    }
    let text = match a.broadcast {
        Some(n) => {
            let rows = bench::broadcast(&sizes, n, &settings)?;
            match a.format {
                ListFormat::Json => serde_json::to_string_pretty(&rows)? + "\n",
                ListFormat::Table => report::broadcast_table(
                    &rows,
                    &settings,
                    bench::broadcast_messages(&settings),
                    n,
                ),
            }
        }
        None => {
            let rows = bench::round_trips(&sizes, &settings);
            match a.format {
                ListFormat::Json => serde_json::to_string_pretty(&rows)? + "\n",
                ListFormat::Table => report::round_trip_table(&rows, &settings),
            }
        }
    };
    output::emit(None, &text)?;
    Ok(Outcome::Ok)
}
