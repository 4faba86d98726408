//! `bench deflate`'s tables for people: round trips beside the sgcWebSockets guide's figures, or the cost of
//! one broadcast.

use crate::bench::{BroadcastRow, ContextsRow, Row, Settings};
use crate::output;

pub fn round_trip_table(rows: &[Row], a: &Settings) -> String {
    let mut t = output::new_table();
    t.set_header(vec![
        "size",
        "stream",
        "mode",
        "ms / 10k round trips",
        "ratio",
        "guide after",
        "guide before",
    ]);
    for r in rows {
        let opt = |v: Option<f64>| v.map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into());
        t.add_row(vec![
            format!("{} KiB", r.size_bytes as f64 / 1024.0),
            r.stream.to_string(),
            r.mode.to_string(),
            format!("{:.1}", r.ms_per_10k),
            format!("{:.3}", r.ratio),
            opt(r.guide_after_ms_per_10k),
            opt(r.guide_before_ms_per_10k),
        ]);
    }
    format!(
        "permessage-deflate round trips (compress + decompress + compare), window {} bits, memLevel {}, level {}, {} iterations per row.\n\
         'guide after' and 'guide before': the sgcWebSockets tuning guide's figures (16 cores) after and before its tuning.\n\
         'repeated' sends one message again and again (what the guide most likely measured); 'distinct' is a ticker whose values change.\n{t}\n",
        a.window_bits, a.mem_level, a.level, a.iterations
    )
}

/// `messages` broadcast to `n` recipients.
pub fn broadcast_table(rows: &[BroadcastRow], a: &Settings, messages: usize, n: usize) -> String {
    let mut t = output::new_table();
    t.set_header(vec![
        "size",
        "mode",
        "compress ms / broadcast",
        "wire ratio",
        "deflate memory",
    ]);
    for r in rows {
        t.add_row(vec![
            format!("{} KiB", r.size_bytes as f64 / 1024.0),
            r.mode.to_string(),
            format!("{:.3}", r.ms_per_broadcast),
            format!("{:.3}", r.ratio),
            format!(
                "{:.1} MiB",
                r.deflate_memory_bytes as f64 / (1 << 20) as f64
            ),
        ]);
    }
    format!(
        "Broadcasting {messages} distinct ticker messages to {n} recipients with permessage-deflate (window {} bits, memLevel {}, level {}).\n\
         'once' compresses each message one time for everybody (the server's way); 'per_connection' keeps a context per recipient.\n{t}\n",
        a.window_bits, a.mem_level, a.level
    )
}

/// What `n` connections' own contexts cost.
pub fn contexts_table(r: &ContextsRow, a: &Settings) -> String {
    let mut t = output::new_table();
    t.set_header(vec![
        "messages",
        "us per connection",
        "page faults per connection",
        "resident KiB per connection",
    ]);
    let opt = |v: Option<f64>, d: usize| match v {
        Some(v) => format!("{v:.d$}"),
        None => "-".into(),
    };
    for p in &r.passes {
        t.add_row(vec![
            p.pass.to_string(),
            format!("{:.2}", p.us_per_conn),
            opt(p.faults_per_conn, 1),
            opt(p.resident_bytes_per_conn.map(|b| b / 1024.0), 1),
        ]);
    }
    format!(
        "{} connections with their own permessage-deflate contexts (context takeover), window {} bits, memLevel {}, level {}: \
         a compressor and a decompressor each, {}-byte JSON messages. 'first' creates the contexts (what the first message \
         of a connection costs), 'again' reuses them (each context cold: the others were touched since). \
         The server's estimate for these settings is {:.1} KiB per connection.\n{t}\n",
        r.connections,
        a.window_bits,
        a.mem_level,
        a.level,
        r.size_bytes,
        r.estimate_bytes_per_conn as f64 / 1024.0
    )
}
