//! How a pull filters its queue: by tag code (read from the consume queue) or by a SQL92
//! expression over the stored record's properties (`expressionType` SQL92, RocketMQ's
//! `ExpressionMessageFilter`).
//!
//! SQL92 expressions are compiled once per consumer group and topic and kept while the
//! text stays the same, so a pull never parses and a message costs one evaluation. The
//! cache is bounded ([`MAX_CACHED`]); an evicted entry is only compiled again.
//!
//! `enablePropertyFilter` (Tern's default: on; RocketMQ's: off) decides whether SQL92
//! subscriptions are served; when off they are refused with RocketMQ's code and remark.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tern_shell::sync::MutexExt;

use tern_engine::hash::java_string_hash;
use tern_engine::record::RecordView;
use tern_engine_fs::ReadMode;

use crate::store::WouldBlock;
use tern_shell::body::{HeartbeatData, SubscriptionData};
use tern_shell::filter::{SqlError, SqlExpression, is_sql92, is_tag_type};
use tern_shell::{Refusal, ResponseCode};

/// Most (group, topic) expressions kept compiled.
pub const MAX_CACHED: usize = 4096;
/// Longest expression quoted back in a remark.
const MAX_QUOTED_CHARS: usize = 200;

/// What a pull keeps.
#[derive(Debug, Clone)]
pub enum PullFilter {
    /// Everything (`*`).
    All,
    /// Messages whose consume-queue tag code is one of these.
    Tags(Vec<i32>),
    /// Messages whose stored properties make the expression TRUE.
    Sql(Arc<SqlExpression>),
}

impl PullFilter {
    /// The tag codes to keep, for the consume-queue scan; `None` keeps every entry.
    pub fn tag_codes(&self) -> Option<&[i32]> {
        match self {
            Self::Tags(codes) => Some(codes),
            _ => None,
        }
    }

    /// The expression that stored records must match, if any.
    pub fn sql(&self) -> Option<&SqlExpression> {
        match self {
            Self::Sql(e) => Some(e),
            _ => None,
        }
    }

    /// Reads up to `max_msgs` records of `topic`/`queue_id` from `offset` that pass this
    /// filter; `None` for a queue never written. May wait for the disk: a request on an
    /// executor thread reads with [`PullFilter::read_off_executor`].
    pub fn read(
        &self,
        store: &crate::store::StoreService,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max_msgs: u32,
    ) -> Option<crate::store::Pulled> {
        let read = self.read_mode(store, (topic, queue_id), (offset, max_msgs), ReadMode::Wait);
        // A waiting read never answers WouldBlock.
        read.unwrap_or(None)
    }

    /// [`PullFilter::read`] for a request on an executor thread: from the page cache
    /// there, and on a blocking thread only when that would wait for the disk, so the
    /// requests queued behind it on this thread do not wait for its disk (a consumer
    /// catching up on a cold backlog). The one way pulls and POPs read a queue.
    pub async fn read_off_executor(
        &self,
        store: &Arc<crate::store::StoreService>,
        topic: &str,
        queue_id: i32,
        offset: u64,
        max_msgs: u32,
    ) -> Option<crate::store::Pulled> {
        match self.read_mode(
            store,
            (topic, queue_id),
            (offset, max_msgs),
            ReadMode::Cached,
        ) {
            Ok(p) => p,
            Err(WouldBlock) => {
                let (store, filter, topic) = (store.clone(), self.clone(), topic.to_owned());
                tern_shell::runtime::spawn_blocking(move || {
                    filter.read(&store, &topic, queue_id, offset, max_msgs)
                })
                .await
            }
        }
    }

    fn read_mode(
        &self,
        store: &crate::store::StoreService,
        queue: (&str, i32),
        from: (u64, u32),
        mode: ReadMode,
    ) -> Result<Option<crate::store::Pulled>, WouldBlock> {
        let tags = self
            .tag_codes()
            .map(|codes| move |tag: i64| codes.contains(&(tag as i32)));
        let tags_ref: Option<&dyn Fn(i64) -> bool> =
            tags.as_ref().map(|f| f as &dyn Fn(i64) -> bool);
        let sql = self
            .sql()
            .map(|e| move |record: &[u8]| record_matches(e, record));
        let sql_ref: Option<crate::store::RecordFilter<'_>> =
            sql.as_ref().map(|f| f as crate::store::RecordFilter<'_>);
        store.read_queue(queue, from, tags_ref, sql_ref, mode)
    }
}

/// Whether a stored record matches `expr`. A record that does not parse cannot be
/// evaluated, so it does not match (Java logs the error and skips it the same way).
pub fn record_matches(expr: &SqlExpression, record: &[u8]) -> bool {
    match RecordView::parse(record) {
        Ok(r) => expr.matches_properties(r.properties()),
        Err(e) => {
            log::debug!("SQL92 filter skips an unreadable record: {e}");
            false
        }
    }
}

#[derive(Debug)]
struct Compiled {
    expression: String,
    result: Result<Arc<SqlExpression>, SqlError>,
}

/// Compiled SQL92 expressions by (group, topic).
#[derive(Debug, Default)]
pub struct Filters {
    cache: Mutex<HashMap<(String, String), Compiled>>,
}

impl Filters {
    /// The compiled form of `expression` for `group` on `topic`, and whether it was
    /// compiled by this call (callers log only then).
    pub fn compile(
        &self,
        group: &str,
        topic: &str,
        expression: &str,
    ) -> (Result<Arc<SqlExpression>, SqlError>, bool) {
        let key = (group.to_owned(), topic.to_owned());
        {
            let cache = self.lock();
            if let Some(c) = cache.get(&key).filter(|c| c.expression == expression) {
                return (c.result.clone(), false);
            }
        }
        // Parsed outside the lock: it is bounded, but other pulls need not wait for it.
        let result = SqlExpression::parse(expression).map(Arc::new);
        let mut cache = self.lock();
        if cache.len() >= MAX_CACHED && !cache.contains_key(&key) {
            if let Some(victim) = cache.keys().next().cloned() {
                cache.remove(&victim);
            }
        }
        cache.insert(
            key,
            Compiled {
                expression: expression.to_owned(),
                result: result.clone(),
            },
        );
        (result, true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Compiled>> {
        self.cache.guard()
    }

    /// The filter for a pull of `group` under `sub`, or why it is refused: SQL92 while
    /// `enablePropertyFilter` is off (RocketMQ's SYSTEM_ERROR and remark), an expression
    /// that does not parse or an unknown expression type (SUBSCRIPTION_PARSE_FAILED).
    /// An unknown type is refused here before the switch is looked at;
    /// [`check_subscription`] keeps `checkClientConfig`'s order (the switch first), so
    /// folding the two would change one of their remarks.
    pub fn for_pull(
        &self,
        enable_property_filter: bool,
        group: &str,
        sub: SubscriptionData,
    ) -> Result<PullFilter, Refusal> {
        let kind = sub.expression_type.trim().to_owned();
        if is_tag_type(&kind) {
            // Codes from the expression itself: the C++ client's codeSet is zeros, and
            // `*` means everything whatever tagsSet says (Java's ExpressionMessageFilter).
            let tags = SubscriptionData::parse_tags(&sub.sub_string);
            if tags.is_empty() {
                return Ok(PullFilter::All);
            }
            return Ok(PullFilter::Tags(
                tags.iter().map(|t| java_string_hash(t)).collect(),
            ));
        }
        if !is_sql92(&kind) {
            return Err(Refusal::new(
                ResponseCode::SubscriptionParseFailed,
                format!(
                    "parse the consumer's subscription failed: expression type {kind} is not supported, use TAG or SQL92"
                ),
            ));
        }
        if !enable_property_filter {
            return Err(Refusal::new(
                ResponseCode::SystemError,
                format!("The broker does not support consumer to filter message by {kind}"),
            ));
        }
        match self.compile(group, &sub.topic, &sub.sub_string).0 {
            Ok(e) => Ok(PullFilter::Sql(e)),
            Err(e) => Err(Refusal::new(
                ResponseCode::SubscriptionParseFailed,
                parse_failed_remark(&sub.sub_string, &e),
            )),
        }
    }

    /// Compiles the SQL92 subscriptions of a heartbeat ahead of their pulls, and says in
    /// the log (once per expression) which ones will be refused.
    pub fn note_heartbeat(&self, enable_property_filter: bool, hb: &HeartbeatData) {
        for c in &hb.consumer_data_set {
            for s in c
                .subscription_data_set
                .iter()
                .filter(|s| is_sql92(s.expression_type.trim()))
            {
                let (g, t) = (&c.group_name, &s.topic);
                match self.compile(g, t, &s.sub_string) {
                    (_, false) => {}
                    (Err(e), true) => log::warn!(
                        "consumer group {g} subscribes to {t} with an invalid SQL92 expression; its pulls are refused with code 23: {}",
                        parse_failed_remark(&s.sub_string, &e)
                    ),
                    (Ok(_), true) if !enable_property_filter => log::warn!(
                        "consumer group {g} filters {t} with SQL92 but enablePropertyFilter=false: its pulls are refused"
                    ),
                    (Ok(_), true) => {
                        log::info!(
                            "consumer group {g} filters {t} with SQL92: {}",
                            s.sub_string
                        )
                    }
                }
            }
        }
    }
}

/// The remark of a SUBSCRIPTION_PARSE_FAILED answer: Java's words, then where and why.
pub fn parse_failed_remark(expression: &str, e: &SqlError) -> String {
    let quoted: String = expression.chars().take(MAX_QUOTED_CHARS).collect();
    let more = if quoted.len() < expression.len() {
        "..."
    } else {
        ""
    };
    format!("parse the consumer's subscription failed: {e}, in \"{quoted}{more}\"")
}

/// CHECK_CLIENT_CONFIG's verdict on one subscription (RocketMQ's `checkClientConfig`):
/// `None` when it is accepted.
pub fn check_subscription(enable_property_filter: bool, sub: &SubscriptionData) -> Option<Refusal> {
    let kind = sub.expression_type.trim();
    if is_tag_type(kind) {
        return None;
    }
    if !enable_property_filter {
        return Some(Refusal::new(
            ResponseCode::SystemError,
            format!("The broker does not support consumer to filter message by {kind}"),
        ));
    }
    let error = if is_sql92(kind) {
        SqlExpression::parse(&sub.sub_string)
            .err()
            .map(|e| parse_failed_remark(&sub.sub_string, &e))
    } else {
        Some(format!(
            "expression type {kind} is not supported, use TAG or SQL92"
        ))
    };
    error.map(|remark| Refusal::new(ResponseCode::SubscriptionParseFailed, remark))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(kind: &str, expr: &str) -> SubscriptionData {
        SubscriptionData {
            topic: "T".into(),
            sub_string: expr.into(),
            expression_type: kind.into(),
            ..SubscriptionData::default()
        }
    }

    #[test]
    fn expressions_are_compiled_once_per_group_topic_and_text() {
        let f = Filters::default();
        let (a, fresh) = f.compile("g", "T", "a > 1");
        assert!(fresh);
        let (b, fresh) = f.compile("g", "T", "a > 1");
        assert!(!fresh);
        assert!(Arc::ptr_eq(&a.unwrap(), &b.unwrap()));
        assert!(
            f.compile("g", "T", "a > 2").1,
            "a changed expression is recompiled"
        );
        assert!(f.compile("g2", "T", "a > 2").1);
        assert!(f.compile("g", "T", "a >").0.is_err());
        assert!(!f.compile("g", "T", "a >").1, "failures are cached too");
    }

    #[test]
    fn the_cache_is_bounded() {
        let f = Filters::default();
        for i in 0..MAX_CACHED + 10 {
            let _ = f.compile(&format!("g{i}"), "T", "a = 1");
        }
        assert_eq!(f.lock().len(), MAX_CACHED);
    }

    #[test]
    fn pull_filters_by_expression_type() {
        let f = Filters::default();
        assert!(matches!(
            f.for_pull(true, "g", sub("", "*")),
            Ok(PullFilter::All)
        ));
        let Ok(PullFilter::Tags(codes)) = f.for_pull(true, "g", sub("TAG", "A || B")) else {
            panic!("tags");
        };
        assert_eq!(codes, vec![java_string_hash("A"), java_string_hash("B")]);
        assert!(matches!(
            f.for_pull(true, "g", sub("SQL92", "a > 1")),
            Ok(PullFilter::Sql(_))
        ));
        let r = f.for_pull(true, "g", sub("SQL92", "a >")).unwrap_err();
        assert_eq!(r.code(), ResponseCode::SubscriptionParseFailed);
        assert!(
            r.remark().contains("column 4") && r.remark().contains("\"a >\""),
            "{}",
            r.remark()
        );
        let r = f.for_pull(false, "g", sub("SQL92", "a > 1")).unwrap_err();
        assert_eq!(r.code(), ResponseCode::SystemError);
        assert_eq!(
            r.remark(),
            "The broker does not support consumer to filter message by SQL92"
        );
        let r = f.for_pull(true, "g", sub("CLASS", "x")).unwrap_err();
        assert_eq!(r.code(), ResponseCode::SubscriptionParseFailed);
    }

    #[test]
    fn check_client_config_verdicts() {
        assert_eq!(check_subscription(false, &sub("TAG", "A")), None);
        assert_eq!(check_subscription(true, &sub("SQL92", "a = 1")), None);
        let r = check_subscription(true, &sub("SQL92", "a = ")).unwrap();
        assert_eq!(r.code(), ResponseCode::SubscriptionParseFailed);
        let r = check_subscription(false, &sub("SQL92", "a = 1")).unwrap();
        assert_eq!(r.code(), ResponseCode::SystemError);
    }
}
