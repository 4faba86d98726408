//! How a current value meets a target: the comparisons, port lists as merged ranges, and the
//! value apply would write (never a step in the wrong direction).

use crate::catalog::Compare;
use crate::value::{version_parts, Value};

/// A kernel port list (`30000-32767,10250`; empty: none) as sorted, merged ranges. None when
/// it is not one.
pub fn port_set(v: &Value) -> Option<Vec<(i64, i64)>> {
    let text = match v {
        Value::Num(n) => n.to_string(),
        Value::Text(t) => t.clone(),
        _ => return None,
    };
    let port = |s: &str| {
        s.trim()
            .parse::<i64>()
            .ok()
            .filter(|p| (0..=65535).contains(p))
    };
    let mut out = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => (port(part)?, port(part)?),
        };
        if lo > hi {
            return None;
        }
        out.push((lo, hi));
    }
    Some(merge_ranges(out))
}

fn merge_ranges(mut r: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    r.sort();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (lo, hi) in r {
        match out.last_mut() {
            Some(last) if lo <= last.1 + 1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// Ranges as the kernel writes them: `10250,30000-32767`.
pub fn port_text(r: &[(i64, i64)]) -> String {
    r.iter()
        .map(|&(lo, hi)| {
            if lo == hi {
                lo.to_string()
            } else {
                format!("{lo}-{hi}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `current` meets `target` under `compare`.
pub fn meets(compare: Compare, current: &Value, target: &Value) -> Result<bool, String> {
    let nums = || match (current.as_num(), target.as_num()) {
        (Some(c), Some(t)) => Ok((c, t)),
        _ => Err(format!("cannot compare '{current}' with '{target}'")),
    };
    Ok(match compare {
        Compare::AtLeast => {
            let (c, t) = nums()?;
            c >= t
        }
        Compare::AtMost => {
            let (c, t) = nums()?;
            c <= t
        }
        Compare::Equal => match (current, target) {
            (Value::Text(a), Value::Text(b)) => a.eq_ignore_ascii_case(b),
            _ => {
                let (c, t) = nums()?;
                c == t
            }
        },
        Compare::Covers => match (current, target) {
            (Value::List(c), Value::List(t)) if c.len() == 2 && t.len() == 2 => {
                c[0] <= t[0] && c[1] >= t[1]
            }
            _ => {
                return Err(format!(
                    "cannot compare '{current}' with the range '{target}'"
                ))
            }
        },
        Compare::Reserves => {
            let (Some(c), Some(t)) = (port_set(current), port_set(target)) else {
                return Err(format!(
                    "cannot read '{current}' or '{target}' as port lists"
                ));
            };
            t.iter()
                .all(|&(lo, hi)| c.iter().any(|&(a, b)| a <= lo && hi <= b))
        }
        Compare::VersionAtLeast => {
            let c = version_parts(&current.to_string());
            let t = version_parts(&target.to_string());
            if c.is_empty() {
                return Err(format!("'{current}' is not a version"));
            }
            c >= t
        }
        Compare::Absent | Compare::NoGrowth | Compare::Report => true,
    })
}

/// The value to set (what a fix says and `apply` writes): the target, except that a `>=` setting keeps a higher current value and a
/// `<=` one a lower (never undo an operator's deliberate choice), and a range is widened.
/// `field` replaces one value of a multi-value setting and keeps the others.
pub fn desired(
    compare: Compare,
    current: &Value,
    field: Option<usize>,
    target: &Value,
) -> Option<Value> {
    let pick = |c: i64, t: i64| match compare {
        Compare::AtLeast => Some(c.max(t)),
        Compare::AtMost => Some(c.min(t)),
        Compare::Equal => Some(t),
        _ => None,
    };
    match (current, field, target) {
        (Value::List(list), Some(i), Value::Num(t)) => {
            let mut list = list.clone();
            let slot = list.get_mut(i)?;
            *slot = pick(*slot, *t)?;
            Some(Value::List(list))
        }
        (Value::List(c), None, Value::List(t))
            if compare == Compare::Covers && c.len() == 2 && t.len() == 2 =>
        {
            Some(Value::List(vec![c[0].min(t[0]), c[1].max(t[1])]))
        }
        (Value::Num(c), None, Value::Num(t)) => pick(*c, *t).map(Value::Num),
        // Ports already reserved stay reserved: the union.
        (c, None, t) if compare == Compare::Reserves => {
            let mut all = port_set(c)?;
            all.extend(port_set(t)?);
            Some(Value::Text(port_text(&merge_ranges(all))))
        }
        _ => None,
    }
}
