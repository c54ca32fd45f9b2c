//! SQL92 message selectors, as RocketMQ brokers evaluate them (`expressionType` SQL92 in
//! a subscription; Java's `MessageSelector.bySql`).
//!
//! [`SqlExpression::parse`] compiles an expression once; [`SqlExpression::matches`] then
//! tests a message's properties (a stored record's properties string, see
//! [`SqlExpression::matches_properties`]). The grammar and every semantic rule follow
//! Apache RocketMQ's `filter` module, which took them from ActiveMQ's JMS selectors:
//!
//! * `AND`, `OR`, `NOT`, parentheses; `=`, `<>`, `<`, `<=`, `>`, `>=`;
//!   `[NOT] BETWEEN a AND b`; `[NOT] IN ('a', 'b')`; `IS [NOT] NULL`; `TRUE`, `FALSE`,
//!   `NULL`; `[NOT] CONTAINS` / `STARTSWITH` / `ENDSWITH 'text'`; keywords in any case;
//! * literals: `'text'` (a quote inside is `''`), integers (`5`, `5L`), floating point
//!   (`5.5`, `.5`, `1E3`); a leading `-` is the unary minus;
//! * property names: `[A-Za-z_$][A-Za-z0-9_$]*` (`TAGS`, `KEYS`, user properties). There
//!   is no `!=` and no dotted name in RocketMQ's grammar; both are refused with a hint.
//!
//! Evaluation (the `eval` module lists Java's rules): a missing property is NULL
//! and makes a comparison unknown; only a final TRUE matches; a property that cannot be
//! read as the number it is compared with makes the whole expression unmatched.
//!
//! Limits, since expressions come from the network: [`MAX_EXPRESSION_BYTES`],
//! [`MAX_DEPTH`] (which bounds the parser's and the evaluator's recursion) and
//! [`MAX_NODES`] (which bounds the work per message). No input panics.

mod build;
mod eval;
mod lexer;
mod parser;
#[cfg(test)]
mod tests;

use std::fmt;

pub use eval::EvalError;

/// Longest expression accepted, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 64 * 1024;
/// Deepest nesting accepted: parentheses, unary operators and operators inside operators.
pub const MAX_DEPTH: usize = 64;
/// Most operators and operands in one expression (an `IN` list counts once), which bounds
/// the cost of testing one message.
pub const MAX_NODES: usize = 512;

/// The expression type of SQL92 subscriptions.
pub const SQL92: &str = "SQL92";
/// The expression type of tag subscriptions (also what an empty type means).
pub const TAG: &str = "TAG";

/// Why an expression was refused, with where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    /// Byte offset of the offending token in the expression.
    pub offset: usize,
    /// The same position as a 1-based character column, as Java's parser reports it;
    /// 0 when the expression is refused as a whole.
    pub column: usize,
    /// What is wrong there.
    pub message: String,
}

impl SqlError {
    pub(crate) fn new(sql: &str, offset: usize, message: impl Into<String>) -> Self {
        let offset = offset.min(sql.len());
        let column = sql.get(..offset).map_or(offset, |s| s.chars().count()) + 1;
        Self {
            offset,
            column,
            message: message.into(),
        }
    }
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.column == 0 {
            // Refused as a whole (too long), not at a place.
            return write!(f, "invalid SQL92 expression: {}", self.message);
        }
        write!(
            f,
            "invalid SQL92 expression at column {}: {}",
            self.column, self.message
        )
    }
}

impl std::error::Error for SqlError {}

/// The outcome of testing one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// TRUE: the message matches.
    True,
    /// FALSE.
    False,
    /// NULL (unknown), or a value that is not a boolean.
    Unknown,
    /// Evaluation failed, as when Java throws; the message does not match.
    Error(EvalError),
}

impl Outcome {
    /// Whether the message is delivered: only on TRUE.
    pub fn matched(self) -> bool {
        self == Outcome::True
    }
}

/// A compiled SQL92 expression: immutable, so one (behind an `Arc`) serves every pull.
#[derive(Debug, Clone)]
pub struct SqlExpression {
    root: eval::Expr,
}

impl SqlExpression {
    /// Compiles `sql`, checking it as a Java broker does (plus: nothing may follow the
    /// expression, and the limits above).
    pub fn parse(sql: &str) -> Result<Self, SqlError> {
        if sql.len() > MAX_EXPRESSION_BYTES {
            return Err(SqlError {
                offset: MAX_EXPRESSION_BYTES,
                column: 0,
                message: format!(
                    "the expression is {} bytes long; the limit is {MAX_EXPRESSION_BYTES}",
                    sql.len()
                ),
            });
        }
        if sql.trim().is_empty() {
            return Err(SqlError::new(sql, 0, "the expression is empty"));
        }
        Ok(Self {
            root: parser::parse(sql)?,
        })
    }

    /// Tests a message whose property values `prop` looks up by name.
    pub fn evaluate<'a>(&'a self, prop: &dyn Fn(&str) -> Option<&'a str>) -> Outcome {
        match self.root.eval(prop) {
            Ok(eval::Value::Bool(true)) => Outcome::True,
            Ok(eval::Value::Bool(false)) => Outcome::False,
            Ok(_) => Outcome::Unknown,
            Err(e) => Outcome::Error(e),
        }
    }

    /// Whether a message with properties `props` (name, value) matches; when a name
    /// repeats, the last value counts, as in Java's map.
    pub fn matches(&self, props: &[(&str, &str)]) -> bool {
        self.evaluate(&|name| props.iter().rev().find(|(n, _)| *n == name).map(|p| p.1))
            .matched()
    }

    /// Tests a stored properties string (`name\x01value\x02...`), read as the engine
    /// reads it.
    pub fn evaluate_properties(&self, raw: &[u8]) -> Outcome {
        let props: Vec<(&str, &str)> = tern_engine::properties::Properties::new(raw).collect();
        self.evaluate(&|name| props.iter().rev().find(|(n, _)| *n == name).map(|p| p.1))
    }

    /// Whether a stored properties string matches.
    pub fn matches_properties(&self, raw: &[u8]) -> bool {
        self.evaluate_properties(raw).matched()
    }
}

/// Whether an `expressionType` means tags: empty or `TAG` (Java's `ExpressionType.
/// isTagType`; Tern also accepts any case, as it always has).
pub fn is_tag_type(expression_type: &str) -> bool {
    expression_type.is_empty() || expression_type.eq_ignore_ascii_case(TAG)
}

/// Whether an `expressionType` means SQL92 (any case).
pub fn is_sql92(expression_type: &str) -> bool {
    expression_type.eq_ignore_ascii_case(SQL92)
}
