//! What a consumer subscribes with (Java's `MessageSelector`): a tag expression, filtered
//! by the broker on tag hashes and here again on tag strings, or an SQL92 expression over
//! message properties, filtered by the broker only.
//!
//! As in Java, the client does not parse SQL92 itself: the broker is the judge (its
//! grammar may be newer). A consumer asks the broker at start (CHECK_CLIENT_CONFIG), so a
//! bad expression or a broker with `enablePropertyFilter=false` fails `start` with the
//! broker's code and remark instead of failing every pull.

use tern_shell::body::{CheckClientRequestBody, SubscriptionData, to_json};
use tern_shell::{RemotingCommand, RequestCode};

use crate::error::{ClientError, Result};
use crate::instance::ClientInstance;
use crate::producer::java_hash;

/// How a selector's expression is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpressionType {
    /// `*` or `TagA || TagB`.
    Tag,
    /// An SQL92 condition on properties, e.g. `a BETWEEN 3 AND 6 AND TAGS IN ('A','B')`.
    Sql92,
}

impl ExpressionType {
    /// The wire name (`expressionType`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Tag => tern_shell::filter::TAG,
            Self::Sql92 => tern_shell::filter::SQL92,
        }
    }
}

/// A subscription's filter. A `&str` or `String` converts to a tag selector, so
/// `subscribe(topic, "A || B")` keeps working.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageSelector {
    kind: ExpressionType,
    expression: String,
}

impl MessageSelector {
    /// A tag expression: `*` (everything) or tags joined by `||` (Java's `byTag`).
    pub fn tag(expression: impl Into<String>) -> Self {
        Self {
            kind: ExpressionType::Tag,
            expression: expression.into(),
        }
    }

    /// An SQL92 expression on message properties (Java's `bySql`); the broker must have
    /// `enablePropertyFilter=true`.
    pub fn sql(expression: impl Into<String>) -> Self {
        Self {
            kind: ExpressionType::Sql92,
            expression: expression.into(),
        }
    }

    /// Every message.
    pub fn all() -> Self {
        Self::tag("*")
    }

    /// The expression text.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// How the expression is read.
    pub fn expression_type(&self) -> ExpressionType {
        self.kind
    }

    /// Refuses what Java refuses before sending anything: an empty SQL92 expression.
    pub fn check(&self) -> Result<()> {
        if self.kind == ExpressionType::Sql92 && self.expression.trim().is_empty() {
            return Err(ClientError::InvalidMessage(
                "an SQL92 selector needs an expression".into(),
            ));
        }
        Ok(())
    }

    /// The subscription as Java builds it (`FilterAPI.build`): tags and their hash codes
    /// for a tag expression, the text alone for SQL92.
    pub fn subscription(&self, topic: &str, version: i64) -> SubscriptionData {
        match self.kind {
            ExpressionType::Tag => {
                let tags = SubscriptionData::parse_tags(&self.expression);
                SubscriptionData {
                    topic: topic.to_owned(),
                    sub_string: if tags.is_empty() {
                        "*".into()
                    } else {
                        self.expression.trim().to_owned()
                    },
                    code_set: tags.iter().map(|t| java_hash(t)).collect(),
                    tags_set: tags,
                    sub_version: version,
                    expression_type: ExpressionType::Tag.name().into(),
                    class_filter_mode: false,
                }
            }
            ExpressionType::Sql92 => SubscriptionData {
                topic: topic.to_owned(),
                sub_string: self.expression.clone(),
                sub_version: version,
                expression_type: ExpressionType::Sql92.name().into(),
                ..SubscriptionData::default()
            },
        }
    }
}

impl From<&str> for MessageSelector {
    fn from(expression: &str) -> Self {
        Self::tag(expression)
    }
}

impl From<String> for MessageSelector {
    fn from(expression: String) -> Self {
        Self::tag(expression)
    }
}

impl From<&String> for MessageSelector {
    fn from(expression: &String) -> Self {
        Self::tag(expression.as_str())
    }
}

/// Asks a broker serving `sub.topic` whether it accepts `sub` (Java's
/// `checkClientInBroker`); tag subscriptions need no question. A refusal is the broker's
/// error (code 23 for an expression that does not parse, with the column; code 1 when
/// the broker does not filter by properties). No route or no answer is not a refusal:
/// the pulls will tell.
pub(crate) async fn check_in_broker(
    client: &ClientInstance,
    group: &str,
    sub: &SubscriptionData,
) -> Result<()> {
    if tern_shell::filter::is_tag_type(&sub.expression_type) {
        return Ok(());
    }
    let route = match client.topic_route(&sub.topic).await {
        Ok(r) => r,
        Err(e) => {
            log::info!("cannot check the subscription to {} yet: {e}", sub.topic);
            return Ok(());
        }
    };
    let Some(addr) = route
        .broker_datas
        .iter()
        .find_map(|b| client.any_addr(&b.broker_name))
    else {
        return Ok(());
    };
    let body = CheckClientRequestBody {
        client_id: client.client_id().to_owned(),
        group: group.to_owned(),
        subscription_data: Some(sub.clone()),
    };
    let cmd =
        RemotingCommand::request_code(RequestCode::CheckClientConfig).with_body(to_json(&body));
    match client.invoke_ok(&addr, cmd).await {
        Ok(_) => Ok(()),
        Err(e @ ClientError::Broker { .. }) => Err(e),
        Err(e) => {
            log::warn!("checking the subscription to {} at {addr}: {e}", sub.topic);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_are_built_as_java_builds_them() {
        let s = MessageSelector::tag(" A || B ").subscription("T", 7);
        assert_eq!(s.sub_string, "A || B");
        assert_eq!(s.tags_set, vec!["A", "B"]);
        assert_eq!(s.code_set, vec![java_hash("A"), java_hash("B")]);
        assert_eq!(s.expression_type, "TAG");
        let s = MessageSelector::from("").subscription("T", 7);
        assert_eq!(s.sub_string, "*");
        let s = MessageSelector::sql("a > 5 AND TAGS IN ('A')").subscription("T", 7);
        assert_eq!(s.sub_string, "a > 5 AND TAGS IN ('A')");
        assert_eq!(s.expression_type, "SQL92");
        assert!(s.tags_set.is_empty() && s.code_set.is_empty());
        assert_eq!(s.sub_version, 7);
        assert!(MessageSelector::sql(" ").check().is_err());
        assert!(MessageSelector::tag("").check().is_ok());
    }
}
