//! The master's side: accepts slaves on the HA port and streams the log to each.
//!
//! One task per slave connection. It reads the slave's reports (its log end) and writes
//! frames of the log from where the first report asked; the two halves share the socket
//! and end together. A report counts as an acknowledgement only up to what was sent on
//! this connection: a slave whose log is ahead of this master's (a tail the master lost)
//! must not satisfy a SYNC_MASTER wait, and is refused.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_std::io::ReadExt;
use async_std::net::TcpListener;
use event_listener::Event;
use tern_shell::runtime;
use tern_shell::tls::{Refused, ServerTls, SharedStream, Stream};

use super::error::timed;
use super::{FRAME_CONFIRM, FRAME_HEADER, HaError, REPORT};
use crate::{BrokerCtx, Listener, StartError};

/// Binds the HA port. `haListenPort` must be bound as given. Without it: the remoting
/// port plus one, as RocketMQ does; a free port when the remoting port was picked freely
/// (port 0); and when the port above is taken, a free one with a warning rather than no
/// broker at all (slaves learn the bound port from the name servers either way).
pub async fn bind(
    ctx_config: &crate::config::BrokerConfig,
    main_port: u16,
) -> Result<TcpListener, StartError> {
    let at = |port| SocketAddr::new(ctx_config.listen_ip, port);
    let bind = |listener, addr| async move {
        TcpListener::bind(addr)
            .await
            .map_err(|error| StartError::Bind {
                listener,
                addr,
                error,
            })
    };
    if let Some(port) = ctx_config.ha_listen_port {
        return bind(Listener::HaListenPort, at(port)).await;
    }
    if ctx_config.listen_port != 0 {
        match TcpListener::bind(at(main_port.wrapping_add(1))).await {
            Ok(l) => return Ok(l),
            Err(e) => log::warn!(
                "HA port {} unavailable ({e}); slaves will be told a free one",
                at(main_port.wrapping_add(1))
            ),
        }
    }
    bind(Listener::HaFree, at(0)).await
}

/// Accepts slaves until shutdown, at most `haMaxSlaveConnections` at once; with `tls`
/// (the broker's `tls.server.*`) each goes through the TLS mode first, as on the
/// remoting port, within its connection slot.
pub async fn run(ctx: Arc<BrokerCtx>, listener: TcpListener, tls: Option<ServerTls>) {
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = runtime::race(async { Some(listener.accept().await) }, async {
            ctx.shutdown.wait().await;
            None
        })
        .await;
        match accepted {
            None => break,
            Some(Ok((stream, peer))) => {
                let limit = ctx.config.ha_max_slave_connections;
                if open.fetch_add(1, Ordering::AcqRel) >= limit {
                    open.fetch_sub(1, Ordering::AcqRel);
                    log::warn!(
                        "HA connection from {peer} closed: {limit} already open (haMaxSlaveConnections)"
                    );
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                log::info!("slave {peer} connected for replication");
                let (ctx, open, tls) = (ctx.clone(), open.clone(), tls.clone());
                runtime::spawn(async move {
                    let stream = match &tls {
                        None => Ok(Stream::Plain(stream)),
                        // Refusals are logged by `accept`; a plaintext slave under
                        // `enforcing` is closed (the HA protocol has no error frame).
                        Some(tls) => tls.accept(stream).await.map_err(|r| match r {
                            Refused::Plaintext(tcp) => {
                                let _ = tcp.shutdown(std::net::Shutdown::Both);
                            }
                            Refused::Failed => {}
                        }),
                    };
                    if let Ok(stream) = stream {
                        let stream = stream.shared();
                        match serve(&ctx, &stream).await {
                            Ok(()) => log::info!("slave {peer} disconnected"),
                            Err(e) => log::warn!("replication to slave {peer} stopped: {e}"),
                        }
                        let _ = stream.tcp().shutdown(std::net::Shutdown::Both);
                    }
                    open.fetch_sub(1, Ordering::AcqRel);
                });
            }
            Some(Err(e)) => {
                log::warn!("accepting a slave: {e}");
                runtime::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Counts a slave as connected for as long as it lives.
struct Joined<'a>(&'a super::HaService);

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        self.0.slave_left();
    }
}

/// What the two halves of one connection share.
struct Link {
    /// The slave's latest report; `u64::MAX` until the first.
    reported: AtomicU64,
    /// Signalled on each report.
    report_arrived: Event,
    /// Everything below this was sent on this connection.
    sent_to: AtomicU64,
    /// The master's log end when the last frame was read (RocketMQ's
    /// `lastMasterMaxOffset`): a slave that acknowledged it was caught up then.
    end_at_send: AtomicU64,
    /// Controller mode: the slave's controller id and the epoch it follows.
    member: Option<(i64, i32)>,
}

/// Counts a controller-mode slave as connected for as long as it lives.
struct Member<'a>(&'a super::HaService, i64);

impl Drop for Member<'_> {
    fn drop(&mut self) {
        self.0.member_left(self.1);
    }
}

async fn serve(ctx: &BrokerCtx, stream: &SharedStream) -> Result<(), HaError> {
    let first = super::auth::admit(stream, ctx.acl.as_deref())
        .await
        .map_err(|e| e.within("refused before streaming"))?;
    // A slave that skipped the sign-in already sent its first eight bytes.
    let first = match first {
        Some(b) => b,
        None => {
            let silence = ctx.config.ha_housekeeping_interval;
            let mut b = [0u8; REPORT];
            let mut s = stream;
            timed(
                silence,
                s.read_exact(&mut b),
                || format!("the slave sent no offset in {silence:?}"),
                "reading the first report",
            )
            .await?;
            b
        }
    };
    let (member, first) = if first == crate::controller::handshake::HELLO {
        (
            Some(crate::controller::handshake::answer(ctx, stream).await?),
            u64::MAX,
        )
    } else {
        (None, first_offset(first)?)
    };
    let link = Link {
        reported: AtomicU64::new(first),
        report_arrived: Event::new(),
        sent_to: AtomicU64::new(0),
        end_at_send: AtomicU64::new(u64::MAX),
        member,
    };
    let reading = read_reports(ctx, stream, &link);
    let writing = write_log(ctx, stream, &link);
    runtime::race(runtime::race(reading, writing), async {
        ctx.shutdown.wait().await;
        Ok(())
    })
    .await
}

/// Reads the slave's reports; each acknowledges what it covers of what was sent.
async fn read_reports(
    ctx: &BrokerCtx,
    mut stream: &SharedStream,
    link: &Link,
) -> Result<(), HaError> {
    let silence = ctx.config.ha_housekeeping_interval;
    let mut buf = [0u8; REPORT];
    loop {
        let read = timed(
            silence,
            stream.read_exact(&mut buf),
            || format!("no report from the slave in {silence:?}"),
            "reading a report",
        );
        match read.await {
            // The slave closed the connection: it ended, not failed.
            Err(HaError::Io(std::io::ErrorKind::UnexpectedEof, _)) => return Ok(()),
            r => r?,
        }
        let offset = first_offset(buf)?;
        let first = link.reported.swap(offset, Ordering::AcqRel) == u64::MAX;
        link.report_arrived.notify(usize::MAX);
        if !first {
            let sent = link.sent_to.load(Ordering::Acquire);
            ctx.ha.ack(offset.min(sent));
            if let Some((id, _)) = link.member {
                let caught_up = offset >= link.end_at_send.load(Ordering::Acquire);
                ctx.ha.member_acked(id, offset.min(sent), caught_up);
                ctx.update_confirm();
            }
        }
    }
}

/// A report's offset.
fn first_offset(report: [u8; REPORT]) -> Result<u64, HaError> {
    let offset = i64::from_be_bytes(report);
    u64::try_from(offset)
        .map_err(|_| HaError::Protocol(format!("negative offset {offset} reported")))
}

/// Where streaming starts for a slave's first report (RocketMQ's rule: a slave with an
/// empty log gets the start of the master's newest segment).
fn start_for(ctx: &BrokerCtx, reported: u64) -> Result<u64, HaError> {
    let (min, end, seg) = ctx.store.log_span();
    if reported == 0 {
        return Ok(end - end % seg);
    }
    if reported > end {
        return Err(HaError::Protocol(format!(
            "the slave's log ends at {reported}, past this master's end {end}: it holds records \
             this master does not (a tail lost in a crash?); remove the slave's store to resync it"
        )));
    }
    if reported < min {
        return Err(HaError::Protocol(format!(
            "the slave's log ends at {reported}, before this master's oldest record at {min} \
             (deleted by retention); remove the slave's store to resync it"
        )));
    }
    Ok(reported)
}

/// Streams the log from the slave's first report on; an empty frame when idle.
async fn write_log(ctx: &BrokerCtx, stream: &SharedStream, link: &Link) -> Result<(), HaError> {
    let silence = ctx.config.ha_housekeeping_interval;
    let mut reported = link.reported.load(Ordering::Acquire);
    while reported == u64::MAX {
        let listener = link.report_arrived.listen();
        reported = link.reported.load(Ordering::Acquire);
        if reported == u64::MAX && runtime::timeout(silence, listener).await.is_err() {
            return Err(HaError::Timeout(format!(
                "the slave sent no offset in {silence:?}"
            )));
        }
        reported = link.reported.load(Ordering::Acquire);
    }
    let mut next = start_for(ctx, reported)?;
    // Counted from here: a slave about to be refused must not hold SYNC_MASTER sends
    // waiting for its acknowledgement.
    ctx.ha.slave_joined();
    let _joined = Joined(&ctx.ha);
    link.sent_to.store(next, Ordering::Release);
    // The slave already holds what it reported.
    ctx.ha.ack(reported.min(next));
    let _member = link.member.map(|(id, _)| {
        ctx.ha.member_joined(id);
        ctx.ha
            .member_acked(id, reported.min(next), reported >= ctx.store.log_end());
        ctx.update_confirm();
        Member(&ctx.ha, id)
    });
    log::info!("streaming the log to the slave from offset {next}");
    let batch = ctx.config.ha_transfer_batch_size;
    let heartbeat = ctx.config.ha_heartbeat_interval;
    let mut frame = Vec::with_capacity(FRAME_HEADER + FRAME_CONFIRM + batch);
    // Controller mode: the confirm offset the slave was last sent.
    let mut confirm_sent = 0;
    loop {
        if let Some((_, epoch)) = link.member {
            // Deposed, or a new term began: the slave must hear the new epochs first.
            let term = ctx.controller.as_ref().map(|cm| cm.replica.last_epoch());
            if ctx.role.is_slave() || term != Some(epoch) {
                return Err(HaError::Local(format!(
                    "no longer the master of epoch {epoch}"
                )));
            }
        }
        let appended = ctx.store.listen_appended();
        let end_now = ctx.store.log_end();
        let bytes = ctx
            .store
            .log_bytes_off_executor(next, batch)
            .await
            .map_err(|e| HaError::Local(e.to_string()))?;
        // Read after the bytes: it never covers more than the master held then.
        let confirm = ctx.store.confirm_offset();
        let confirm_moved = link.member.is_some() && confirm != confirm_sent;
        if bytes.is_empty() && !confirm_moved {
            // Idle: wait for an append (or a confirm offset to pass on), or say we are
            // alive.
            if runtime::timeout(heartbeat, appended).await.is_ok() {
                continue;
            }
        }
        frame.clear();
        frame.extend_from_slice(&(next as i64).to_be_bytes());
        frame.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
        if link.member.is_some() {
            frame.extend_from_slice(&(confirm as i64).to_be_bytes());
            confirm_sent = confirm;
        }
        frame.extend_from_slice(&bytes);
        timed(
            silence,
            super::auth::send(stream, &frame),
            || format!("the slave took no data for {silence:?}"),
            "writing to the slave",
        )
        .await?;
        next += bytes.len() as u64;
        link.sent_to.store(next, Ordering::Release);
        link.end_at_send.store(end_now, Ordering::Release);
    }
}
