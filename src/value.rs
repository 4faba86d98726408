//! The values facts and targets are made of.
//!
//! Kernel settings are integers (one or several per key), versions, or text. `i64` holds every
//! sysctl the catalog reads: fs.file-max's "no limit" is `i64::MAX`, which is also how an
//! `unlimited` rlimit is stored, and both print as `unlimited`.

use serde::Serialize;
use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Num(i64),
    List(Vec<i64>),
    Text(String),
    Bool(bool),
}

impl Value {
    /// Parse a sysctl/proc value: one integer, several whitespace-separated integers, or text.
    pub fn parse_kernel(text: &str) -> Value {
        let t = text.trim();
        let nums: Result<Vec<i64>, _> = t.split_whitespace().map(str::parse::<i64>).collect();
        match nums {
            Ok(v) if v.len() == 1 => Value::Num(v[0]),
            Ok(v) if !v.is_empty() => Value::List(v),
            // u64 values above i64::MAX (e.g. 18446744073709551615) mean "no limit".
            _ if t.parse::<u64>().is_ok() => Value::Num(i64::MAX),
            _ => Value::Text(t.to_string()),
        }
    }

    pub fn from_json(v: &serde_json::Value) -> Option<Value> {
        Some(match v {
            serde_json::Value::Number(n) => Value::Num(n.as_i64().unwrap_or(i64::MAX)),
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::String(s) => Value::Text(s.clone()),
            serde_json::Value::Array(a) => {
                Value::List(a.iter().map(|x| x.as_i64()).collect::<Option<Vec<_>>>()?)
            }
            _ => return None,
        })
    }

    pub fn as_num(&self) -> Option<i64> {
        match self {
            Value::Num(n) => Some(*n),
            Value::Bool(b) => Some(*b as i64),
            _ => None,
        }
    }
}

/// Plain rendering for tables and fix commands: lists space-separated as sysctl writes them.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Num(i64::MAX) => f.write_str("unlimited"),
            Value::Num(n) => write!(f, "{n}"),
            Value::List(v) => {
                let parts: Vec<String> = v.iter().map(|n| n.to_string()).collect();
                f.write_str(&parts.join(" "))
            }
            Value::Text(s) => f.write_str(s),
            Value::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// Dotted version numbers ("6.18.44-fc" -> [6, 18, 44]), for kernel-version checks.
pub fn version_parts(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()
        .unwrap_or("")
        .split('.')
        .map_while(|p| p.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_values() {
        assert_eq!(Value::parse_kernel("4096\n"), Value::Num(4096));
        assert_eq!(
            Value::parse_kernel("32768\t60999\n"),
            Value::List(vec![32768, 60999])
        );
        assert_eq!(
            Value::parse_kernel("9223372036854775807"),
            Value::Num(i64::MAX)
        );
        assert_eq!(
            Value::parse_kernel("18446744073709551615"),
            Value::Num(i64::MAX)
        );
        assert_eq!(Value::parse_kernel("cubic"), Value::Text("cubic".into()));
        assert_eq!(Value::Num(i64::MAX).to_string(), "unlimited");
        assert_eq!(Value::List(vec![1, 2, 3]).to_string(), "1 2 3");
    }

    #[test]
    fn versions() {
        assert_eq!(version_parts("6.18.44-fc-v657"), vec![6, 18, 44]);
        assert_eq!(version_parts("3.9"), vec![3, 9]);
        assert_eq!(version_parts("5.4.0-150-generic"), vec![5, 4, 0]);
    }
}
