//! Retention, by RocketMQ's rules (`CleanCommitLogService`): commit-log segments older
//! than `fileReservedTime` are deleted at the `deleteWhen` hours, and at any hour when
//! the disk is past `diskMaxUsedSpaceRatio`; past `diskSpaceCleanForciblyRatio` the
//! oldest segment goes even if it has not expired (messages not yet consumed are lost
//! then, and retention says so); past `diskSpaceWarningLevelRatio` writes are refused
//! until space is freed.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tern_shell::runtime;

use crate::BrokerCtx;

/// Current hour of the day (UTC; RocketMQ uses local time, which servers keep in UTC).
fn hour_now() -> u8 {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ((secs / 3600) % 24) as u8
}

/// One pass: refuse or accept writes by disk use, then delete what is due.
pub fn check_once(ctx: &BrokerCtx) {
    let root = ctx.config.store_root.clone();
    let used = match tern_engine_fs::disk::disk_usage(&root) {
        Ok(u) => (u.used_ratio() * 100.0) as u8,
        Err(e) => {
            log::warn!("disk usage of {}: {e}", root.display());
            return;
        }
    };
    ctx.store
        .set_disk_full(used >= ctx.live.disk_refuse_ratio());
    let pressure = used >= ctx.live.disk_max_used_ratio();
    // RocketMQ cleans forcibly past its warning level too, where writes stop.
    let forcibly = used
        >= ctx
            .live
            .disk_clean_forcibly_ratio()
            .min(ctx.live.disk_refuse_ratio());
    let due = ctx.live.delete_at(hour_now());
    if !(pressure || forcibly || due) {
        return;
    }
    let reserved_hours = ctx.live.file_reserved_hours();
    let reserved = Duration::from_secs(reserved_hours.saturating_mul(3600));
    let dir = root.join("commitlog");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    let mut segments: Vec<(u64, SystemTime)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let base = e.file_name().to_str()?.parse::<u64>().ok()?;
            Some((base, e.metadata().ok()?.modified().ok()?))
        })
        .collect();
    segments.sort();
    // Delete up to the end of the newest expired segment (never the active one). Past the
    // forcible ratio, the oldest segment goes even if young, one per pass.
    let now = SystemTime::now();
    let seg = ctx.config.commit_log_segment_bytes;
    let mut cut = None;
    for (i, (base, modified)) in segments.iter().enumerate() {
        if i + 1 == segments.len() {
            break;
        }
        let old = now.duration_since(*modified).unwrap_or_default() >= reserved;
        if old || (forcibly && i == 0) {
            cut = Some(base + seg);
        } else {
            break;
        }
    }
    let Some(cut) = cut else { return };
    // Nothing pending goes without a trace: age or disk pressure wins over a record a
    // service still needs, and the operator is told which.
    if let Some(p) = ctx.oldest_pending().filter(|p| p.log_offset < cut) {
        log::error!(
            "retention deletes segments before {cut} ({}): records still pending are lost, \
             the oldest: {p}",
            if forcibly {
                format!("disk {used}% used")
            } else {
                format!("older than fileReservedTime={reserved_hours}h")
            }
        );
    }
    match ctx.store.delete_log_before(cut) {
        Ok(0) => {}
        Ok(n) => log::info!(
            "retention deleted {n} commit-log segment(s) before offset {cut} (disk {used}% used)"
        ),
        Err(e) => log::error!("retention: {e}"),
    }
}

/// The retention task.
pub async fn run(ctx: Arc<BrokerCtx>) {
    while !ctx.shutdown.is_triggered() {
        let c = ctx.clone();
        runtime::spawn_blocking(move || check_once(&c)).await;
        let _ = runtime::race(
            runtime::sleep(ctx.config.clean_interval),
            ctx.shutdown.wait(),
        )
        .await;
    }
}
