//! RocketMQ's daily totals in GET_BROKER_RUNTIME_INFO (its `BrokerStats`): messages put
//! and got since start, without system topics (`msgPutTotalTodayNow`,
//! `msgGetTotalTodayNow`), and those totals as they were at the last two midnights
//! (`...TodayMorning`, `...YesterdayMorning`), so "today" is `TodayNow - TodayMorning`
//! as mqadmin's clusterList computes it. Midnight is UTC's (see `retention`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tern_shell::runtime::now_ms;

use super::Metrics;
use crate::BrokerCtx;

/// The totals at the last two midnights.
#[derive(Debug, Default)]
pub struct DailyTotals {
    put_today_morning: AtomicU64,
    put_yesterday_morning: AtomicU64,
    get_today_morning: AtomicU64,
    get_yesterday_morning: AtomicU64,
}

/// RocketMQ's `TopicValidator.isSystemTopic` for what Tern stores: the `rmq_sys_`
/// prefix (any case) and the fixed internal topics.
pub fn is_system_topic(topic: &str) -> bool {
    topic
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("rmq_sys_"))
        || matches!(
            topic,
            "SCHEDULE_TOPIC_XXXX"
                | "TBW102"
                | "BenchmarkTest"
                | "SELF_TEST_TOPIC"
                | "OFFSET_MOVED_EVENT"
                | "TRANS_CHECK_MAX_TIME_TOPIC"
        )
}

impl DailyTotals {
    /// Midnight: today's morning becomes yesterday's, now becomes today's.
    fn record(&self, put: u64, get: u64) {
        let roll = |yesterday: &AtomicU64, today: &AtomicU64, now: u64| {
            yesterday.store(today.load(Ordering::Relaxed), Ordering::Relaxed);
            today.store(now, Ordering::Relaxed);
        };
        roll(&self.put_yesterday_morning, &self.put_today_morning, put);
        roll(&self.get_yesterday_morning, &self.get_today_morning, get);
    }

    /// The six runtime-info entries.
    pub fn fill(&self, m: &Metrics, t: &mut BTreeMap<String, String>) {
        let (put, get) = m.totals_without_system_topics();
        let mut put_entry = |k: &str, v: u64| {
            t.insert(k.to_owned(), v.to_string());
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        put_entry("msgPutTotalTodayNow", put);
        put_entry("msgPutTotalTodayMorning", load(&self.put_today_morning));
        put_entry(
            "msgPutTotalYesterdayMorning",
            load(&self.put_yesterday_morning),
        );
        put_entry("msgGetTotalTodayNow", get);
        put_entry("msgGetTotalTodayMorning", load(&self.get_today_morning));
        put_entry(
            "msgGetTotalYesterdayMorning",
            load(&self.get_yesterday_morning),
        );
    }
}

/// Milliseconds from `now_ms` to the next UTC midnight (at least 1).
fn until_midnight_ms(now_ms: i64) -> u64 {
    const DAY: i64 = 86_400_000;
    (DAY - now_ms.rem_euclid(DAY)).max(1) as u64
}

/// The task recording the totals at every UTC midnight.
pub async fn run(ctx: Arc<BrokerCtx>) {
    while !ctx.shutdown.is_triggered() {
        let wait = Duration::from_millis(until_midnight_ms(now_ms()));
        if !ctx.shutdown.sleep(wait).await {
            let (put, get) = ctx.metrics.totals_without_system_topics();
            ctx.metrics.daily.record(put, get);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midnight_rolls_today_into_yesterday() {
        let m = Metrics::default();
        m.message_in("T", super::super::MessageType::Normal, 10);
        m.message_in("rmq_sys_wheel_timer", super::super::MessageType::Normal, 10);
        m.messages_out("T", "g", 3, 30);
        assert_eq!(m.totals_without_system_topics(), (1, 3));
        m.daily.record(1, 3);
        m.message_in("T", super::super::MessageType::Delay, 10);
        m.daily.record(2, 3);
        let mut t = BTreeMap::new();
        m.daily.fill(&m, &mut t);
        assert_eq!(t["msgPutTotalTodayNow"], "2");
        assert_eq!(t["msgPutTotalTodayMorning"], "2");
        assert_eq!(t["msgPutTotalYesterdayMorning"], "1");
        assert_eq!(t["msgGetTotalTodayNow"], "3");
        assert_eq!(until_midnight_ms(86_400_000 * 3 + 1_000), 86_399_000);
        assert_eq!(until_midnight_ms(86_400_000 * 3), 86_400_000);
        assert!(is_system_topic("RMQ_SYS_TRANS_HALF_TOPIC") && !is_system_topic("rmq"));
    }
}
