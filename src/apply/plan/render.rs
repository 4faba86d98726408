//! The texts of the files apply writes whole (sysctl.d, limits.d, a unit's drop-in), and the
//! lines export shares with them.

use crate::value::Value;

/// A value as the kernel accepts it back: numbers in full ("no limit", stored as i64::MAX,
/// prints as `unlimited` for people but must be written as a number).
pub fn kernel_text(v: &Value) -> String {
    match v {
        Value::Num(n) => n.to_string(),
        other => other.to_string(),
    }
}

/// Our file's existing lines with `updates` applied (existing keys keep their place).
pub fn merge_sysctl_lines(existing: &str, updates: &[(String, String)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = existing
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            l.split_once('=')
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        })
        .collect();
    for (k, v) in updates {
        match out.iter_mut().find(|(ek, _)| ek == k) {
            Some(slot) => slot.1 = v.clone(),
            None => out.push((k.clone(), v.clone())),
        }
    }
    out
}

/// The first line of every file apply writes whole.
const MANAGED: &str = "# Managed by wstune apply: this file is rewritten whole. `wstune rollback` restores what it replaced.\n";

pub fn render_sysctl_file(lines: &[(String, String)]) -> String {
    format!("{MANAGED}{}", sysctl_lines(lines))
}

/// The `KEY = VALUE` lines of a sysctl.d file (apply's file, export's file).
pub fn sysctl_lines<K: AsRef<str>, V: AsRef<str>>(lines: &[(K, V)]) -> String {
    lines
        .iter()
        .map(|(k, v)| format!("{} = {}\n", k.as_ref(), v.as_ref()))
        .collect()
}

pub fn render_limits_file(nofile: u64) -> String {
    format!("{MANAGED}{}", limits_lines(nofile))
}

/// The nofile lines of a limits.d file (apply's file, export's file).
pub fn limits_lines(nofile: u64) -> String {
    // `*` does not match root in pam_limits, hence the explicit root lines.
    format!("* soft nofile {nofile}\n* hard nofile {nofile}\nroot soft nofile {nofile}\nroot hard nofile {nofile}\n")
}

pub fn render_unit_dropin(nofile: u64) -> String {
    format!(
        "# Managed by wstune apply. `wstune rollback` removes it.\n{}",
        dropin_body(Some(nofile))
    )
}

/// The body of a systemd drop-in setting the open-file limit (apply's drop-in, export's).
pub fn dropin_body(nofile: Option<u64>) -> String {
    match nofile {
        Some(n) => format!("[Service]\nLimitNOFILE={n}\n"),
        None => "[Service]\n".to_string(),
    }
}
