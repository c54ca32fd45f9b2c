//! Transactional messages against the real `tern-broker --standalone`: commit, rollback,
//! check-backs (answered, re-routed, unanswered), the COMMIT sysFlag as a push consumer
//! sees it, duplicate verdicts, and `kill -9` of the broker before and after a commit.
//!
//! The broker checks back every 500 ms for halves older than 1 s. Waits poll with
//! generous deadlines; "never delivered twice" is checked after several more check
//! rounds have had the chance to deliver a duplicate.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Broker, LogOf, Sink, recorder, run, wait_for};
use tern_client::{
    ClientConfig, ConsumeFromWhere, ListenerResult, LocalTransactionState, Message, MessageBuilder,
    MessageExt, ProducerConfig, PullConsumer, PullStatus, PushConsumerConfig, SendStatus,
    TransactionListener, TransactionProducer,
};
use tern_shell::message::{
    SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_MASK, decode_offset_msg_id,
};
use tern_shell::runtime::sleep;

const TX_CONF: &str = "transactionCheckInterval=500\ntransactionTimeOut=1000\n";
/// Long enough for anything the broker does, even on a loaded machine.
const DEADLINE: Duration = Duration::from_secs(60);
/// Several check rounds past the timeout: time for a duplicate to show up if one would.
const SETTLE: Duration = Duration::from_secs(4);

/// What a scripted listener answers.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    Say(LocalTransactionState),
    Fail,
    Panic,
}

use LocalTransactionState::{Commit, Rollback, Unknown};

/// A listener whose answers the test sets, counting what it was asked.
#[derive(Debug)]
struct Script {
    execute: Mutex<Verdict>,
    check: Mutex<Verdict>,
    /// `execute_local` waits (up to [`DEADLINE`]) until this many check-backs arrived.
    execute_waits_for_checks: usize,
    executed: AtomicUsize,
    args: Mutex<Vec<u32>>,
    checked: Mutex<Vec<MessageExt>>,
}

impl Script {
    fn new(execute: Verdict, check: Verdict) -> Arc<Self> {
        Self::waiting(execute, check, 0)
    }

    fn waiting(execute: Verdict, check: Verdict, checks: usize) -> Arc<Self> {
        Arc::new(Self {
            execute: Mutex::new(execute),
            check: Mutex::new(check),
            execute_waits_for_checks: checks,
            executed: AtomicUsize::new(0),
            args: Mutex::new(Vec::new()),
            checked: Mutex::new(Vec::new()),
        })
    }

    fn checks(&self) -> usize {
        self.checked.lock().unwrap().len()
    }

    fn set_check(&self, v: Verdict) {
        *self.check.lock().unwrap() = v;
    }
}

fn answer(v: Verdict) -> ListenerResult {
    match v {
        Verdict::Say(s) => Ok(s),
        Verdict::Fail => Err("the database is down".into()),
        Verdict::Panic => panic!("listener bug"),
    }
}

#[derive(Debug)]
struct Listener(Arc<Script>);

impl TransactionListener for Listener {
    type Arg = u32;

    fn execute_local(&self, msg: &Message, arg: &u32) -> ListenerResult {
        assert_eq!(
            msg.properties.get("TRAN_MSG").map(String::as_str),
            Some("true")
        );
        self.0.executed.fetch_add(1, Ordering::SeqCst);
        self.0.args.lock().unwrap().push(*arg);
        // Not an assertion: past the deadline it answers anyway, and the test's own
        // checks on the check-backs say what went wrong.
        let _ = tern_testkit::poll_until(DEADLINE, || {
            self.0.checks() >= self.0.execute_waits_for_checks
        });
        let v = *self.0.execute.lock().unwrap();
        answer(v)
    }

    fn check_local(&self, msg: &MessageExt) -> ListenerResult {
        self.0.checked.lock().unwrap().push(msg.clone());
        let v = *self.0.check.lock().unwrap();
        answer(v)
    }
}

/// Client settings with heartbeats every 500 ms, so a restarted broker learns the
/// producers again quickly.
fn client_config(b: &Broker) -> ClientConfig {
    let mut c = b.client_config();
    c.heartbeat_interval = Duration::from_millis(500);
    c
}

async fn producer(b: &Broker, group: &str, script: &Arc<Script>) -> TransactionProducer<Listener> {
    let p = TransactionProducer::new(
        ProducerConfig::new(group),
        client_config(b),
        Listener(script.clone()),
    )
    .unwrap();
    p.start().await.unwrap();
    p
}

fn msg(topic: &str, i: usize) -> Message {
    Message::new(topic, format!("tx-body-{i}"))
        .with_tags("TagTx")
        .with_keys([format!("order-{i}")])
        .with_property("seq", i.to_string())
        .with_flag(7)
}

/// Every message stored in every queue of `topic`, duplicates included.
async fn stored(c: &PullConsumer, topic: &str) -> Vec<MessageExt> {
    let mut out = Vec::new();
    let Ok(queues) = c.fetch_queues(topic).await else {
        return out;
    };
    for q in queues {
        let mut offset = 0;
        loop {
            let Ok(r) = c.pull(&q, offset, 32).await else {
                break;
            };
            if r.status != PullStatus::Found {
                break;
            }
            out.extend(r.messages);
            offset = r.next_begin_offset;
        }
    }
    out
}

/// How many times each UNIQ_KEY was stored.
fn counts(msgs: &[MessageExt]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for x in msgs {
        *m.entry(x.msg_id().to_owned()).or_insert(0) += 1;
    }
    m
}

/// Polls `topic` until `done` holds for what is stored; panics with `what` at the deadline.
async fn wait_stored(
    c: &PullConsumer,
    topic: &str,
    what: &str,
    b: &Broker,
    done: impl Fn(&[MessageExt]) -> bool,
) -> Vec<MessageExt> {
    wait_for(what, DEADLINE, async || {
        let got = stored(c, topic).await;
        if done(&got) {
            Ok(got)
        } else {
            Err((counts(&got), LogOf(b)))
        }
    })
    .await
}

/// What `topic` holds after [`SETTLE`], time for a duplicate to show up.
async fn settled(c: &PullConsumer, topic: &str) -> Vec<MessageExt> {
    sleep(SETTLE).await;
    stored(c, topic).await
}

async fn wait_until(what: &str, b: &Broker, f: impl Fn() -> bool) {
    wait_for(
        what,
        DEADLINE,
        async || {
            if f() { Ok(()) } else { Err(LogOf(b)) }
        },
    )
    .await
}

#[test]
fn commit_delivers_once_with_every_field_intact() {
    let b = Broker::start(TX_CONF);
    run(async {
        b.create_topic("TxCommit", 4).await;
        let script = Script::new(Verdict::Say(Commit), Verdict::Say(Commit));
        let p = producer(&b, "tx-commit-pg", &script).await;
        let mut sent = BTreeMap::new();
        for i in 0..6 {
            let r = p
                .send_in_transaction(msg("TxCommit", i), &(i as u32))
                .await
                .unwrap();
            assert_eq!(r.local_state, Commit);
            assert_eq!(r.send.status, SendStatus::SendOk);
            assert_eq!(r.send.queue.topic, "TxCommit");
            assert_eq!(
                r.send.transaction_id.as_deref(),
                Some(r.send.msg_id.as_str())
            );
            sent.insert(r.send.msg_id.clone(), (i, r));
        }
        assert_eq!(*script.args.lock().unwrap(), vec![0, 1, 2, 3, 4, 5]);

        let c = PullConsumer::new("tx-commit-cg", b.client_config()).unwrap();
        wait_stored(&c, "TxCommit", "all six committed", &b, |g| g.len() >= 6).await;
        let got = settled(&c, "TxCommit").await;
        let n = counts(&got);
        assert_eq!(n.len(), 6, "{n:?}");
        assert!(
            n.values().all(|c| *c == 1),
            "delivered more than once: {n:?}"
        );
        for m in &got {
            let (i, r) = &sent[m.msg_id()];
            let want = msg("TxCommit", *i);
            assert_eq!(m.topic, "TxCommit");
            assert_eq!(
                m.queue_id, r.send.queue.queue_id,
                "the queue the half was sent for"
            );
            assert_eq!(m.body, want.body);
            assert_eq!(m.flag, 7);
            assert_eq!(m.tags(), Some("TagTx"));
            for (k, v) in &want.properties {
                assert_eq!(m.properties.get(k), Some(v), "property {k}");
            }
            assert_eq!(m.properties.get("__transactionId__"), Some(&r.send.msg_id));
            assert_eq!(
                m.properties.get("PGROUP").map(String::as_str),
                Some("tx-commit-pg")
            );
            for gone in [
                "TRAN_MSG",
                "REAL_TOPIC",
                "REAL_QID",
                "TRANSACTION_CHECK_TIMES",
            ] {
                assert!(
                    !m.properties.contains_key(gone),
                    "{gone} leaked: {:?}",
                    m.properties
                );
            }
            assert_eq!(
                m.sys_flag & SYSFLAG_TRANSACTION_MASK,
                SYSFLAG_TRANSACTION_COMMIT
            );
            let half = decode_offset_msg_id(&r.send.offset_msg_id).unwrap();
            assert_eq!(m.prepared_transaction_offset, half.commit_log_offset);
        }
        p.shutdown().await;
    });
}

#[test]
fn rolled_back_and_failed_transactions_are_never_delivered() {
    let b = Broker::start(TX_CONF);
    run(async {
        b.create_topic("TxRollback", 2).await;
        let script = Script::new(Verdict::Say(Rollback), Verdict::Say(Rollback));
        let p = producer(&b, "tx-rollback-pg", &script).await;
        // Three rolled back; then a failing and a panicking listener, which count as
        // Unknown, and the check-back says rollback.
        let verdicts = [
            (Verdict::Say(Rollback), Rollback),
            (Verdict::Say(Rollback), Rollback),
            (Verdict::Say(Rollback), Rollback),
            (Verdict::Fail, Unknown),
            (Verdict::Panic, Unknown),
        ];
        let mut rolled = Vec::new();
        for (i, (verdict, state)) in verdicts.into_iter().enumerate() {
            *script.execute.lock().unwrap() = verdict;
            let r = p
                .send_in_transaction(msg("TxRollback", i), &0)
                .await
                .unwrap();
            assert_eq!(r.local_state, state);
            rolled.push(r.send.msg_id);
        }
        // A committed marker after them.
        *script.execute.lock().unwrap() = Verdict::Say(Commit);
        let marker = p
            .send_in_transaction(msg("TxRollback", 5), &0)
            .await
            .unwrap();

        let c = PullConsumer::new("tx-rollback-cg", b.client_config()).unwrap();
        wait_stored(&c, "TxRollback", "the committed marker", &b, |g| {
            !g.is_empty()
        })
        .await;
        wait_until("both unknown ones checked back", &b, || {
            script.checks() >= 2
        })
        .await;
        let n = counts(&settled(&c, "TxRollback").await);
        assert_eq!(n.get(&marker.send.msg_id), Some(&1), "{n:?}");
        for id in &rolled {
            assert!(!n.contains_key(id), "rolled-back {id} delivered: {n:?}");
        }
        let checked: Vec<String> = script
            .checked
            .lock()
            .unwrap()
            .iter()
            .map(|m| m.msg_id().to_owned())
            .collect();
        for id in &rolled[3..] {
            assert!(checked.contains(id), "{id} not checked back: {checked:?}");
        }
        p.shutdown().await;
    });
}

#[test]
fn unknown_then_check_back_commit_delivers_once() {
    let b = Broker::start(TX_CONF);
    run(async {
        b.create_topic("TxCheck", 2).await;
        let script = Script::new(Verdict::Say(Unknown), Verdict::Say(Commit));
        let p = producer(&b, "tx-check-pg", &script).await;
        let r = p.send_in_transaction(msg("TxCheck", 1), &9).await.unwrap();
        assert_eq!(r.local_state, Unknown);

        let c = PullConsumer::new("tx-check-cg", b.client_config()).unwrap();
        wait_stored(&c, "TxCheck", "committed by check-back", &b, |g| {
            !g.is_empty()
        })
        .await;
        let got = settled(&c, "TxCheck").await;
        assert_eq!(got.len(), 1, "{:?}", counts(&got));
        assert_eq!(got[0].msg_id(), r.send.msg_id);
        assert_eq!(got[0].body, b"tx-body-1");
        assert_eq!(got[0].queue_id, r.send.queue.queue_id);

        let checked = script.checked.lock().unwrap().clone();
        assert!(!checked.is_empty());
        let asked = &checked[0];
        // The check-back carries the message as it will be delivered: real topic and queue.
        assert_eq!(asked.topic, "TxCheck");
        assert_eq!(asked.queue_id, r.send.queue.queue_id);
        assert_eq!(asked.msg_id(), r.send.msg_id);
        assert_eq!(asked.body, b"tx-body-1");
        assert_eq!(asked.tags(), Some("TagTx"));
        assert_eq!(
            asked
                .properties
                .get("TRANSACTION_CHECK_TIMES")
                .map(String::as_str),
            Some("1")
        );
        p.shutdown().await;
    });
}

#[test]
fn check_back_goes_to_another_producer_of_the_group_when_the_first_is_gone() {
    let b = Broker::start(TX_CONF);
    run(async {
        b.create_topic("TxFailover", 2).await;
        let first = Script::new(Verdict::Say(Unknown), Verdict::Say(Unknown));
        let p1 = producer(&b, "tx-failover-pg", &first).await;
        let r = p1
            .send_in_transaction(msg("TxFailover", 1), &0)
            .await
            .unwrap();
        wait_until("the first producer is asked", &b, || first.checks() >= 1).await;
        p1.shutdown().await;

        let second = Script::new(Verdict::Say(Rollback), Verdict::Say(Commit));
        let p2 = producer(&b, "tx-failover-pg", &second).await;
        let c = PullConsumer::new("tx-failover-cg", b.client_config()).unwrap();
        wait_stored(
            &c,
            "TxFailover",
            "committed by the second producer",
            &b,
            |g| !g.is_empty(),
        )
        .await;
        assert!(second.checks() >= 1);
        assert_eq!(second.checked.lock().unwrap()[0].msg_id(), r.send.msg_id);
        assert_eq!(settled(&c, "TxFailover").await.len(), 1);
        p2.shutdown().await;
    });
}

#[test]
fn a_transaction_never_answered_ends_in_trans_check_max_time_topic() {
    let b = Broker::start(&format!("{TX_CONF}transactionCheckMax=2\n"));
    run(async {
        b.create_topic("TxGiveUp", 1).await;
        let script = Script::new(Verdict::Say(Unknown), Verdict::Say(Unknown));
        let p = producer(&b, "tx-giveup-pg", &script).await;
        let r = p.send_in_transaction(msg("TxGiveUp", 1), &0).await.unwrap();
        let c = PullConsumer::new("tx-giveup-cg", b.client_config()).unwrap();
        let got = wait_stored(&c, "TRANS_CHECK_MAX_TIME_TOPIC", "given up", &b, |g| {
            !g.is_empty()
        })
        .await;
        assert_eq!(got.len(), 1);
        let m = &got[0];
        assert_eq!(m.msg_id(), r.send.msg_id);
        assert_eq!(
            m.properties.get("REAL_TOPIC").map(String::as_str),
            Some("TxGiveUp")
        );
        assert_eq!(
            m.properties
                .get("TRANSACTION_CHECK_TIMES")
                .map(String::as_str),
            Some("2")
        );
        assert_eq!(m.body, b"tx-body-1");
        wait_until("two check-backs seen", &b, || script.checks() >= 2).await;
        sleep(SETTLE).await;
        assert_eq!(
            script.checks(),
            2,
            "asked exactly transactionCheckMax times"
        );
        assert!(
            stored(&c, "TxGiveUp").await.is_empty(),
            "a given-up message was delivered"
        );
        assert_eq!(stored(&c, "TRANS_CHECK_MAX_TIME_TOPIC").await.len(), 1);
        p.shutdown().await;
    });
}

#[test]
fn push_consumers_receive_committed_messages_with_the_commit_sysflag() {
    let b = Broker::start(TX_CONF);
    run(async {
        b.create_topic("TxPush", 2).await;
        let seen: Sink<MessageExt> = Sink::default();
        let mut cfg = PushConsumerConfig::new("tx-push-cg");
        cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
        let listener = recorder(&seen, |m, _| m.clone());
        let consumer = b.push_consumer(cfg, "TxPush", listener).await;

        let script = Script::new(Verdict::Say(Commit), Verdict::Say(Commit));
        let p = producer(&b, "tx-push-pg", &script).await;
        let r = p.send_in_transaction(msg("TxPush", 1), &0).await.unwrap();
        wait_until("the push consumer got it", &b, || {
            !seen.lock().unwrap().is_empty()
        })
        .await;
        let m = seen.lock().unwrap()[0].clone();
        assert_eq!(m.msg_id(), r.send.msg_id);
        assert_eq!(
            m.sys_flag & SYSFLAG_TRANSACTION_MASK,
            SYSFLAG_TRANSACTION_COMMIT
        );
        consumer.shutdown().await;
        p.shutdown().await;
    });
}

#[test]
fn a_late_commit_after_a_check_back_commit_is_not_delivered_twice() {
    let b = Broker::start(TX_CONF);
    run(async {
        b.create_topic("TxLate", 2).await;
        // The local transaction outlives the timeout: the broker asks, the check answers
        // Commit, and only then does the producer's own Commit go out, for the old copy.
        let script = Script::waiting(Verdict::Say(Commit), Verdict::Say(Commit), 1);
        let p = producer(&b, "tx-late-pg", &script).await;
        let r = p.send_in_transaction(msg("TxLate", 1), &0).await.unwrap();
        assert_eq!(r.local_state, Commit);
        assert!(script.checks() >= 1);
        let c = PullConsumer::new("tx-late-cg", b.client_config()).unwrap();
        wait_stored(&c, "TxLate", "committed", &b, |g| !g.is_empty()).await;
        let got = settled(&c, "TxLate").await;
        assert_eq!(got.len(), 1, "delivered twice: {:?}", counts(&got));
        // Both verdicts reached the broker: the second was recognised, not just lost.
        wait_until("the duplicate commit seen", &b, || {
            b.log().contains("already committed")
        })
        .await;
        p.shutdown().await;
    });
}

#[test]
fn after_kill_9_a_committed_transaction_is_delivered_once() {
    let mut b = Broker::start(TX_CONF);
    let p = run(async {
        b.create_topic("TxCrashCommit", 2).await;
        let script = Script::new(Verdict::Say(Commit), Verdict::Say(Commit));
        let p = producer(&b, "tx-crash1-pg", &script).await;
        let mut ids = Vec::new();
        for i in 0..3 {
            ids.push(
                p.send_in_transaction(msg("TxCrashCommit", i), &0)
                    .await
                    .unwrap()
                    .send
                    .msg_id,
            );
        }
        let c = PullConsumer::new("tx-crash1-cg", b.client_config()).unwrap();
        // END_TRANSACTION is oneway: the commit is acknowledged once it can be consumed.
        wait_stored(&c, "TxCrashCommit", "committed before the crash", &b, |g| {
            g.len() >= 3
        })
        .await;
        c.shutdown().await;
        p
    });
    b.kill9();
    b.restart();
    run(async {
        // The producer stays, answering Commit: a check-back after the restart must not
        // lead to a second delivery either.
        let c = PullConsumer::new("tx-crash1-cg2", b.client_config()).unwrap();
        wait_stored(
            &c,
            "TxCrashCommit",
            "committed after the restart",
            &b,
            |g| g.len() >= 3,
        )
        .await;
        let n = counts(&settled(&c, "TxCrashCommit").await);
        assert_eq!(n.len(), 3, "{n:?}");
        assert!(
            n.values().all(|c| *c == 1),
            "delivered twice after the crash: {n:?}"
        );
        p.shutdown().await;
    });
}

#[test]
fn after_kill_9_an_unresolved_transaction_is_checked_back() {
    let mut b = Broker::start(TX_CONF);
    let script = Script::new(Verdict::Say(Unknown), Verdict::Say(Unknown));
    let p = run(async {
        b.create_topic("TxCrashOpen", 2).await;
        let p = producer(&b, "tx-crash2-pg", &script).await;
        let r = p
            .send_in_transaction(msg("TxCrashOpen", 1), &0)
            .await
            .unwrap();
        assert_eq!(r.local_state, Unknown);
        (p, r.send.msg_id)
    });
    // The half is stored (acknowledged) but not resolved, and no check has counted yet or
    // has: either way the restarted broker must ask again.
    b.kill9();
    let asked_before = script.checks();
    script.set_check(Verdict::Say(Commit));
    b.restart();
    run(async {
        let (p, id) = p;
        wait_until("checked back after the restart", &b, || {
            script.checks() > asked_before
        })
        .await;
        let c = PullConsumer::new("tx-crash2-cg", b.client_config()).unwrap();
        let got = wait_stored(&c, "TxCrashOpen", "committed after the restart", &b, |g| {
            !g.is_empty()
        })
        .await;
        assert_eq!(got[0].msg_id(), id);
        assert_eq!(settled(&c, "TxCrashOpen").await.len(), 1);
        p.shutdown().await;
    });
}
