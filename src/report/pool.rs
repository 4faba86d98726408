//! `pool`'s advice for people: what was measured, the three settings with the formula behind
//! each, the sweep with its knee, and the notes.

use crate::pool::Report;

pub fn pool_table(o: &Report) -> String {
    let a = &o.advice;
    let mut s = String::new();
    if let Some(m) = &o.measured {
        s.push_str(&format!(
            "measured over {} handled messages: wall {:.2} ms, on CPU {:.2} ms, {}blocking {:.2} ms, ratio {:.2}\n",
            m.jobs,
            m.wall_ms,
            m.cpu_ms,
            m.runqueue_ms
                .map(|q| format!("waiting for a core {q:.2} ms, "))
                .unwrap_or_default(),
            m.blocking_ms,
            m.ratio
        ));
    }
    let mut t = crate::output::new_table();
    t.set_header(vec!["setting", "value", "why"]);
    t.add_row(vec![
        "offload pool size".to_string(),
        a.pool_size.to_string(),
        format!(
            "{} + ({:.2} / {:.2}) x {} (PoolSize = CPUCount + blocking/cpu x CPUCount)",
            a.cores, a.blocking_ms, a.cpu_ms, a.cores
        ),
    ]);
    t.add_row(vec![
        "io workers".to_string(),
        a.io_workers.to_string(),
        "one per core: the event loop never blocks (the guide's 2-4 is for workers that may)"
            .into(),
    ]);
    t.add_row(vec![
        "offload queue size".to_string(),
        a.queue_size.to_string(),
        "bounded: a full queue stops reading (TCP backpressure)".into(),
    ]);
    s.push_str(&format!("{t}\n"));
    if !o.sweep.is_empty() {
        let mut t = crate::output::new_table();
        t.set_header(vec![
            "pool size",
            "msgs/s",
            "p99 ms",
            "queue avg",
            "queue max",
            "",
        ]);
        for p in &o.sweep {
            let mut mark = Vec::new();
            if Some(p.size) == o.knee {
                mark.push("knee");
            }
            if Some(p.size) == o.best {
                mark.push("best throughput");
            }
            t.add_row(vec![
                p.size.to_string(),
                format!("{:.0}", p.throughput),
                format!("{:.1}", p.p99_ms),
                format!("{:.1}", p.queue_avg),
                format!("{:.0}", p.queue_max),
                mark.join(", "),
            ]);
        }
        s.push_str(&format!("{t}\n"));
        s.push_str(&format!(
            "sweep knee: {} (smallest size within 5% of the best throughput, p99 no worse); formula: {}\n",
            o.knee.map(|k| k.to_string()).unwrap_or_else(|| "-".into()),
            a.pool_size
        ));
    }
    for n in &a.notes {
        s.push_str(&format!("- {n}\n"));
    }
    s
}
