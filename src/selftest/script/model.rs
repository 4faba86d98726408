//! A script as the generator runs it: populations, each with its target (path, headers,
//! token in place) and its steps, and the stages that open and close them.

use serde::{Deserialize, Serialize};

/// What a generator process runs: each population's connections for this process, its
/// target (path, headers, token in place) and its steps.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Script {
    pub populations: Vec<Population>,
    /// `stages:`: (the count as a share of the populations' total, seconds to reach it from
    /// the last). Empty: every connection opens before the run and stays to its end.
    #[serde(default)]
    pub stages: Vec<(f64, f64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Population {
    pub name: String,
    /// Connections of this population in the whole run (a process gets its share).
    pub conns: usize,
    /// The request's path and query, the token in it when sent as a query.
    pub path: String,
    /// Extra request header lines, each ending in CRLF (headers, subprotocol, token).
    pub headers: String,
    pub repeat: bool,
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Step {
    /// A text frame (templates `{{conn}}` and `{{seq}}` filled in).
    Send {
        text: String,
    },
    /// Wait for a message that matches; timed from the last message this connection sent.
    Expect {
        name: String,
        matcher: Matcher,
        timeout_ms: u64,
    },
    Think {
        ms: u64,
    },
    Idle {
        ms: u64,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Matcher {
    Text(String),
    Contains(String),
    Json(serde_json::Value),
}

impl Matcher {
    pub fn matches(&self, msg: &[u8]) -> bool {
        let Ok(text) = std::str::from_utf8(msg) else {
            return false;
        };
        match self {
            Matcher::Text(t) => text == t,
            Matcher::Contains(t) => text.contains(t.as_str()),
            Matcher::Json(want) => serde_json::from_str::<serde_json::Value>(text)
                .is_ok_and(|got| json_subset(want, &got)),
        }
    }
}

/// `want`'s fields are all in `got` with equal values (objects recursively; `"*"` is any).
pub fn json_subset(want: &serde_json::Value, got: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (want, got) {
        (Value::String(s), _) if s == "*" => true,
        (Value::Object(w), Value::Object(g)) => w
            .iter()
            .all(|(k, v)| g.get(k).is_some_and(|gv| json_subset(v, gv))),
        _ => want == got,
    }
}

/// `{{conn}}` (the connection's number in the run) and `{{seq}}` (how many times it has run
/// its steps) filled in.
pub fn fill(template: &str, conn: usize, seq: u64) -> String {
    template
        .replace("{{conn}}", &conn.to_string())
        .replace("{{seq}}", &seq.to_string())
}

impl Script {
    pub fn conns(&self) -> usize {
        self.populations.iter().map(|p| p.conns).sum()
    }

    /// The names of the steps that wait (`POPULATION.STEP`), for thresholds and the report.
    pub fn waiting_steps(&self) -> Vec<String> {
        self.populations
            .iter()
            .flat_map(|p| {
                p.steps.iter().filter_map(move |s| match s {
                    Step::Expect { name, .. } => Some(format!("{}.{name}", p.name)),
                    _ => None,
                })
            })
            .collect()
    }

    /// How long the stages take, seconds (None: no stages).
    pub fn stages_secs(&self) -> Option<f64> {
        (!self.stages.is_empty()).then(|| self.stages.iter().map(|s| s.1).sum())
    }

    /// With stages: when each of this share's connections opens and closes, seconds from the
    /// start, by connection number. The populations ramp together (each connection's place is
    /// its share of its own population), and on the way down the newest close first.
    pub fn schedule(&self) -> Vec<(usize, f64, f64)> {
        let n = self.conns();
        let mut order: Vec<(f64, usize)> = Vec::with_capacity(n);
        let mut i = 0;
        for p in &self.populations {
            for q in 0..p.conns {
                order.push(((q as f64 + 0.5) / p.conns as f64, i));
                i += 1;
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        let end: f64 = self.stages.iter().map(|s| s.1).sum();
        order
            .into_iter()
            .enumerate()
            .map(|(rank, (_, conn))| {
                let need = (rank + 1) as f64;
                let (mut open, mut close) = (None, None);
                let (mut t, mut level) = (0.0, 0.0);
                for &(to, secs) in &self.stages {
                    let target = to * n as f64;
                    if open.is_none() && target >= need - 1e-9 && target > level {
                        open = Some(t + secs * ((need - level) / (target - level)).max(0.0));
                    } else if open.is_some()
                        && close.is_none()
                        && target < need - 1e-9
                        && target < level
                    {
                        close =
                            Some(t + secs * ((level - need) / (level - target)).clamp(0.0, 1.0));
                    }
                    t += secs;
                    level = target;
                }
                (conn, open.unwrap_or(end), close.unwrap_or(end))
            })
            .collect()
    }

    /// Generator process `w` of `workers`'s share: each population split evenly, the first
    /// processes one more.
    pub fn share(&self, w: usize, workers: usize) -> Script {
        Script {
            stages: self.stages.clone(),
            populations: self
                .populations
                .iter()
                .map(|p| Population {
                    conns: p.conns / workers + usize::from(w < p.conns % workers),
                    ..p.clone()
                })
                .collect(),
        }
    }

    /// Connection `i` of this share: its population.
    pub fn population_of(&self, mut i: usize) -> Option<usize> {
        for (k, p) in self.populations.iter().enumerate() {
            if i < p.conns {
                return Some(k);
            }
            i -= p.conns;
        }
        None
    }
}
