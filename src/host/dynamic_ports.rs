//! Windows' TCP dynamic (ephemeral) port range: how it is read and checked.
//!
//! Since Vista the range replaces MaxUserPort and is set per IP version with
//! `netsh int ipv4|ipv6 set dynamicport tcp start=N num=M` (persistent). Windows stores it in an
//! undocumented binary value under HKLM\SYSTEM\CurrentControlSet\Control\Nsi, so the live
//! backend reads it the documented way, `netsh int ipv4 show dynamicport tcp` (KB 929851), and
//! parses that output here. The labels are localized ("Start Port" / "Startport" / ...), so the
//! parser takes the numbers by position: the first two `label : number` lines are the start port
//! and the number of ports, in that order in every language.

use serde::{Deserialize, Serialize};

/// The highest port number plus one: a range may end at 65535, so start + count <= 65536.
pub const PORT_END: u32 = 65536;

/// One dynamic port range, as netsh states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortRange {
    pub start: u32,
    pub count: u32,
}

impl PortRange {
    /// A range netsh could have set: start 1..65535, at least one port, ending at 65535 at most.
    pub fn new(start: u32, count: u32) -> Result<PortRange, String> {
        if start == 0 || start >= PORT_END {
            return Err(format!("start port {start} is not a port (1..65535)"));
        }
        if count == 0 || u64::from(start) + u64::from(count) > u64::from(PORT_END) {
            return Err(format!(
                "start {start} + {count} ports runs past port 65535 (start + num must be <= 65536)"
            ));
        }
        Ok(PortRange { start, count })
    }

    /// The last port of the range.
    pub fn last(&self) -> u32 {
        self.start + self.count - 1
    }
}

/// Parse `netsh int ipv4 show dynamicport tcp`:
///
/// ```text
/// Protocol tcp Dynamic Port Range
/// ---------------------------------
/// Start Port      : 49152
/// Number of Ports : 16384
/// ```
pub fn parse_netsh(text: &str) -> Result<PortRange, String> {
    let numbers: Vec<u32> = text
        .lines()
        .filter_map(|l| l.rsplit_once(':'))
        .filter_map(|(_, v)| {
            // Some locales group digits (16.384, 16 384, 16,384); a port number has no fraction.
            let digits: String = v
                .trim()
                .chars()
                .filter(|c| !matches!(c, '.' | ',' | ' ' | '\u{a0}' | '\u{202f}' | '\''))
                .collect();
            (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
                .then(|| digits.parse().ok())
                .flatten()
        })
        .collect();
    match numbers[..] {
        [start, count, ..] => PortRange::new(start, count),
        _ => Err(format!(
            "expected a start port and a number of ports in netsh's output, got: {:?}",
            text.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn english_output() {
        let text = "\r\nProtocol tcp Dynamic Port Range\r\n---------------------------------\r\nStart Port      : 49152\r\nNumber of Ports : 16384\r\n\r\n";
        assert_eq!(
            parse_netsh(text),
            Ok(PortRange {
                start: 49152,
                count: 16384
            })
        );
        assert_eq!(parse_netsh(text).unwrap().last(), 65535);
    }

    #[test]
    fn localized_output_is_read_by_position() {
        let german = "\nProtokoll tcp Dynamischer Portbereich\n---------------------------------\nStartport       : 10000\nAnzahl der Ports : 55535\n";
        assert_eq!(
            parse_netsh(german),
            Ok(PortRange {
                start: 10000,
                count: 55535
            })
        );
        let french = "Plage de ports dynamiques du protocole tcp\n---\nPort de démarrage      : 49152\nNombre de ports        : 16\u{202f}384\n";
        assert_eq!(parse_netsh(french).unwrap().count, 16384);
    }

    #[test]
    fn garbage_and_impossible_ranges_are_errors() {
        assert!(parse_netsh("The requested operation requires elevation.")
            .unwrap_err()
            .contains("expected a start port"));
        assert!(parse_netsh("Start Port : 65534\nNumber of Ports : 55535\n")
            .unwrap_err()
            .contains("runs past port 65535"));
        assert!(PortRange::new(0, 10).is_err());
        assert!(PortRange::new(10000, 55536).is_ok());
        assert!(PortRange::new(10000, 55537).is_err());
        // A hostile captured tree: no overflow, an error.
        assert!(PortRange::new(10000, u32::MAX).is_err());
    }
}
