//! The HTTP API's gate: its key, the cap on a body and the body's charge to the memory
//! budget, and the count of every admin answer (`ws_api_requests_total`).

use super::http::{json_error, Reply};
use crate::channels::api::ApiKey;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// The HTTP API's key and body cap, and the count of every admin answer.
#[derive(Debug)]
pub struct Gate {
    pub(super) key: Option<ApiKey>,
    /// The largest POST body accepted, bytes.
    pub max_body: usize,
    pub(super) counts: Mutex<BTreeMap<(&'static str, u16), u64>>,
    /// The server whose memory budget API bodies are charged to while they are held (set by
    /// [`serve_with`]; a `--processes` supervisor, which only forwards them, has none).
    pub(super) budget: std::sync::OnceLock<Arc<crate::metrics::Metrics>>,
}

/// An API body's charge to the memory budget, given back when the request is answered.
pub(super) struct BodyCharge {
    metrics: Arc<crate::metrics::Metrics>,
    bytes: usize,
}

impl Drop for BodyCharge {
    fn drop(&mut self) {
        self.metrics
            .memory
            .release(crate::budget::Store::Input, self.bytes);
    }
}

impl Gate {
    /// A gate for `key` (None: the API is off) and bodies up to `max_body` bytes.
    pub fn new(key: Option<ApiKey>, max_body: usize) -> Gate {
        let mut counts = BTreeMap::new();
        // One series from the start, so the family is never empty.
        counts.insert(("publish", 200), 0);
        Gate {
            key,
            max_body,
            counts: Mutex::new(counts),
            budget: std::sync::OnceLock::new(),
        }
    }

    /// Charge a body of `bytes` to the memory budget for as long as the answer holds, or the
    /// 503 when the budget has no room for it now (the body is not read: with `Expect:
    /// 100-continue` it is never sent).
    pub(super) fn charge_body(&self, bytes: usize) -> Result<Option<BodyCharge>, Reply> {
        let Some(metrics) = self.budget.get() else {
            return Ok(None);
        };
        if !metrics
            .memory
            .try_charge(crate::budget::Store::Input, bytes, 0)
        {
            let msg = format!(
                "server busy: its memory budget has no room for a body of {bytes} bytes now; \
                 retry later (or send smaller batches)"
            );
            return Err(json_error(503, &msg).with("Retry-After: 1\r\n"));
        }
        Ok(Some(BodyCharge {
            metrics: metrics.clone(),
            bytes,
        }))
    }

    pub(super) fn count(&self, route: &'static str, code: u16) {
        *self
            .counts
            .lock()
            .unwrap()
            .entry((route, code))
            .or_default() += 1;
    }

    /// Append the answers counted, as the counter family `name`, to `o`.
    pub fn render_counts(&self, o: &mut String, name: &str) {
        let _ = writeln!(
            o,
            "# HELP {name} Admin listener answers, by route and HTTP status.\n# TYPE {name} counter"
        );
        for ((route, code), n) in self.counts.lock().unwrap().iter() {
            let _ = writeln!(o, "{name}{{route=\"{route}\",code=\"{code}\"}} {n}");
        }
    }
}
