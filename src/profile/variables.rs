//! The flat name -> value map catalog expressions are evaluated in: every profile key by its
//! dotted path, the estimates, and the process layout.

use super::{nofile_per_process, Profile};
use crate::value::Value;
use std::collections::BTreeMap;

impl Profile {
    /// Flat variables for catalog expressions: every profile key by its dotted path
    /// (`linux.somaxconn`, `server.deflate.window_bits`, ...) plus `estimate.*`.
    pub fn variables(&self) -> BTreeMap<String, Value> {
        // Straight from the typed fields: `linux.somaxconn: u64` -> `Value::Num` once.
        let mut vars = crate::value::flatten(self).expect("a profile has no map or float");
        let e = self.estimate();
        for (k, v) in [
            ("kernel_bytes_per_conn", e.kernel_bytes_per_conn),
            (
                "socket_buffer_bytes_per_conn",
                e.socket_buffer_bytes_per_conn,
            ),
            ("server_bytes_per_conn", e.server_bytes_per_conn),
            ("deflate_bytes_per_conn", e.deflate_bytes_per_conn),
            ("bytes_per_conn", e.bytes_per_conn()),
            ("base_bytes", e.base_bytes),
            ("total_bytes", e.total_bytes()),
            (
                "socket_buffer_bytes",
                e.connections * e.socket_buffer_bytes_per_conn,
            ),
        ] {
            vars.insert(format!("estimate.{k}"), Value::Num(v as i64));
        }
        // `nic.rss` in Windows' name: what an adapter's *RSSProfile check targets. Always
        // there, since a profile with the default `nic` block serializes none of it.
        vars.insert(
            "nic.rss.windows".into(),
            Value::Text(self.nic.rss.windows_name().into()),
        );
        let cpu = self.cpu_estimate();
        vars.insert(
            "estimate.messages_per_sec".into(),
            Value::Num(cpu.messages_per_sec as i64),
        );
        vars.insert(
            "estimate.cores_for_rate".into(),
            Value::Num(cpu.cores as i64),
        );
        let (processes, per_process) = nofile_per_process(
            vars.get("server.processes"),
            self.connections,
            self.linux.nofile,
        );
        vars.insert("estimate.processes".into(), Value::Num(processes as i64));
        vars.insert(
            "estimate.nofile_per_process".into(),
            Value::Num(per_process as i64),
        );
        vars
    }
}
