//! `tern-edge dead-letters list|resend|drop`: the operator's side of the dead-letter
//! folder ([`crate::forward::dead_letter`]). It reads and changes only that folder, so it
//! runs beside a running gateway as well as on a stopped one.

use std::fmt::Write as _;

use tern_client::{Producer, ProducerConfig};

use crate::EdgeConfig;
use crate::forward::dead_letter::DeadLetters;
use crate::forward::records;

/// What to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Print offset, topic, size and reason of each.
    List,
    /// Send to the central cluster, then remove on success.
    Resend,
    /// Remove.
    Drop,
}

/// Which dead letters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// Every one.
    All,
    /// The one of this local log offset.
    One(u64),
}

/// Parses `list`, `resend OFFSET|--all`, `drop OFFSET|--all`.
pub fn parse(action: &str, which: Option<&str>) -> Result<(Action, Which), String> {
    let action = match action {
        "list" => Action::List,
        "resend" => Action::Resend,
        "drop" => Action::Drop,
        other => {
            return Err(format!(
                "unknown dead-letters action '{other}' (list|resend|drop)"
            ));
        }
    };
    let which = match (action, which) {
        (Action::List, None) | (_, Some("--all")) => Which::All,
        (_, Some(n)) => Which::One(
            n.parse()
                .map_err(|_| format!("'{n}' is not a local log offset (or --all)"))?,
        ),
        (_, None) => return Err("give the dead letter's offset, or --all".into()),
    };
    Ok((action, which))
}

/// Runs the command; returns what to print, or the failures (after doing what could be
/// done).
pub async fn run(cfg: &EdgeConfig, action: Action, which: Which) -> Result<String, String> {
    let dead = DeadLetters::new(&cfg.broker.store_root);
    let offsets = match which {
        Which::All => dead
            .offsets()
            .map_err(|e| format!("{}: {e}", dead.dir().display()))?,
        Which::One(n) => vec![n],
    };
    let mut out = String::new();
    let mut failed = Vec::new();
    match action {
        Action::List => {
            let _ = writeln!(
                out,
                "{:<20}  {:<32}  {:>9}  reason",
                "offset", "topic", "size"
            );
            for o in offsets {
                match dead.describe(o) {
                    Ok(d) => {
                        let _ = writeln!(
                            out,
                            "{:<20}  {:<32}  {:>9}  {}",
                            d.offset, d.topic, d.size, d.reason
                        );
                    }
                    Err(e) => failed.push(format!("{o}: {e}")),
                }
            }
        }
        Action::Drop => {
            for o in offsets {
                match dead.remove(o) {
                    Ok(()) => {
                        let _ = writeln!(out, "dropped {o}");
                    }
                    Err(e) => failed.push(format!("{o}: {e}")),
                }
            }
        }
        Action::Resend => {
            let mut pc = ProducerConfig::new(cfg.producer_group.clone());
            pc.retry_times_when_send_failed = 2;
            let producer = Producer::new(pc, cfg.upstream_client()?).map_err(|e| e.to_string())?;
            producer.start();
            for o in offsets {
                match resend_one(&dead, &producer, o).await {
                    Ok(line) => out.push_str(&line),
                    Err(e) => failed.push(format!("{o}: {e}")),
                }
            }
            producer.shutdown().await;
        }
    }
    if failed.is_empty() {
        Ok(out)
    } else {
        Err(format!("{out}{}", failed.join("\n")))
    }
}

/// Sends one dead letter as the forwarder would have (same message id), then removes
/// it; kept when anything fails.
async fn resend_one(
    dead: &DeadLetters,
    producer: &Producer,
    offset: u64,
) -> Result<String, String> {
    let bytes = dead.bytes(offset).map_err(|e| e.to_string())?;
    let d = match records::decode(&bytes) {
        Ok(Some(d)) => d,
        Ok(None) => return Err("a record of a local-only topic: not forwarded".into()),
        Err(e) => return Err(format!("cannot be sent: {}; kept", e.why)),
    };
    let topic = d.msg.topic.clone();
    let sent = match d.compression {
        None => producer.send(d.msg).await,
        // Kept before this build forwarded such bodies as they are.
        Some(bits) => match producer.publish_info(&topic).await {
            Ok(info) if !info.queues.is_empty() => {
                let q = &info.queues[d.queue.unsigned_abs() as usize % info.queues.len()];
                producer.send_compressed_to_queue(d.msg, bits, q).await
            }
            Ok(_) => Err(tern_client::ClientError::NoRoute {
                topic: topic.clone(),
            }),
            Err(e) => Err(e),
        },
    }
    .map_err(|e| format!("sending to the cluster: {e}; kept"))?;
    dead.remove(offset)
        .map_err(|e| format!("sent as {} but removing it failed: {e}", sent.msg_id))?;
    Ok(format!(
        "resent {offset} ({topic}) as {} to {} queue {}\n",
        sent.msg_id, sent.queue.broker_name, sent.queue.queue_id
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_take_an_offset_or_all() {
        assert_eq!(parse("list", None), Ok((Action::List, Which::All)));
        assert_eq!(
            parse("resend", Some("--all")),
            Ok((Action::Resend, Which::All))
        );
        assert_eq!(
            parse("drop", Some("42")),
            Ok((Action::Drop, Which::One(42)))
        );
        assert!(parse("drop", None).is_err(), "drop needs to be told which");
        assert!(parse("resend", Some("x")).is_err());
        assert!(parse("purge", None).is_err());
    }
}
