//! The web console in a real browser: `shell/console/tests/browser/console.spec.mjs`
//! (playwright-core driving headless Chromium) against a real `tern-broker --standalone`,
//! with a real push consumer run here. The script creates a topic on the Topics page,
//! sends with `tern-admin`, watches the TPS chart move and the group's lag fall to 0,
//! finds a message by key and opens its body, resets the group's offset to a time (this
//! test checks the consumer really receives everything again), and checks the errors a
//! person sees. `acl.spec.mjs` logs in and edits ACL accounts on a broker with ACL on.
//! Screenshots go to `target/console-screenshots/`.

use crate::common;
use tern_testkit::python::repo_root;
use tern_testkit::{Proc, poll_until};

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Broker, acl_conf, run, write_acl};
use tern_client::{
    ConsumeContext, ConsumeFromWhere, ConsumeStatus, Message, MessageExt, Producer, ProducerConfig,
    PushConsumerConfig,
};

const TOPIC: &str = "ConsoleOrders";
const GROUP: &str = "ConsoleGroup";
const PRODUCER_GROUP: &str = "ConsoleProducers";

/// Node, the installed playwright-core and Chromium, or `None` (after a note) when the
/// test should skip; a failure when `TERN_REQUIRE_INTEROP` is set (test.sh sets it and
/// installs them through `scripts/setup-console-test.sh`).
fn browser_or_skip() -> Option<(PathBuf, PathBuf)> {
    let dir = repo_root().join("shell/console/tests/browser");
    let chromium = std::env::var_os("TERN_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let missing = [
        (!node_ok).then_some("node"),
        (!dir.join("node_modules/playwright-core").exists()).then_some("playwright-core"),
        (!chromium.exists()).then_some("chromium"),
    ];
    let missing: Vec<&str> = missing.into_iter().flatten().collect();
    if missing.is_empty() {
        return Some((dir, chromium));
    }
    let why = format!(
        "console browser test: missing {} (run scripts/setup-console-test.sh)",
        missing.join(", ")
    );
    assert!(std::env::var_os("TERN_REQUIRE_INTEROP").is_none(), "{why}");
    eprintln!("skipped: {why}");
    None
}

/// A `tern-console` whose name server is down: its pages must say so.
fn dead_console() -> (Proc, String) {
    let mut cmd = Command::new(tern_testkit::binary_of("tern-console", "tern-console"));
    cmd.args(["--listen", "127.0.0.1:0", "-n", "127.0.0.1:1"]);
    let mut proc = Proc::spawn("tern-console", &mut cmd);
    let url = proc.wait_announced("tern-console on ", Duration::from_secs(20));
    (proc, url)
}

/// `node` running `script` of the browser folder `dir` against `console`, screenshots to
/// `shots`; its stdin and stdout piped (the steps), stderr passed through.
fn browser_script(
    (dir, chromium): &(PathBuf, PathBuf),
    script: &str,
    console: &str,
    shots: &Path,
) -> Command {
    let mut cmd = Command::new("node");
    cmd.arg(dir.join(script))
        .current_dir(dir)
        .env("CONSOLE_URL", console)
        .env("SHOTS", shots)
        .env("CHROMIUM", chromium)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    cmd
}

/// A fresh screenshot folder for one test.
fn shots_dir(test: &str) -> PathBuf {
    let shots = repo_root().join("target/console-screenshots").join(test);
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

#[test]
fn the_console_logs_in_and_edits_acl_accounts_with_admin_credentials() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let rules = write_acl(tmp.path(), crate::acl_admin::RULES);
    let b = Broker::start(&format!(
        "{}consoleUser=operator\nconsolePassword=console-pw-1\n\
         consoleAccessKey=ops_admin\nconsoleSecretKey=ops_secret\n",
        acl_conf(&rules)
    ));
    let console = b
        .console
        .clone()
        .expect("--standalone printed the console's address");
    let shots = shots_dir("acl");
    let mut node = browser_script(&browser, "acl.spec.mjs", &console, &shots)
        .spawn()
        .expect("spawn node");
    let mut to_node = node.stdin.take().unwrap();
    for line in BufReader::new(node.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
    {
        if line == "STEP created" {
            // The page's account is in the broker's rules file, its secret with it.
            let text = std::fs::read_to_string(&rules).unwrap();
            assert!(
                text.contains("console_user1") && text.contains("console_secret1"),
                "{text}"
            );
            writeln!(to_node, "go").unwrap();
        }
    }
    assert!(
        node.wait().unwrap().success(),
        "the browser script failed; broker log:\n{}",
        b.log()
    );
    let text = std::fs::read_to_string(&rules).unwrap();
    assert!(
        !text.contains("console_user1"),
        "deleted from the page, still in the rules:\n{text}"
    );
    // The console's password is in no log line.
    assert!(!b.log().contains("console-pw-1"));
}

#[test]
fn the_console_drives_a_real_cluster_in_a_real_browser() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    // Samples every second, so the chart moves within the test.
    let b = Broker::start("consoleSampleSeconds=1\n");
    let console = b
        .console
        .clone()
        .expect("--standalone printed the console's address");
    let (mut dead, dead_url) = dead_console();
    let shots = shots_dir("main");
    let mut node = browser_script(&browser, "console.spec.mjs", &console, &shots)
        .env("DEAD_CONSOLE_URL", &dead_url)
        .env("NAMESRV", &b.namesrv)
        .env("BROKER_ADDR", &b.addr)
        .env("TERN_ADMIN", env!("CARGO_BIN_EXE_tern-admin"))
        .spawn()
        .expect("spawn node");
    let mut to_node = node.stdin.take().unwrap();
    let steps = BufReader::new(node.stdout.take().unwrap()).lines();
    // Deliveries per message key.
    let received: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let count = |key: &str| received.lock().unwrap().get(key).copied().unwrap_or(0);
    // The script's keys: order-42 for the eighth message, order-(1000 + i) for the others.
    let key = |i: usize| {
        if i == 7 {
            "order-42".to_owned()
        } else {
            format!("order-{}", 1000 + i)
        }
    };
    let mut consumer = None;
    let mut producer = None;
    let mut sent = 0;
    for line in steps.map_while(Result::ok) {
        let Some(step) = line.strip_prefix("STEP ") else {
            eprintln!("[node] {line}");
            continue;
        };
        if let Some(n) = step.strip_prefix("sent ") {
            sent = n.parse().unwrap();
            let mut cfg = PushConsumerConfig::new(GROUP);
            cfg.consume_from_where = ConsumeFromWhere::ConsumeFromFirstOffset;
            let seen = received.clone();
            let listener = move |msgs: &[MessageExt], _: &mut ConsumeContext| {
                let mut seen = seen.lock().unwrap();
                for m in msgs {
                    let k = m.properties.get("KEYS").cloned().unwrap_or_default();
                    *seen.entry(k).or_default() += 1;
                }
                ConsumeStatus::Success
            };
            let c = run(b.push_consumer(cfg, TOPIC, listener));
            consumer = Some(c);
            // A producer that stays connected, for the Producers page (it sends to a topic
            // of its own: the script counts what reached its topic).
            // Brokers learn of a producer from its heartbeat (every 30 s by default).
            let mut fast = b.client_config();
            fast.heartbeat_interval = Duration::from_millis(300);
            let p = Producer::new(ProducerConfig::new(PRODUCER_GROUP), fast).unwrap();
            p.start();
            run(async {
                b.create_topic("ConsoleOther", 1).await;
                p.send(Message::new("ConsoleOther", "hello")).await.unwrap();
            });
            producer = Some(p);
            writeln!(to_node, "consuming").unwrap();
        } else if let Some(k) = step.strip_prefix("resent ") {
            // Once by the group, once more by the page's re-send.
            assert!(
                poll_until(Duration::from_secs(10), || count(k) >= 2),
                "{k} delivered {} times",
                count(k)
            );
            writeln!(to_node, "received").unwrap();
        } else if step == "reset" {
            // Every message again, through the reset the page made.
            let again = || (0..sent).filter(|&i| count(&key(i)) >= 2).count();
            assert!(
                poll_until(Duration::from_secs(30), || again() == sent),
                "after the reset the consumer got {} of {sent} messages again",
                again()
            );
            writeln!(to_node, "reconsumed").unwrap();
        } else if step == "stop consumer" {
            if let Some(c) = consumer.take() {
                run(c.shutdown());
            }
            writeln!(to_node, "stopped").unwrap();
        }
    }
    let status = node.wait().unwrap();
    if let Some(c) = consumer {
        run(c.shutdown());
    }
    if let Some(p) = producer {
        run(p.shutdown());
    }
    dead.kill9();
    assert!(
        status.success(),
        "the browser script failed; broker log:\n{}",
        b.log()
    );
    assert!(sent >= 20, "the script sent {sent} messages");
    for page in [
        "overview",
        "topics",
        "consumer",
        "message",
        "error-message-id",
    ] {
        assert!(
            shots.join(format!("{page}.png")).exists(),
            "no screenshot of {page}"
        );
    }
}
