//! `serve`'s settings table: every server setting, its value and where it came from (flag,
//! profile, default), then what the runtime made of them.

use crate::output;

/// One row: the setting, its value, where the value came from.
pub type Setting = (&'static str, String, &'static str);

/// The table `serve` prints before it listens. `workers` is the effective count of I/O
/// threads, `acceptors` the accept loops; `iocp` adds what an operator compares with perfmon
/// and netsh on Windows (tokio's I/O driver there is mio's IOCP: one completion port, polled
/// by the I/O workers, no thread of its own).
pub fn settings_table<K: AsRef<str>, F: AsRef<str>>(
    settings: &[(K, String, F)],
    workers: usize,
    acceptors: usize,
    iocp: bool,
) -> String {
    let mut t = output::new_table();
    t.set_header(vec!["Setting", "Value", "From"]);
    for (k, v, from) in settings {
        t.add_row(vec![
            k.as_ref().to_string(),
            v.clone(),
            from.as_ref().to_string(),
        ]);
    }
    t.add_row(vec![
        "io workers (effective)".to_string(),
        workers.to_string(),
        "runtime".into(),
    ]);
    t.add_row(vec![
        "accept loops".to_string(),
        acceptors.to_string(),
        "flag".into(),
    ]);
    if iocp {
        t.add_row(vec![
            "IOCP threads (= io workers)".to_string(),
            workers.to_string(),
            "runtime".into(),
        ]);
        t.add_row(vec![
            "socket options".to_string(),
            "TCP_NODELAY on each connection; listener SO_REUSEADDR, listen backlog 65535 requested"
                .to_string(),
            "built in".into(),
        ]);
    }
    t.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setting_shows_where_it_came_from_and_iocp_rows_only_when_asked() {
        let rows = vec![("max connections", "100000".to_string(), "profile")];
        let t = settings_table(&rows, 4, 1, false);
        let line = t.lines().find(|l| l.contains("max connections")).unwrap();
        assert!(line.contains("100000") && line.contains("profile"), "{t}");
        assert!(
            t.contains("io workers (effective)") && !t.contains("IOCP"),
            "{t}"
        );
        assert!(settings_table(&rows, 4, 1, true).contains("IOCP threads (= io workers)"));
    }
}
