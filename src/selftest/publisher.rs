//! The broadcast scenario's publisher: the orchestrator's own connection, publishing one
//! timestamped message per round (subscribers time each against the same clock).

use super::client::{self, Target};
use super::{target_url, worker, RunPlan};
use anyhow::Result;
use std::time::Duration;

/// The broadcast publisher: the orchestrator's own connection, one message per round.
pub(super) async fn start(o: &RunPlan, target: &Target) -> Result<tokio::task::JoinHandle<()>> {
    let session = match o.tls.as_ref().filter(|_| target.tls) {
        Some(t) => Some(
            super::tls::Client::new(t)
                .map_err(anyhow::Error::msg)?
                .session(),
        ),
        None => None,
    };
    // Bounded as the generators' connections are: a server that accepts TCP and then stalls
    // (a TLS handshake never answered) must not hold the run.
    let mut c = tokio::time::timeout(
        Duration::from_secs(20),
        client::connect(target, None, false, session.as_ref()),
    )
    .await
    .map_err(|_| {
        anyhow::anyhow!(
            "the publisher's handshake with {} took over 20 s",
            target_url(target)
        )
    })?
    .map_err(|e| {
        anyhow::anyhow!(
            "the publisher cannot connect to {}: {e}",
            target_url(target)
        )
    })?;
    let rounds = o.rounds;
    let gap = Duration::from_secs_f64((o.secs / (rounds as f64 + 1.0)).max(0.05));
    let size = o.size;
    Ok(tokio::spawn(async move {
        // Drain what the server sends back to the publisher itself.
        let mut reader = c.reader;
        let drain = tokio::spawn(async move {
            while let Ok(x) = reader.next().await {
                if matches!(x, client::Incoming::Closed(_)) {
                    break;
                }
            }
        });
        for r in 0..rounds {
            tokio::time::sleep(gap).await;
            let p = worker::broadcast_payload(r, size);
            if c.writer
                .send(embedded_server::frame::OpCode::Binary, &p)
                .await
                .is_err()
            {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let _ = c.writer.close().await;
        drain.abort();
    }))
}
