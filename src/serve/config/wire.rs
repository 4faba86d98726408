//! [`ServerConfig`] as JSON, for the configuration a child server reads. The library's own
//! types carry no serde; this mirror lists every field, destructured without `..` both ways, so
//! a field added to `ServerConfig` fails to compile here until it crosses too. The channels
//! app's verifier is not data: it is rebuilt from the secret (`ServeConfig::token_auth`).

use embedded_server::channels::ChannelsSettings;
use embedded_server::limits::{Cidr, LimitSettings, Rate};
use embedded_server::{App, BackpressureClose, DeflateSettings, ServerConfig, SimulatedWork};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::time::Duration;

#[derive(Serialize, Deserialize)]
struct Wire {
    app: String,
    handler: String,
    max_connections: usize,
    max_frame_bytes: usize,
    max_message_bytes: usize,
    fragment_bytes: usize,
    send_queue_bytes: usize,
    backpressure_close: u16,
    notsent_lowat_bytes: usize,
    heartbeat_interval: Duration,
    heartbeat_timeout: Duration,
    handshake_timeout: Duration,
    max_header_bytes: usize,
    allowed_origins: Vec<String>,
    subprotocols: Vec<String>,
    offload_pool_size: usize,
    offload_queue_size: usize,
    shutdown_grace: Duration,
    deflate: WireDeflate,
    inflate_budget: Option<usize>,
    memory_budget: Option<usize>,
    conn_memory_share: Option<usize>,
    message_timeout: Duration,
    send_drain_timeout: Duration,
    inflate_ratio_limit: u32,
    inflate_rate: u64,
    limits: WireLimits,
    max_subscriptions: usize,
    max_subscription_bytes: usize,
}

#[derive(Serialize, Deserialize)]
struct WireDeflate {
    enabled: bool,
    window_bits: u8,
    mem_level: u8,
    level: u8,
    threshold: usize,
    context_takeover: bool,
}

#[derive(Serialize, Deserialize)]
struct WireLimits {
    max_connections_per_ip: usize,
    /// (per second, burst)
    connection_rate_per_ip: Option<(u32, u32)>,
    connection_rate: Option<(u32, u32)>,
    message_rate: Option<(u32, u32)>,
    message_rate_close: u16,
    exempt: Vec<String>,
    trusted_proxies: Vec<String>,
    max_pending_handshakes: usize,
    fd_reserve: Option<usize>,
}

fn app_name(a: App) -> String {
    format!("{a:?}").to_lowercase()
}

pub fn serialize<S: Serializer>(c: &ServerConfig, s: S) -> Result<S::Ok, S::Error> {
    let ServerConfig {
        app,
        handler,
        max_connections,
        max_frame_bytes,
        max_message_bytes,
        fragment_bytes,
        send_queue_bytes,
        backpressure_close,
        notsent_lowat_bytes,
        heartbeat_interval,
        heartbeat_timeout,
        handshake_timeout,
        max_header_bytes,
        allowed_origins,
        subprotocols,
        offload_pool_size,
        offload_queue_size,
        shutdown_grace,
        deflate,
        inflate_budget,
        memory_budget,
        conn_memory_share,
        message_timeout,
        send_drain_timeout,
        inflate_ratio_limit,
        inflate_rate,
        limits,
        channels,
    } = c;
    let LimitSettings {
        max_connections_per_ip,
        connection_rate_per_ip,
        connection_rate,
        message_rate,
        message_rate_close,
        exempt,
        trusted_proxies,
        max_pending_handshakes,
        fd_reserve,
    } = limits;
    let DeflateSettings {
        enabled,
        window_bits,
        mem_level,
        level,
        threshold,
        context_takeover,
    } = *deflate;
    // The verifier is rebuilt from the secret, the counters start afresh in each process.
    let ChannelsSettings {
        auth: _,
        max_subscriptions,
        max_subscription_bytes,
        metrics: _,
    } = channels;
    let rate = |r: &Option<Rate>| r.map(|r| (r.per_sec, r.burst));
    let cidrs = |l: &[Cidr]| l.iter().map(|c| c.to_string()).collect();
    Wire {
        app: app_name(*app),
        handler: handler.to_string(),
        max_connections: *max_connections,
        max_frame_bytes: *max_frame_bytes,
        max_message_bytes: *max_message_bytes,
        fragment_bytes: *fragment_bytes,
        send_queue_bytes: *send_queue_bytes,
        backpressure_close: backpressure_close.code(),
        notsent_lowat_bytes: *notsent_lowat_bytes,
        heartbeat_interval: *heartbeat_interval,
        heartbeat_timeout: *heartbeat_timeout,
        handshake_timeout: *handshake_timeout,
        max_header_bytes: *max_header_bytes,
        allowed_origins: allowed_origins.clone(),
        subprotocols: subprotocols.clone(),
        offload_pool_size: *offload_pool_size,
        offload_queue_size: *offload_queue_size,
        shutdown_grace: *shutdown_grace,
        deflate: WireDeflate {
            enabled,
            window_bits,
            mem_level,
            level,
            threshold,
            context_takeover,
        },
        inflate_budget: *inflate_budget,
        memory_budget: *memory_budget,
        conn_memory_share: *conn_memory_share,
        message_timeout: *message_timeout,
        send_drain_timeout: *send_drain_timeout,
        inflate_ratio_limit: *inflate_ratio_limit,
        inflate_rate: *inflate_rate,
        limits: WireLimits {
            max_connections_per_ip: *max_connections_per_ip,
            connection_rate_per_ip: rate(connection_rate_per_ip),
            connection_rate: rate(connection_rate),
            message_rate: rate(message_rate),
            message_rate_close: *message_rate_close,
            exempt: cidrs(exempt),
            trusted_proxies: cidrs(trusted_proxies),
            max_pending_handshakes: *max_pending_handshakes,
            fd_reserve: *fd_reserve,
        },
        max_subscriptions: *max_subscriptions,
        max_subscription_bytes: *max_subscription_bytes,
    }
    .serialize(s)
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ServerConfig, D::Error> {
    use serde::de::Error;
    let w = Wire::deserialize(d)?;
    let app = [App::Echo, App::Broadcast, App::Channels]
        .into_iter()
        .find(|a| app_name(*a) == w.app)
        .ok_or_else(|| D::Error::custom(format!("unknown app '{}'", w.app)))?;
    let handler = SimulatedWork::parse(&w.handler).map_err(D::Error::custom)?;
    let rate = |r: Option<(u32, u32)>| r.and_then(|(p, b)| Rate::new(p, b));
    let cidrs = |v: &[String]| -> Result<Vec<Cidr>, D::Error> {
        v.iter()
            .map(|s| Cidr::parse(s).map_err(D::Error::custom))
            .collect()
    };
    let l = w.limits;
    Ok(ServerConfig {
        app,
        handler,
        max_connections: w.max_connections,
        max_frame_bytes: w.max_frame_bytes,
        max_message_bytes: w.max_message_bytes,
        fragment_bytes: w.fragment_bytes,
        send_queue_bytes: w.send_queue_bytes,
        backpressure_close: match w.backpressure_close {
            1013 => BackpressureClose::TryAgain,
            _ => BackpressureClose::Policy,
        },
        notsent_lowat_bytes: w.notsent_lowat_bytes,
        heartbeat_interval: w.heartbeat_interval,
        heartbeat_timeout: w.heartbeat_timeout,
        handshake_timeout: w.handshake_timeout,
        max_header_bytes: w.max_header_bytes,
        allowed_origins: w.allowed_origins,
        subprotocols: w.subprotocols,
        offload_pool_size: w.offload_pool_size,
        offload_queue_size: w.offload_queue_size,
        shutdown_grace: w.shutdown_grace,
        deflate: DeflateSettings {
            enabled: w.deflate.enabled,
            window_bits: w.deflate.window_bits,
            mem_level: w.deflate.mem_level,
            level: w.deflate.level,
            threshold: w.deflate.threshold,
            context_takeover: w.deflate.context_takeover,
        },
        inflate_budget: w.inflate_budget,
        memory_budget: w.memory_budget,
        conn_memory_share: w.conn_memory_share,
        message_timeout: w.message_timeout,
        send_drain_timeout: w.send_drain_timeout,
        inflate_ratio_limit: w.inflate_ratio_limit,
        inflate_rate: w.inflate_rate,
        limits: LimitSettings {
            max_connections_per_ip: l.max_connections_per_ip,
            connection_rate_per_ip: rate(l.connection_rate_per_ip),
            connection_rate: rate(l.connection_rate),
            message_rate: rate(l.message_rate),
            message_rate_close: l.message_rate_close,
            exempt: cidrs(&l.exempt)?,
            trusted_proxies: cidrs(&l.trusted_proxies)?,
            max_pending_handshakes: l.max_pending_handshakes,
            fd_reserve: l.fd_reserve,
        },
        channels: ChannelsSettings {
            auth: None,
            max_subscriptions: w.max_subscriptions,
            max_subscription_bytes: w.max_subscription_bytes,
            metrics: Default::default(),
        },
    })
}
