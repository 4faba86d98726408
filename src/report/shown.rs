//! How a finding reads for people, whichever layout shows it (the table, the blocks): what
//! was asked (rows, layout, width, colour, the why) and each value in its units.

use crate::catalog::eval::Finding;

/// Which rows the table lists in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Show {
    /// Failures and warnings in full, grouped by area, each with its fix; what could not be
    /// checked in one line each; passes and info as counts.
    #[default]
    Problems,
    /// Every row, grouped by area.
    All,
}

/// How the findings are laid out for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One table per area: a row per finding, the fix in the last column.
    Table,
    /// One block per finding, the fix commands each whole on a line of their own
    /// (blocks.rs): what a narrow terminal, a pipe or a log reads well.
    Blocks,
}

/// What the caller decided about the terminal and what was asked.
#[derive(Debug, Clone, Copy)]
pub struct Human {
    pub layout: Layout,
    /// Colour (a terminal, and NO_COLOR unset): the caller decides.
    pub colour: bool,
    /// The terminal's columns, or the width asked for where there is no terminal.
    pub width: u16,
    pub show: Show,
    /// Each listed finding's why under it (`check --why`).
    pub why: bool,
}

/// Whether a check's values are byte counts, shown in KiB, MiB, GiB to people (the machine
/// formats keep the number). From the id, as the area is: the catalog's ids are stable.
/// tcp_mem and the TCP memory counter are in pages, not bytes, and stay numbers.
pub fn in_bytes(id: &str) -> bool {
    let id = id.split('[').next().unwrap_or(id);
    let id = id.strip_suffix(".boot").unwrap_or(id);
    id.ends_with(".host.memory")
        || id.contains(".tcp_rmem.")
        || id.contains(".tcp_wmem.")
        || id.ends_with(".tcp_notsent_lowat")
}

/// A value as people read it: byte counts in binary units for the checks that count bytes.
pub fn value_shown(id: &str, v: &crate::value::Value) -> String {
    match v {
        // The kernel's "no limit" for a byte count (tcp_notsent_lowat's default) is no size.
        crate::value::Value::Num(n) if *n == u32::MAX as i64 && in_bytes(id) => {
            format!("no limit ({n})")
        }
        crate::value::Value::Num(n) if *n != i64::MAX && in_bytes(id) => super::text::bytes(*n),
        other => other.to_string(),
    }
}

/// The current value for people ("-" when there is none).
pub fn current_shown(f: &Finding) -> String {
    f.current
        .as_ref()
        .map(|v| value_shown(&f.id, v))
        .unwrap_or_else(|| "-".into())
}

/// The target for people: [`target_text`] in the value's units.
pub fn target_shown(f: &Finding) -> String {
    match &f.target {
        Some(t) => format!("{} {}", f.compare, value_shown(&f.id, t)),
        None => target_text(f),
    }
}

/// "<= 30", "covers 10000 65535", "absent".
pub fn target_text(f: &Finding) -> String {
    match (&f.target, f.compare) {
        (Some(t), c) => format!("{c} {t}"),
        (None, "absent") => "absent".into(),
        (None, "no_growth") => "no growth".into(),
        (None, _) => "-".into(),
    }
}

/// Whether a finding is advice: its check is an info check, which never fails a host, so its
/// fix is optional and `wstune apply` leaves it (apply changes failures and warnings only).
/// People see its commands only when they ask (`check --why`, `wstune explain`); the JSON
/// report carries them with `advice: true`.
pub fn is_advice(f: &Finding) -> bool {
    f.severity == crate::catalog::Severity::Info
}

/// What a finding's fix shows people, whichever layout: the labelled fix texts in order, and
/// the remarks under them (the Kubernetes class of each sysctl the fix names).
#[derive(Debug, Default, PartialEq)]
pub struct FixShown {
    /// A line above the fix texts: advice says it is optional, or how to see it.
    pub head: Option<String>,
    /// `("now", text)`, `("persist", text)`: each a fix as the catalog words it.
    pub texts: Vec<(&'static str, String)>,
    /// One line each, under the fix texts.
    pub remarks: Vec<String>,
}

/// The fix of `f` as people see it. A failure's or warning's fix is shown whole (commands to
/// paste, each with the Kubernetes class of the sysctls it names). Advice ([`is_advice`]) that
/// is words only is shown as `advice: ...`; advice with commands shows them only with
/// `why` (labelled optional), else one line saying how to see them. A finding that passed, or
/// whose note says more, shows no fix.
pub fn fix_shown(f: &Finding, why: bool) -> FixShown {
    use crate::catalog::eval::Status;
    let listed = matches!(f.status, Status::Fail | Status::Warn)
        || (f.status == Status::Info && f.note.is_none());
    if !listed {
        return FixShown::default();
    }
    let texts: Vec<(&'static str, String)> =
        [("now", &f.fix.runtime), ("persist", &f.fix.persistent)]
            .into_iter()
            .filter_map(|(l, t)| t.as_ref().map(|t| (l, t.clone())))
            .collect();
    if texts.is_empty() {
        return FixShown::default();
    }
    let all = texts
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join(" ; ");
    let remarks = crate::catalog::kube::remark(&all);
    let commands = texts.iter().any(|(_, t)| has_command(t));
    if !is_advice(f) {
        return FixShown {
            head: None,
            texts,
            remarks,
        };
    }
    if !commands {
        // Words, not a command: nothing to paste by mistake.
        return FixShown {
            head: None,
            texts: texts
                .into_iter()
                .map(|(l, t)| (if l == "now" { "advice" } else { l }, t))
                .collect(),
            remarks: Vec::new(),
        };
    }
    if why {
        FixShown {
            head: Some(
                "advice, optional (an info check: wstune apply leaves it; the why says when it helps):"
                    .into(),
            ),
            texts,
            remarks,
        }
    } else {
        FixShown {
            head: Some(
                "advice, optional: `--why` shows why and its commands (`wstune explain ID`)".into(),
            ),
            texts: Vec::new(),
            remarks: Vec::new(),
        }
    }
}

/// Whether a fix text holds a command to paste (a part, split at `; `, that starts with a
/// program), not only words.
pub fn has_command(text: &str) -> bool {
    let main = text.split(" # ").next().unwrap_or(text);
    main.split("; ")
        .map(|p| p.trim().strip_prefix("or ").unwrap_or(p.trim()))
        .any(is_command)
}

/// Whether a fix part is a command to paste (it starts with a program) rather than words.
pub fn is_command(part: &str) -> bool {
    const PROGRAMS: &[&str] = &[
        "sysctl",
        "echo",
        "printf",
        "prlimit",
        "systemctl",
        "ethtool",
        "netsh",
        "reg",
        "nft",
        "modprobe",
        "ulimit",
        "tee",
        "sudo",
        "ip",
        "tc",
        "sed",
        "mkdir",
    ];
    let first = part.split_whitespace().next().unwrap_or("");
    PROGRAMS.contains(&first)
        || ["Set-", "New-", "Get-", "Enable-", "Disable-"]
            .iter()
            .any(|p| first.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::value_shown;

    #[test]
    fn byte_values_read_in_binary_units_and_no_limit_says_so() {
        use crate::value::Value;
        assert_eq!(
            value_shown("linux.host.memory", &Value::Num(25_276_194_816)),
            "23.5 GiB"
        );
        assert_eq!(
            value_shown(
                "linux.net.ipv4.tcp_notsent_lowat.boot",
                &Value::Num(4294967295)
            ),
            "no limit (4294967295)"
        );
        assert_eq!(
            value_shown("linux.net.ipv4.tcp_mem.high", &Value::Num(262144)),
            "262144",
            "tcp_mem counts pages"
        );
    }
}
