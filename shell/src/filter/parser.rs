//! A parser for RocketMQ's selector grammar (`SelectorParser.jj`): precedence climbing
//! over the grammar's levels, literals checked as Java's `ConstantExpression.
//! createFromDecimal` / `createFloat` check them, conditions as `SelectorParser.
//! asBooleanExpression` does. The nodes, and the checks Java's expression factories make
//! on their operands, are built in `build`.
//!
//! Precedence, loosest first (as in the grammar):
//!
//! | level | operators |
//! |---|---|
//! | or | `OR` |
//! | and | `AND` |
//! | equality | `=`, `<>`, `IS [NOT] NULL` |
//! | comparison | `<`, `<=`, `>`, `>=`, `[NOT] BETWEEN`, `[NOT] IN`, `[NOT] CONTAINS`... |
//! | unary | `+`, `-`, `NOT` |
//! | primary | literal, property, `( ... )` |
//!
//! So `NOT` binds tighter than any comparison: `NOT a = 1` is `(NOT a) = 1`, which is
//! never TRUE; write `NOT (a = 1)`. That is JMS's (and so RocketMQ's) grammar.
//!
//! One deliberate difference: Java stops at the end of the first complete expression and
//! ignores whatever follows (`a = 1 b = 2` filters on `a = 1`, `a = 007` on `a = 0`).
//! Here anything after the expression is an error, so a typo cannot silently widen a
//! filter.

use super::eval::{Const, Expr};
use super::lexer::{Tok, Token, clip, tokenize};
use super::{MAX_DEPTH, MAX_NODES, SqlError};

/// Operator levels, loosest first (see the table above).
const OR: u8 = 1;
const AND: u8 = 2;
const EQUALITY: u8 = 3;
const COMPARISON: u8 = 4;

/// A prefix operator.
#[derive(Clone, Copy)]
enum Prefix {
    Plus,
    Minus,
    Not,
}

/// An expression being built, with what the limits need.
pub(super) struct Node {
    pub(super) e: Expr,
    /// Byte offsets of its first token and just past its last, for error messages.
    pub(super) at: usize,
    pub(super) end: usize,
    /// Levels of nodes, this one included.
    pub(super) depth: usize,
    /// Nodes in the subtree, this one included.
    pub(super) size: usize,
}

pub(super) struct Parser<'a> {
    sql: &'a str,
    toks: Vec<Token<'a>>,
    pos: usize,
    /// Current recursion depth (parentheses and unary operators).
    depth: usize,
    /// End of the last token consumed.
    pub(super) prev_end: usize,
}

/// Parses and checks `sql`; the result is always a boolean expression.
pub(super) fn parse(sql: &str) -> Result<Expr, SqlError> {
    let mut p = Parser {
        sql,
        toks: tokenize(sql)?,
        pos: 0,
        depth: 0,
        prev_end: 0,
    };
    let n = p.expr(OR)?;
    let t = p.peek();
    if t.tok != Tok::Eof {
        let at = t.at;
        let what = t.tok.describe();
        return Err(p.err(
            at,
            format!("unexpected {what} after a complete expression: expected AND, OR or the end"),
        ));
    }
    Ok(p.as_boolean(n)?.e)
}

impl<'a> Parser<'a> {
    pub(super) fn err(&self, at: usize, msg: impl Into<String>) -> SqlError {
        SqlError::new(self.sql, at, msg)
    }

    pub(super) fn peek(&self) -> &Token<'a> {
        // `tokenize` always ends with Eof, and `bump` never moves past it.
        &self.toks[self.pos.min(self.toks.len() - 1)]
    }

    pub(super) fn peek2(&self) -> &Tok<'a> {
        &self.toks[(self.pos + 1).min(self.toks.len() - 1)].tok
    }

    pub(super) fn bump(&mut self) -> Token<'a> {
        let t = self.peek().clone();
        if t.tok != Tok::Eof {
            self.pos += 1;
        }
        self.prev_end = t.end;
        t
    }

    pub(super) fn expect(&mut self, want: &Tok<'_>, what: &str) -> Result<Token<'a>, SqlError> {
        let t = self.bump();
        if &t.tok == want {
            Ok(t)
        } else {
            Err(self.err(t.at, format!("expected {what}, found {}", t.tok.describe())))
        }
    }

    /// Counts one level of recursion; the parser's stack is bounded by [`MAX_DEPTH`].
    fn enter(&mut self, at: usize) -> Result<(), SqlError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(at, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        Ok(())
    }

    /// Depth and size of a node over children of these (depth, size), within the limits.
    pub(super) fn limits(
        &self,
        at: usize,
        kids: &[(usize, usize)],
    ) -> Result<(usize, usize), SqlError> {
        let depth = 1 + kids.iter().map(|k| k.0).max().unwrap_or(0);
        let size = 1 + kids.iter().map(|k| k.1).sum::<usize>();
        self.check(at, depth, size)?;
        Ok((depth, size))
    }

    /// Refuses a tree deeper than [`MAX_DEPTH`] (evaluation recurses once per level) or
    /// larger than [`MAX_NODES`].
    pub(super) fn check(&self, at: usize, depth: usize, size: usize) -> Result<(), SqlError> {
        if depth > MAX_DEPTH {
            return Err(self.err(at, format!("nested more than {MAX_DEPTH} levels deep")));
        }
        if size > MAX_NODES {
            return Err(self.err(
                at,
                format!("too complex: more than {MAX_NODES} operators and operands"),
            ));
        }
        Ok(())
    }

    /// A node over `kids` that ends at the last token consumed.
    pub(super) fn node(
        &self,
        at: usize,
        e: Expr,
        kids: &[(usize, usize)],
    ) -> Result<Node, SqlError> {
        let (depth, size) = self.limits(at, kids)?;
        Ok(Node {
            e,
            at,
            end: self.prev_end,
            depth,
            size,
        })
    }

    pub(super) fn leaf(&self, at: usize, e: Expr) -> Node {
        Node {
            e,
            at,
            end: self.prev_end,
            depth: 1,
            size: 1,
        }
    }

    /// Java's `asBooleanExpression`: a boolean stays, a property is cast, the rest fails.
    pub(super) fn as_boolean(&self, n: Node) -> Result<Node, SqlError> {
        match n.e {
            Expr::Property(name) => Ok(Node {
                e: Expr::BoolCast(name),
                ..n
            }),
            ref e if e.is_boolean() => Ok(n),
            _ => Err(self.err(
                n.at,
                format!(
                    "{} is not a condition: compare it (=, <>, >, IS NULL...)",
                    self.text(&n)
                ),
            )),
        }
    }

    /// The source text of a node, quoted, for messages.
    pub(super) fn text(&self, n: &Node) -> String {
        let s = self.sql.get(n.at..n.end).unwrap_or("");
        format!("`{}`", clip(s))
    }

    /// The level of the operator at the cursor, if one continues an expression.
    fn level(&self) -> Option<u8> {
        match self.peek().tok {
            Tok::Or => Some(OR),
            Tok::And => Some(AND),
            Tok::Eq | Tok::Ne | Tok::Is => Some(EQUALITY),
            Tok::Gt
            | Tok::Ge
            | Tok::Lt
            | Tok::Le
            | Tok::Contains
            | Tok::StartsWith
            | Tok::EndsWith
            | Tok::Between
            | Tok::In => Some(COMPARISON),
            // `NOT` continues an expression only as `NOT BETWEEN`, `NOT IN`, `NOT CONTAINS`...
            Tok::Not => matches!(
                self.peek2(),
                Tok::Contains | Tok::StartsWith | Tok::EndsWith | Tok::Between | Tok::In
            )
            .then_some(COMPARISON),
            _ => None,
        }
    }

    /// An expression whose operators are all at `min` or tighter: precedence climbing
    /// over the grammar's levels, left-associative as its loops are. Nesting recurses
    /// through this, [`Self::infix`], [`Self::unary`] and [`Self::primary`] only, so they
    /// keep small frames and leave building nodes and error messages to helpers.
    fn expr(&mut self, min: u8) -> Result<Node, SqlError> {
        let mut left = self.unary()?;
        while let Some(level) = self.level().filter(|l| *l >= min) {
            left = self.infix(level, left)?;
        }
        Ok(left)
    }

    /// The operator at the cursor (of `level`), its right side, and the node they make
    /// with `left`. Only the right operand's parse is on the recursion path here; the
    /// rest is in [`Self::binary`] and [`Self::postfix`].
    fn infix(&mut self, level: u8, left: Node) -> Result<Node, SqlError> {
        let op = self.bump().tok;
        let right = match op {
            Tok::Or | Tok::And => self.expr(level + 1)?,
            Tok::Eq | Tok::Ne => self.expr(COMPARISON)?,
            Tok::Gt | Tok::Ge | Tok::Lt | Tok::Le => self.unary()?,
            _ => return self.postfix(op, left),
        };
        self.binary(op, left, right)
    }

    fn binary(&self, op: Tok<'_>, left: Node, right: Node) -> Result<Node, SqlError> {
        match op {
            Tok::Or | Tok::And => self.logic(op == Tok::Or, left, right),
            Tok::Eq | Tok::Ne => self.equal(op == Tok::Ne, left, right),
            _ => self.compare(op, left, right),
        }
    }

    /// The operators whose right side is not an expression of the next level: `IS
    /// [NOT] NULL`, `[NOT] BETWEEN`, `[NOT] IN`, `[NOT] CONTAINS`...
    fn postfix(&mut self, op: Tok<'_>, left: Node) -> Result<Node, SqlError> {
        match op {
            Tok::Is => self.is_null(left),
            Tok::Between => self.between(left, false),
            Tok::In => self.in_list(left, false),
            Tok::Not => match self.bump().tok {
                Tok::Between => self.between(left, true),
                Tok::In => self.in_list(left, true),
                t => self.text_op(t, true, left),
            },
            t => self.text_op(t, false, left),
        }
    }

    pub(super) fn string_literal(&mut self, after: &Tok<'_>) -> Result<String, SqlError> {
        let t = self.bump();
        match t.tok {
            Tok::Str(s) => Ok(s),
            other => Err(self.err(
                t.at,
                format!(
                    "expected a string in single quotes after {}, found {}",
                    after.describe(),
                    other.describe()
                ),
            )),
        }
    }

    pub(super) fn unary(&mut self) -> Result<Node, SqlError> {
        let at = self.peek().at;
        let op = match self.peek().tok {
            Tok::Plus => Prefix::Plus,
            Tok::Minus => Prefix::Minus,
            Tok::Not => Prefix::Not,
            _ => return self.primary(),
        };
        self.bump();
        self.enter(at)?;
        let inner = self.unary();
        self.depth -= 1;
        self.prefix(op, at, inner?)
    }

    /// `+x` (which is `x` itself, as in Java), `-x`, `NOT x`.
    fn prefix(&self, op: Prefix, at: usize, inner: Node) -> Result<Node, SqlError> {
        let kids = [(inner.depth, inner.size)];
        match op {
            Prefix::Plus => Ok(Node { at, ..inner }),
            Prefix::Minus => self.node(at, Expr::Negate(Box::new(inner.e)), &kids),
            Prefix::Not => {
                let inner = self.as_boolean(inner)?;
                self.node(at, Expr::Not(Box::new(inner.e)), &kids)
            }
        }
    }

    fn primary(&mut self) -> Result<Node, SqlError> {
        if self.peek().tok != Tok::LParen {
            let t = self.bump();
            return self.operand(t);
        }
        let at = self.bump().at;
        self.enter(at)?;
        let inner = self.expr(OR);
        self.depth -= 1;
        let inner = inner?;
        self.expect(&Tok::RParen, "')'")?;
        // Parentheses leave no node: `(a) IN (...)` is still a property.
        Ok(Node {
            at,
            end: self.prev_end,
            ..inner
        })
    }

    /// A literal or a property.
    fn operand(&self, t: Token<'_>) -> Result<Node, SqlError> {
        let c = match t.tok {
            Tok::Str(s) => Const::Str(s.into()),
            Tok::Decimal(text) => self.decimal(t.at, text)?,
            Tok::Float(text) => self.float(t.at, text)?,
            Tok::True => Const::Bool(true),
            Tok::False => Const::Bool(false),
            Tok::Null => Const::Null,
            Tok::Ident(name) => return Ok(self.leaf(t.at, Expr::Property(name.into()))),
            other => {
                return Err(self.err(
                    t.at,
                    format!(
                        "expected a value (a property, a literal or '('), found {}",
                        other.describe()
                    ),
                ));
            }
        };
        Ok(self.leaf(t.at, Expr::Const(c)))
    }

    /// Java's `createFromDecimal`: a `long` (suffix `L` allowed), narrowed to `int` when
    /// it fits.
    fn decimal(&self, at: usize, text: &str) -> Result<Const, SqlError> {
        let digits = text.trim_end_matches(['l', 'L']);
        match digits.parse::<i64>() {
            Ok(v) => Ok(i32::try_from(v).map_or(Const::Long(v), Const::Int)),
            Err(_) => Err(self.err(
                at,
                format!("number {text} is out of range: integers must fit in 64 bits"),
            )),
        }
    }

    /// Java's `createFloat`: finite and not below `Double.MIN_VALUE`, which refuses zero.
    fn float(&self, at: usize, text: &str) -> Result<Const, SqlError> {
        let v: f64 = text.parse().unwrap_or(f64::NAN);
        if v.is_infinite() {
            return Err(self.err(at, format!("number {text} is too large for a double")));
        }
        if v.is_nan() || v <= 0.0 {
            return Err(self.err(
                at,
                format!(
                    "floating-point literal {text} is zero or below 4.9E-324, which RocketMQ \
                     refuses: write 0 for zero"
                ),
            ));
        }
        Ok(Const::Double(v))
    }
}
