//! Output helpers: aligned tables (mqadmin's `%-Ns` columns), JSON, times, messages.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tern_client::message::property;
use tern_client::{MessageExt, MessageQueue};

/// A table printed with columns padded to their widest cell, headers prefixed with `#`.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Self {
        Self {
            header: header.iter().map(|h| format!("#{h}")).collect(),
            rows: Vec::new(),
        }
    }

    /// A table with these column names and one row per item, `row` making its cells (so
    /// the columns and what fills them are written side by side).
    pub fn of<T>(
        header: &[&str],
        items: impl IntoIterator<Item = T>,
        row: impl FnMut(T) -> Vec<String>,
    ) -> Self {
        let mut t = Self::new(header);
        t.rows.extend(items.into_iter().map(row));
        t
    }

    /// Prints the table on stdout.
    pub fn print(&self) {
        print!("{}", self.render());
    }

    /// The table as text, one line per row, columns two spaces apart.
    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(c.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let mut s = String::new();
            for (i, c) in cells.iter().enumerate() {
                if i + 1 == cells.len() {
                    s.push_str(c);
                } else {
                    let pad = widths.get(i).copied().unwrap_or(0);
                    s.push_str(&format!("{c:<pad$}  "));
                }
            }
            s.trim_end().to_owned()
        };
        let mut out = line(&self.header);
        out.push('\n');
        for r in &self.rows {
            out.push_str(&line(r));
            out.push('\n');
        }
        out
    }
}

/// Prints a JSON value, pretty.
pub fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
    );
}

/// A reply body as JSON (`null` if it cannot be one).
pub fn to_value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// A listing's output: `doc` with `--json`, else `table` (only the one asked for is built).
pub fn print_listing(json: bool, doc: impl FnOnce() -> Value, table: impl FnOnce() -> Table) {
    if json {
        print_json(&doc());
    } else {
        table().print();
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` (UTC) for a ms timestamp; `-` for 0.
pub fn fmt_time(ms: i64) -> String {
    if ms <= 0 {
        return "-".into();
    }
    let days = ms.div_euclid(86_400_000);
    let rem = ms.rem_euclid(86_400_000);
    let (y, m, d) = tern_shell::calendar::civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{:03}",
        rem / 3_600_000,
        rem / 60_000 % 60,
        rem / 1000 % 60,
        rem % 1000
    )
}

/// A queue as Java's `MessageQueue.toString` prints it.
pub fn queue_text(q: &MessageQueue) -> String {
    format!(
        "MessageQueue [topic={}, brokerName={}, queueId={}]",
        q.topic, q.broker_name, q.queue_id
    )
}

/// The body as text (lossy UTF-8, as mqadmin prints with `-c UTF-8`).
pub fn body_text(m: &MessageExt) -> String {
    String::from_utf8_lossy(&m.body).into_owned()
}

/// Properties without the two the pull consumer adds locally.
fn stored_properties(m: &MessageExt) -> BTreeMap<&str, &str> {
    m.properties
        .iter()
        .filter(|(k, _)| k.as_str() != "MIN_OFFSET" && k.as_str() != "MAX_OFFSET")
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// A message as JSON for `--json`.
pub fn message_json(m: &MessageExt) -> Value {
    json!({
        "msgId": m.msg_id(),
        "offsetMsgId": m.offset_msg_id,
        "topic": m.topic,
        "tags": m.tags(),
        "keys": m.properties.get(property::KEYS),
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commit_log_offset,
        "reconsumeTimes": m.reconsume_times,
        "bornTimestamp": m.born_timestamp,
        "storeTimestamp": m.store_timestamp,
        "bornHost": m.born_host.to_string(),
        "storeHost": m.store_host.to_string(),
        "sysFlag": m.sys_flag,
        "flag": m.flag,
        "bodyCRC": m.body_crc,
        "properties": stored_properties(m),
        "body": body_text(m),
    })
}

/// A message the way mqadmin's queryMsgById prints it (body inline instead of a file).
pub fn message_detail(m: &MessageExt) -> String {
    let props: Vec<String> = stored_properties(m)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let rows = [
        ("OffsetID:", m.offset_msg_id.clone()),
        ("MsgId:", m.msg_id().to_owned()),
        ("Topic:", m.topic.clone()),
        ("Tags:", format!("[{}]", m.tags().unwrap_or(""))),
        (
            "Keys:",
            format!("[{}]", m.properties.get(property::KEYS).map_or("", |s| s)),
        ),
        ("Queue ID:", m.queue_id.to_string()),
        ("Queue Offset:", m.queue_offset.to_string()),
        ("CommitLog Offset:", m.commit_log_offset.to_string()),
        ("Reconsume Times:", m.reconsume_times.to_string()),
        ("Born Timestamp:", fmt_time(m.born_timestamp)),
        ("Store Timestamp:", fmt_time(m.store_timestamp)),
        ("Born Host:", m.born_host.to_string()),
        ("Store Host:", m.store_host.to_string()),
        ("System Flag:", m.sys_flag.to_string()),
        ("Properties:", format!("{{{}}}", props.join(", "))),
        ("Message Body:", body_text(m)),
    ];
    rows.iter().map(|(k, v)| format!("{k:<20} {v}\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_utc_calendar_dates() {
        assert_eq!(fmt_time(0), "-");
        assert_eq!(fmt_time(1_700_000_000_123), "2023-11-14 22:13:20.123");
        assert_eq!(fmt_time(951_782_400_000), "2000-02-29 00:00:00.000");
    }

    #[test]
    fn tables_pad_columns_to_the_widest_cell() {
        let t = Table::of(&["A", "Bee"], ["long-cell"], |a| vec![a.into(), "x".into()]);
        assert_eq!(t.render(), "#A         #Bee\nlong-cell  x\n");
    }
}
