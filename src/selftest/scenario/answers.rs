//! The vocabulary a scenario answers the rest of the self-test in: what the generator does on
//! each connection it holds, what kind of server it needs, which figures it produces and
//! whether `serve --self-test` runs it unasked. Plain data, so the worker, the probe, the
//! thresholds and the default list act on a scenario's answer without matching on its name.

/// What the load generator does on each connection a scenario holds open (the worker's
/// per-connection loops, named here so a scenario can pick one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnEachConn {
    /// Sends on the profile's schedule (a slot filled by the pacer) and times each echo.
    PacedEcho,
    /// Keeps `--inflight` messages in flight, each sent when the last one's echo arrives.
    SaturatedEcho,
    /// Holds it open and silent, answering the server's pings.
    Hold,
    /// Listens for the publisher's rounds until one gap after the window.
    Subscribe,
    /// Runs its population's steps from the script.
    ScriptSession,
    /// Holds it and reconnects with backoff whenever the server drops it.
    Reconnect,
    /// Nothing: its connections open and close inside the window (the whole run is there).
    Nothing,
}

/// The kind of server a scenario can be measured against (the probe refuses a mismatch before
/// anything runs, and says what to run instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeedsServer {
    /// Any WebSocket server: holds and handshakes.
    Any,
    /// One that sends each message back to its sender as it was sent.
    Echo,
    /// One that sends each message to every client.
    FanOut,
    /// Whatever the script's steps speak (its channel steps need a channels server).
    Scripted,
}

/// The figures a scenario produces beyond those every one has (errors, connections, connect
/// and TLS times, server CPU): what a threshold on it may name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Figures {
    /// Messages answered: latency, delivered and rate.
    pub messages: bool,
    /// Broadcast rounds: the time until the last subscriber has one.
    pub rounds: bool,
    /// TLS handshakes per server core.
    pub handshakes_per_core: bool,
    /// Connections opened per second.
    pub connect_rate: bool,
    /// A script's steps (`POPULATION.STEP` thresholds).
    pub steps: bool,
    /// A disruption's: back, all_back, refused, not_back, listen overflows, peak accept rate.
    pub disruption: bool,
}

impl Figures {
    /// Messages answered, and nothing of its own: the common case.
    pub const MESSAGES: Figures = Figures {
        messages: true,
        rounds: false,
        handshakes_per_core: false,
        connect_rate: false,
        steps: false,
        disruption: false,
    };
}

/// Whether `serve --self-test` runs a scenario when none is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByDefault {
    /// Only when asked for.
    No,
    /// Always.
    Yes,
    /// When the server negotiates permessage-deflate.
    WhenServerDeflates,
    /// When the server speaks TLS.
    WhenServerTls,
}
