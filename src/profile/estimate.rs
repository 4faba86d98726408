//! What a profile's connections cost: the memory estimate (kernel socket, buffers, the server's
//! idle state, deflate contexts) and the CPU its message rate needs. Every figure is also a
//! catalog variable (`estimate.*`, [`super::Profile::variables`]).

use super::Profile;

/// How the memory for the target connections is estimated; every figure is also a variable
/// (`estimate.*`) that checks can use.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub kernel_bytes_per_conn: u64,
    pub socket_buffer_bytes_per_conn: u64,
    pub server_bytes_per_conn: u64,
    pub deflate_bytes_per_conn: u64,
    pub base_bytes: u64,
    pub connections: u64,
}

impl Estimate {
    pub fn bytes_per_conn(&self) -> u64 {
        self.kernel_bytes_per_conn
            + self.socket_buffer_bytes_per_conn
            + self.server_bytes_per_conn
            + self.deflate_bytes_per_conn
    }
    /// What a connection that exchanges no compressed message holds while idle: its kernel
    /// socket and the server's idle state (no buffers, no contexts). The self-test's idle,
    /// storm and plain echo connections are these; the deflate scenario is sized on its own.
    pub fn plain_bytes_per_conn(&self) -> u64 {
        self.kernel_bytes_per_conn + self.server_bytes_per_conn
    }
    pub fn total_bytes(&self) -> u64 {
        self.connections * self.bytes_per_conn() + self.base_bytes
    }
}

/// How busy the capacity estimate lets a core be: the guide's reference host ran its 1,000,000
/// msgs/s at 71 % of its cores, and the rest is the headroom for bursts, reconnects and the
/// kernel's own work on other cores' behalf.
pub const CORE_BUSY_PCT: u64 = 70;

/// What the profile's message rate costs in CPU (`estimate.messages_per_sec`,
/// `estimate.cores_for_rate`): connections x `selftest.rate_per_client` messages a second at
/// `server.cpu_ns_per_message` each, with each core [`CORE_BUSY_PCT`] busy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuEstimate {
    pub messages_per_sec: u64,
    pub ns_per_message: u64,
    pub cores: u64,
}

impl CpuEstimate {
    /// The cores `messages_per_sec` need at `ns_per_message` each, every core
    /// [`CORE_BUSY_PCT`] busy (at least one).
    pub fn cores_at(messages_per_sec: f64, ns_per_message: f64) -> u64 {
        let busy_ns = 1e9 * CORE_BUSY_PCT as f64 / 100.0;
        ((messages_per_sec * ns_per_message / busy_ns).ceil() as u64).max(1)
    }
}

impl Profile {
    /// The CPU the profile's message rate needs at the profile's cost per message.
    pub fn cpu_estimate(&self) -> CpuEstimate {
        let messages_per_sec = self.connections * self.selftest.rate_per_client;
        let ns_per_message = self.server.cpu_ns_per_message;
        CpuEstimate {
            messages_per_sec,
            ns_per_message,
            cores: CpuEstimate::cores_at(messages_per_sec as f64, ns_per_message as f64),
        }
    }

    /// The memory estimate for this profile's connections:
    /// kernel socket + in-flight socket buffers (one read and one write buffer's worth) + the
    /// server's idle state + deflate contexts (when context takeover keeps them alive).
    pub fn estimate(&self) -> Estimate {
        use embedded_server::memory;
        let d = &self.server.deflate;
        Estimate {
            kernel_bytes_per_conn: memory::KERNEL_BYTES_PER_SOCKET,
            socket_buffer_bytes_per_conn: self.server.read_buffer_bytes
                + self.server.write_buffer_bytes,
            server_bytes_per_conn: memory::SERVER_BYTES_PER_IDLE_CONN,
            deflate_bytes_per_conn: if d.enabled && d.context_takeover {
                memory::deflate_bytes_per_conn(d.window_bits, d.mem_level)
            } else {
                0
            },
            base_bytes: memory::SERVER_BASE_BYTES,
            connections: self.connections,
        }
    }
}
