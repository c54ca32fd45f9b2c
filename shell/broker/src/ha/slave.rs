//! The slave's side: follows the master's HA address, stores what it streams, reports
//! progress.
//!
//! Two halves share the connection: the reader stores frames (whole records only; an
//! incomplete one waits in `pending` for the next frame) and the reporter sends the log
//! end after each store and every heartbeat interval. Any error drops the connection;
//! the slave dials again after a pause, reporting its end, so the master resumes from
//! there and nothing pending is lost for good.

use std::sync::Arc;
use std::time::Duration;

use async_std::io::ReadExt;
use async_std::net::TcpStream;
use event_listener::Event;
use tern_shell::runtime;
use tern_shell::tls::{ClientTls, SharedStream, Stream};

use super::error::timed;
use super::{FRAME_CONFIRM, FRAME_HEADER, HaError, MAX_FRAME_BODY};
use crate::BrokerCtx;
use crate::store::PutError;

/// Pause before dialing the master again.
const RETRY: Duration = Duration::from_secs(1);
/// How long a dial may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Follows the master until shutdown; with `tls` (`tls.enable`) the connection is TLS.
pub async fn run(ctx: Arc<BrokerCtx>, tls: Option<ClientTls>) {
    while !ctx.shutdown.is_triggered() {
        let changed = ctx.ha.master_changed.listen();
        let Some(ha) = ctx.ha.master().ha_addr else {
            // No master known yet: the next registration answer may name one.
            runtime::race(
                async {
                    let _ = runtime::timeout(Duration::from_secs(5), changed).await;
                },
                ctx.shutdown.wait(),
            )
            .await;
            continue;
        };
        match follow(&ctx, &ha, tls.as_ref()).await {
            Ok(()) => {}
            Err(e) => log::warn!("replication from master {ha}: {e}"),
        }
        runtime::race(
            async {
                let _ = runtime::timeout(RETRY, changed).await;
            },
            ctx.shutdown.wait(),
        )
        .await;
    }
}

/// One connection to the master; `Ok` at shutdown.
async fn follow(ctx: &BrokerCtx, ha: &str, tls: Option<&ClientTls>) -> Result<(), HaError> {
    let stream = runtime::timeout(CONNECT_TIMEOUT, async {
        let tcp = TcpStream::connect(ha)
            .await
            .map_err(|e| HaError::io("connecting", &e))?;
        let _ = tcp.set_nodelay(true);
        match tls {
            None => Ok(Stream::Plain(tcp)),
            Some(tls) => tls
                .connect(tcp, ha)
                .await
                .map_err(|e| HaError::Protocol(e.to_string())),
        }
    })
    .await
    .map_err(|_| HaError::Timeout(format!("no connection within {CONNECT_TIMEOUT:?}")))??
    .shared();
    if let Some(creds) = &ctx.config.inner_credentials {
        super::auth::sign_in(&stream, creds)
            .await
            .map_err(|e| e.within(format_args!("signing in as {}", creds.access_key)))?;
    }
    ctx.ha.follower_started();
    let _following = Following(&ctx.ha);
    // Controller mode: a new master or term ends this connection.
    let changed = ctx.ha.listen_master_changed();
    crate::controller::handshake::open(ctx, &stream).await?;
    log::info!(
        "replicating from master {ha}, this log ends at {}",
        ctx.store.log_end()
    );
    let stored = Event::new();
    let r = runtime::race(
        runtime::race(
            receive(ctx, &stream, &stored),
            report(ctx, &stream, &stored),
        ),
        async {
            runtime::race(ctx.shutdown.wait(), changed).await;
            Ok(())
        },
    )
    .await;
    let _ = stream.tcp().shutdown(std::net::Shutdown::Both);
    r
}

/// Counts a follower connection as open for as long as it lives.
struct Following<'a>(&'a super::HaService);

impl Drop for Following<'_> {
    fn drop(&mut self) {
        self.0.follower_ended();
    }
}

/// Sends the log end at connect, after each store that moved it, and every heartbeat.
async fn report(ctx: &BrokerCtx, stream: &SharedStream, stored: &Event) -> Result<(), HaError> {
    let heartbeat = ctx.config.ha_heartbeat_interval;
    loop {
        let listener = stored.listen();
        let end = ctx.store.log_end();
        super::auth::send(stream, &(end as i64).to_be_bytes())
            .await
            .map_err(|e| HaError::io(format_args!("reporting offset {end}"), &e))?;
        ctx.ha.set_reported(end);
        let _ = runtime::timeout(heartbeat, listener).await;
    }
}

/// Reads frames and stores their records.
async fn receive(
    ctx: &BrokerCtx,
    mut stream: &SharedStream,
    stored: &Event,
) -> Result<(), HaError> {
    let silence = ctx.config.ha_housekeeping_interval;
    let mut pending: Vec<u8> = Vec::new();
    let mut pending_at = ctx.store.log_end();
    let mut may_start_anywhere = ctx.store.log_is_empty();
    let mut header = [0u8; FRAME_HEADER + FRAME_CONFIRM];
    // Controller mode: the handshake ran, and headers carry the master's confirm offset.
    let header_len = if ctx.controller.is_some() {
        FRAME_HEADER + FRAME_CONFIRM
    } else {
        FRAME_HEADER
    };
    loop {
        read(&mut stream, &mut header[..header_len], silence).await?;
        let (offset, len) = parse_header(&header)?;
        if header_len > FRAME_HEADER {
            let confirm = parse_confirm(&header)?;
            // Before the bytes it may cover are stored: they are dispatched under it. Not
            // once this broker leads: a frame read as it was promoted must not bound the
            // new master's log (its own set decides that).
            if !ctx.store.leads() {
                ctx.store.set_confirm(confirm);
            }
        }
        let expected = pending_at + pending.len() as u64;
        if offset != expected {
            if !(may_start_anywhere && pending.is_empty()) {
                return Err(HaError::Protocol(format!(
                    "the master sent offset {offset}, this slave expected {expected}"
                )));
            }
            pending_at = offset;
        }
        may_start_anywhere = false;
        if len > 0 {
            let start = pending.len();
            // An incomplete record never needs more than the largest message plus its
            // header fields; more means the peer is not sending a log.
            let limit = ctx.config.max_message_size + (1 << 20);
            if start + len > limit {
                return Err(HaError::Protocol(format!(
                    "the master sent {} bytes without completing a record (limit {limit})",
                    start + len
                )));
            }
            pending.resize(start + len, 0);
            read(&mut stream, &mut pending[start..], silence).await?;
            let to = store(ctx, pending_at, &pending).await?;
            pending.drain(..(to.saturating_sub(pending_at) as usize).min(pending.len()));
            pending_at = to.max(pending_at);
            stored.notify(1);
        }
        ctx.ha.set_master_end(offset + len as u64);
    }
}

async fn read(
    stream: &mut &SharedStream,
    buf: &mut [u8],
    silence: Duration,
) -> Result<(), HaError> {
    timed(
        silence,
        stream.read_exact(buf),
        || format!("nothing from the master in {silence:?}"),
        "reading from the master",
    )
    .await
}

/// The confirm offset a controller-mode master put after the classic header.
fn parse_confirm(h: &[u8; FRAME_HEADER + FRAME_CONFIRM]) -> Result<u64, HaError> {
    let mut confirm = [0u8; FRAME_CONFIRM];
    confirm.copy_from_slice(&h[FRAME_HEADER..]);
    let confirm = i64::from_be_bytes(confirm);
    u64::try_from(confirm)
        .map_err(|_| HaError::Protocol(format!("negative confirm offset {confirm}")))
}

fn parse_header(h: &[u8; FRAME_HEADER + FRAME_CONFIRM]) -> Result<(u64, usize), HaError> {
    let mut offset = [0u8; 8];
    offset.copy_from_slice(&h[..8]);
    let offset = i64::from_be_bytes(offset);
    let len = i32::from_be_bytes([h[8], h[9], h[10], h[11]]);
    let offset = u64::try_from(offset)
        .map_err(|_| HaError::Protocol(format!("negative frame offset {offset}")))?;
    match usize::try_from(len) {
        Ok(n) if n <= MAX_FRAME_BODY => Ok((offset, n)),
        _ => Err(HaError::Protocol(format!(
            "frame length {len} is outside 0..={MAX_FRAME_BODY}"
        ))),
    }
}

/// Stores whole records from `bytes` (at log offset `at`); returns the offset consumed to.
async fn store(ctx: &BrokerCtx, at: u64, bytes: &[u8]) -> Result<u64, HaError> {
    match ctx.store.append_replicated(at, bytes) {
        Ok(to) => Ok(to),
        Err(e @ (PutError::DiskFull | PutError::OverBudget)) => {
            // The master keeps the data; try again once space is freed. The store's own
            // text says which limit refused; the caller's line names the replication.
            runtime::sleep(RETRY).await;
            Err(HaError::Local(format!("paused: {e}")))
        }
        Err(PutError::ShuttingDown) => {
            ctx.shutdown.wait().await;
            Ok(at)
        }
        Err(PutError::Illegal(why) | PutError::Refused(_, why)) => Err(HaError::Protocol(format!(
            "the master's log at {at} is refused: {why}"
        ))),
        Err(e @ (PutError::Store(_) | PutError::Failed(_))) => Err(HaError::Local(format!(
            "storing the master's log at {at}: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_headers_are_checked() {
        let mut h = [0u8; FRAME_HEADER + FRAME_CONFIRM];
        h[FRAME_HEADER..].copy_from_slice(&4096i64.to_be_bytes());
        assert_eq!(parse_confirm(&h), Ok(4096));
        h[FRAME_HEADER..].copy_from_slice(&(-1i64).to_be_bytes());
        assert!(
            parse_confirm(&h)
                .unwrap_err()
                .to_string()
                .contains("negative")
        );
        h[..8].copy_from_slice(&77i64.to_be_bytes());
        h[8..FRAME_HEADER].copy_from_slice(&5i32.to_be_bytes());
        assert_eq!(parse_header(&h), Ok((77, 5)));
        h[8..FRAME_HEADER].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(
            parse_header(&h)
                .unwrap_err()
                .to_string()
                .contains("length -1")
        );
        h[8..FRAME_HEADER].copy_from_slice(&(MAX_FRAME_BODY as i32 + 1).to_be_bytes());
        assert!(parse_header(&h).is_err());
        h[..8].copy_from_slice(&(-3i64).to_be_bytes());
        h[8..FRAME_HEADER].copy_from_slice(&0i32.to_be_bytes());
        assert!(
            parse_header(&h)
                .unwrap_err()
                .to_string()
                .contains("negative")
        );
    }
}
