//! The epoch exchange that opens a replication connection in controller mode.
//!
//! RocketMQ's AutoSwitch HA protocol trades epoch lists before streaming so that a
//! rejoining replica cuts its log where it parts from the master's
//! (docs/design/controller.md §7.2-7.3). Tern's HA port keeps its classic framing and
//! puts the same exchange in front of it (after the ACL sign-in, if any):
//!
//! 1. slave → master, 20 bytes: [`HELLO`], the slave's controller id (i64) and the master
//!    epoch it expects (i32), big-endian;
//! 2. master → slave: status (i32: 0 accepted, 1 refused: this broker is not the master
//!    of that epoch), the master's log end (i64), the entry count n (i32, at most
//!    [`MAX_ENTRIES`]), then n × (epoch i32, start offset i64);
//! 3. the slave finds the consistent point, cuts its log there, adopts the master's
//!    epochs, and sends its first classic report: streaming starts where it agrees, each
//!    frame's header followed by the master's confirm offset (i64).
//!
//! A master answers only for its own epoch, so a deposed master that has not learnt it
//! yet cannot gather a slave; and a master whose epoch changes closes its replication
//! connections, so every term a slave's stream crosses is in its epoch file.

use tern_shell::runtime;
use tern_shell::tls::SharedStream;

use super::epoch::{EpochEntry, MAX_ENTRIES, consistent_point};
use crate::BrokerCtx;
use crate::config::BrokerRole;
use crate::ha::HaError;
use crate::ha::auth::{read, write};

/// The slave's first bytes in controller mode (negative as a classic report).
pub const HELLO: [u8; 8] = *b"\xffTERNCM2";
/// Bytes of the slave's hello after [`HELLO`]: id and epoch.
const HELLO_REST: usize = 12;
/// Bytes of one epoch entry on the wire.
const ENTRY: usize = 12;

/// The master's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The slave may follow.
    pub accepted: bool,
    /// The master's log end.
    pub master_end: i64,
    /// The master's epochs.
    pub entries: Vec<EpochEntry>,
}

impl Answer {
    /// The answer's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let n = self.entries.len().min(MAX_ENTRIES);
        let skip = self.entries.len() - n;
        let mut b = Vec::with_capacity(16 + n * ENTRY);
        b.extend_from_slice(&(if self.accepted { 0i32 } else { 1 }).to_be_bytes());
        b.extend_from_slice(&self.master_end.to_be_bytes());
        b.extend_from_slice(&(n as i32).to_be_bytes());
        for e in &self.entries[skip..] {
            b.extend_from_slice(&e.epoch.to_be_bytes());
            b.extend_from_slice(&e.start_offset.to_be_bytes());
        }
        b
    }
}

/// The master's side, after the slave's [`HELLO`]: reads its id and expected epoch,
/// answers. `Ok((slave id, epoch))` when the slave may follow.
pub async fn answer(ctx: &BrokerCtx, stream: &SharedStream) -> Result<(i64, i32), HaError> {
    let mut rest = [0u8; HELLO_REST];
    read(stream, &mut rest, "slave's hello").await?;
    let id = i64::from_be_bytes(rest[..8].try_into().unwrap_or_default());
    let expected = i32::from_be_bytes(rest[8..].try_into().unwrap_or_default());
    let (accepted, entries) = match &ctx.controller {
        Some(cm) => {
            let entries = cm.replica.epochs();
            let mine = entries.last().map_or(0, |e| e.epoch);
            let master = ctx.role.get() != BrokerRole::Slave && !cm.replica.is_fenced();
            (master && mine == expected, entries)
        }
        None => (false, Vec::new()),
    };
    let a = Answer {
        accepted,
        master_end: ctx.store.log_end() as i64,
        entries,
    };
    write(stream, &a.encode(), "epoch answer").await?;
    if accepted {
        Ok((id, expected))
    } else {
        Err(HaError::Protocol(format!(
            "slave {id} expected the master of epoch {expected}; this broker is not it"
        )))
    }
}

/// Reads the master's answer.
async fn read_answer(stream: &SharedStream) -> Result<Answer, HaError> {
    let mut head = [0u8; 16];
    read(stream, &mut head, "master's epoch answer").await?;
    let status = i32::from_be_bytes(head[..4].try_into().unwrap_or_default());
    let master_end = i64::from_be_bytes(head[4..12].try_into().unwrap_or_default());
    let n = i32::from_be_bytes(head[12..].try_into().unwrap_or_default());
    let n = usize::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_ENTRIES)
        .ok_or_else(|| {
            HaError::Protocol(format!(
                "the master announced {n} epochs (at most {MAX_ENTRIES})"
            ))
        })?;
    let mut body = vec![0u8; n * ENTRY];
    read(stream, &mut body, "master's epochs").await?;
    let entries = body
        .chunks_exact(ENTRY)
        .map(|c| EpochEntry {
            epoch: i32::from_be_bytes(c[..4].try_into().unwrap_or_default()),
            start_offset: i64::from_be_bytes(c[4..].try_into().unwrap_or_default()),
        })
        .collect();
    Ok(Answer {
        accepted: status == 0,
        master_end,
        entries,
    })
}

/// The slave's side, before its first report: says who it is and which master it
/// expects, cuts its log at the consistent point, and adopts the master's epochs.
pub async fn open(ctx: &BrokerCtx, stream: &SharedStream) -> Result<(), HaError> {
    let Some(cm) = &ctx.controller else {
        return Ok(());
    };
    let id = cm
        .replica
        .broker_id()
        .ok_or_else(|| HaError::Local("not registered with the controllers yet".into()))?;
    let epoch = cm.replica.known().master_epoch;
    let mut hello = Vec::with_capacity(HELLO.len() + HELLO_REST);
    hello.extend_from_slice(&HELLO);
    hello.extend_from_slice(&id.to_be_bytes());
    hello.extend_from_slice(&epoch.to_be_bytes());
    write(stream, &hello, "hello").await?;
    let a = read_answer(stream).await?;
    if !a.accepted {
        return Err(HaError::Protocol(format!(
            "the master refused: it is not the master of epoch {epoch}"
        )));
    }
    let local = cm.replica.epochs();
    let end = ctx.store.log_end() as i64;
    let point = if local.is_empty() {
        if !ctx.store.log_is_empty() && end > 0 {
            return Err(HaError::Local(format!(
                "this replica's log ends at {end} but it has no epoch file: it cannot tell \
                 where it agrees with the master; remove its store to resync it"
            )));
        }
        end
    } else {
        consistent_point(&local, end, &a.entries, a.master_end)
            .ok_or_else(|| {
                HaError::Local(format!(
                    "no term in common with the master (local {local:?}, master {:?}): remove \
                     this replica's store to resync it",
                    a.entries
                ))
            })?
            .min(end)
    };
    // The role may have moved while the master answered: a broker promoted meanwhile
    // neither cuts its log nor takes another master's epochs (the store refuses the cut
    // of a master's log too).
    if !ctx.role.is_slave() {
        return Err(HaError::Local("this broker is no longer a slave".into()));
    }
    if point < end {
        log::warn!(
            "cutting this replica's log from {end} to {point}, where it parts from the master's"
        );
        // Marked first: a crash between the two leaves a timer rebuilt for nothing, never
        // one naming records the cut took.
        let root = ctx.config.store_root.clone();
        runtime::spawn_blocking(move || crate::timer::mark_for_rebuild(&root))
            .await
            .map_err(|e| HaError::Local(format!("marking the timer for a rebuild: {e}")))?;
        ctx.timer.forget_master_progress();
        ctx.store
            .truncate_log(point as u64)
            .await
            .map_err(|e| HaError::Local(format!("cutting the log at {point}: {e}")))?;
    }
    let entries = a.entries.clone();
    let c = ctx.controller.clone();
    runtime::spawn_blocking(move || c.map_or(Ok(()), |cm| cm.replica.adopt_master_epochs(&entries)))
        .await
        .map_err(|e| HaError::Local(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_bound_their_entries() {
        let a = Answer {
            accepted: true,
            master_end: 4096,
            entries: vec![
                EpochEntry {
                    epoch: 1,
                    start_offset: 0,
                },
                EpochEntry {
                    epoch: 3,
                    start_offset: 1024,
                },
            ],
        };
        let bytes = a.encode();
        assert_eq!(bytes.len(), 16 + 2 * ENTRY);
        let (client, server) = runtime::block_on(async {
            let l = async_std::net::TcpListener::bind("127.0.0.1:0")
                .await
                .unwrap();
            let addr = l.local_addr().unwrap();
            let c = async_std::net::TcpStream::connect(addr).await.unwrap();
            let (s, _) = l.accept().await.unwrap();
            (c, s)
        });
        let c = tern_shell::tls::Stream::Plain(client).shared();
        let s = tern_shell::tls::Stream::Plain(server).shared();
        runtime::block_on(async {
            write(&s, &bytes, "answer").await.unwrap();
            assert_eq!(read_answer(&c).await.unwrap(), a);
            // A count past the bound is refused before anything is allocated for it.
            let mut bad = bytes[..16].to_vec();
            bad[12..16].copy_from_slice(&(MAX_ENTRIES as i32 + 1).to_be_bytes());
            write(&s, &bad, "answer").await.unwrap();
            assert!(
                read_answer(&c)
                    .await
                    .unwrap_err()
                    .to_string()
                    .contains("epochs")
            );
        });
    }
}
