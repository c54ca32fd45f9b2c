//! Retention and the disk watermarks, through the real broker binary: expired commit-log
//! segments are deleted (and pulls below the new minimum are moved on), young ones only
//! past the forcible ratio, and past the hard disk watermark sends are refused with a
//! clear answer until space is freed.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::BrokerProc;
use tern_shell::code::RequestCode;
use tern_shell::headers::{
    OffsetResponseHeader, SendMessageRequestHeader, SendMessageRequestHeaderV2,
    TopicQueueRequestHeader,
};
use tern_shell::runtime::block_on;
use tern_shell::{Connection, ConnectionConfig, RemotingCommand, ResponseCode};

/// A standalone broker with `conf` under `dir`; the gRPC endpoint (on with
/// --standalone) on a free port: tests run in parallel.
fn start(dir: &Path, conf: &str) -> BrokerProc {
    let conf_path = dir.join("broker.conf");
    std::fs::write(&conf_path, format!("grpcServerPort=0\n{conf}")).unwrap();
    BrokerProc::standalone(dir, &conf_path)
}

async fn connect(addr: &str) -> Connection {
    Connection::connect(addr, ConnectionConfig::default(), Duration::from_secs(3))
        .await
        .unwrap()
}

async fn send(conn: &Connection, topic: &str, body: Vec<u8>) -> RemotingCommand {
    let h: SendMessageRequestHeaderV2 = SendMessageRequestHeader {
        producer_group: "PG".into(),
        topic: topic.into(),
        default_topic: "TBW102".into(),
        default_topic_queue_nums: 1,
        queue_id: 0,
        sys_flag: 0,
        born_timestamp: 0,
        flag: 0,
        properties: Some("KEYS\u{1}k\u{2}".into()),
        ..Default::default()
    }
    .into();
    let req = RemotingCommand::request(RequestCode::SendMessageV2, &h).with_body(body);
    conn.request(req, Duration::from_secs(10)).await.unwrap()
}

async fn min_offset(conn: &Connection, topic: &str) -> i64 {
    let h = TopicQueueRequestHeader {
        topic: topic.into(),
        queue_id: 0,
    };
    let resp = conn
        .request(
            RemotingCommand::request(RequestCode::GetMinOffset, &h),
            Duration::from_secs(3),
        )
        .await
        .unwrap();
    resp.decode_header::<OffsetResponseHeader>().unwrap().offset
}

/// Sends 12 × 300 KiB to `topic`, which fills four of [`SMALL`]'s 1 MiB segments.
async fn fill_four_segments(conn: &Connection, topic: &str) {
    for i in 0..12 {
        let resp = send(conn, topic, vec![i as u8; 300 * 1024]).await;
        assert_eq!(
            resp.response_code(),
            ResponseCode::Success,
            "{:?}",
            resp.remark
        );
    }
}

const SMALL: &str = "mapedFileSizeCommitLog=1048576\nmapedFileSizeConsumeQueue=6000\nmaxHashSlotNum=1000\nmaxIndexNum=4000\ncleanResourceInterval=100\n";

#[test]
fn expired_segments_are_deleted_and_queues_move_their_minimum() {
    let dir = tempfile::tempdir().unwrap();
    let every_hour: Vec<String> = (0..24).map(|h| format!("{h:02}")).collect();
    let conf = format!(
        "{SMALL}fileReservedTime=0\ndeleteWhen={}\ndiskMaxUsedSpaceRatio=95\n",
        every_hour.join(";")
    );
    let b = start(dir.path(), &conf);
    block_on(async {
        let conn = connect(&b.addr).await;
        // All but the active segment may go.
        fill_four_segments(&conn, "Retained").await;
        // Retention deletes no segment past the last durable checkpoint (taken every
        // second), so the expired ones may go over more than one pass.
        let (mut min, mut segments) = (0, usize::MAX);
        // Not asserted here: the two checks below tell which part never happened.
        let _ = tern_testkit::poll_until_async(Duration::from_secs(15), async || {
            min = min_offset(&conn, "Retained").await;
            segments = std::fs::read_dir(dir.path().join("data/store/commitlog"))
                .unwrap()
                .count();
            min > 0 && segments <= 2
        })
        .await;
        assert!(min > 0, "old segments were never deleted");
        assert!(segments <= 2, "{segments} segments left");
        // A new message still lands after deletion.
        let resp = send(&conn, "Retained", b"after".to_vec()).await;
        assert_eq!(resp.response_code(), ResponseCode::Success);
    });
}

/// A small tmpfs, so filling the disk is cheap and harmless. Needs root (CI is root);
/// without it the test says so and passes vacuously only there.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(mb: u32) -> Option<Self> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mb}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

#[test]
fn past_the_max_used_ratio_only_expired_segments_go_and_past_the_forcible_ratio_the_oldest() {
    let Some(fs) = Tmpfs::mount(64) else {
        eprintln!("SKIP: cannot mount a tmpfs (not root?)");
        return;
    };
    // A fifth of the file system taken from the start: past diskMaxUsedSpaceRatio (10),
    // far below diskSpaceCleanForciblyRatio (90). Nothing expires in 72 h.
    std::fs::write(fs.0.path().join("filler"), vec![7u8; 12 << 20]).unwrap();
    let conf = format!(
        "{SMALL}timerWheelEnable=false\nfileReservedTime=72\ndiskMaxUsedSpaceRatio=10\n\
         diskSpaceCleanForciblyRatio=90\ndiskSpaceWarningLevelRatio=95\n"
    );
    let b = start(fs.0.path(), &conf);
    block_on(async {
        let conn = connect(&b.addr).await;
        fill_four_segments(&conn, "Kept").await;
        // Retention passes every 100 ms: none may take a segment that has not expired
        // (RocketMQ deletes only expired files until the forcible ratio).
        tern_shell::runtime::sleep(Duration::from_millis(1500)).await;
        assert_eq!(
            min_offset(&conn, "Kept").await,
            0,
            "an unexpired segment was deleted"
        );
        // Past the forcible ratio (lowered at run time, as an operator may): the oldest
        // segment goes, young as it is.
        let update = RemotingCommand::request_code(RequestCode::UpdateBrokerConfig)
            .with_body(b"diskSpaceCleanForciblyRatio=15\n".to_vec());
        let resp = conn.request(update, Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            resp.response_code(),
            ResponseCode::Success,
            "{:?}",
            resp.remark
        );
        tern_testkit::wait_until(
            "the oldest segment was never deleted",
            Duration::from_secs(15),
            async || min_offset(&conn, "Kept").await != 0,
        )
        .await;
    });
}

#[test]
fn writes_are_refused_past_the_disk_watermark_and_accepted_when_space_is_freed() {
    let Some(fs) = Tmpfs::mount(24) else {
        eprintln!("SKIP: cannot mount a tmpfs (not root?)");
        return;
    };
    let conf = format!("{SMALL}diskSpaceWarningLevelRatio=60\ndiskMaxUsedSpaceRatio=95\n");
    let b = start(fs.0.path(), &conf);
    block_on(async {
        let conn = connect(&b.addr).await;
        // The default timer wheel (38.7 MB) cannot be allocated on 24 MiB: the broker
        // serves without a timer, and says so, rather than not at all.
        let info = conn
            .request(
                RemotingCommand::request_code(RequestCode::GetBrokerRuntimeInfo),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        let info: tern_shell::body::KvTable = tern_shell::body::from_json(&info.body).unwrap();
        assert!(
            info.table
                .get("timerFailed")
                .is_some_and(|w| w.contains("opening the timer")),
            "{:?}",
            info.table
        );
        let resp = send(&conn, "Full", b"before".to_vec()).await;
        assert_eq!(
            resp.response_code(),
            ResponseCode::Success,
            "{:?}",
            resp.remark
        );
        // Fill the file system past 60 %.
        let filler = fs.0.path().join("filler");
        std::fs::write(&filler, vec![7u8; 16 * 1024 * 1024]).unwrap();
        let mut refused = None;
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(10), async || {
                let resp = send(&conn, "Full", b"while full".to_vec()).await;
                let full = resp.response_code() == ResponseCode::ServiceNotAvailable;
                refused = Some(resp);
                full
            })
            .await,
            "never refused: {:?}",
            refused.unwrap().remark
        );
        assert!(
            refused
                .unwrap()
                .remark
                .unwrap_or_default()
                .contains("disk is full")
        );
        std::fs::remove_file(&filler).unwrap();
        let mut remark = None;
        assert!(
            tern_testkit::poll_until_async(Duration::from_secs(10), async || {
                let resp = send(&conn, "Full", b"after".to_vec()).await;
                let accepted = resp.response_code() == ResponseCode::Success;
                remark = resp.remark;
                accepted
            })
            .await,
            "never accepted again: {remark:?}"
        );
    });
    drop(b);
}
