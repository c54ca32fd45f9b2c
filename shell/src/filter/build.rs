//! Building the nodes of [`super::parser`], with the checks Java's expression factories
//! make (`ComparisonExpression.createEqual` / `createBetween` / `createInFilter` /
//! `checkLessThanOperand` / `checkEqualOperand`), and their error messages.

use super::SqlError;
use super::eval::{CmpOp, Const, Expr, TextOp, Value, compare};
use super::lexer::Tok;
use super::parser::{Node, Parser};

impl Parser<'_> {
    /// `left OR right` / `left AND right`, flattened into the left chain: both are
    /// associative, with the same evaluation order, so `(a OR b) OR c` is `[a, b, c]`.
    pub(super) fn logic(&self, or: bool, left: Node, right: Node) -> Result<Node, SqlError> {
        let at = left.at;
        let left = self.as_boolean(left)?;
        let right = self.as_boolean(right)?;
        let (depth, size, mut ops) = match left.e {
            Expr::Or(ops) if or => (left.depth, left.size, ops),
            Expr::And(ops) if !or => (left.depth, left.size, ops),
            e => (left.depth + 1, left.size + 1, vec![e]),
        };
        let (depth, size) = (depth.max(right.depth + 1), size + right.size);
        self.check(at, depth, size)?;
        ops.push(right.e);
        Ok(Node {
            e: if or { Expr::Or(ops) } else { Expr::And(ops) },
            at,
            end: self.prev_end,
            depth,
            size,
        })
    }

    /// `left = right` / `left <> right`, after Java's `checkEqualOperand` and
    /// `checkEqualOperandCompatability`; `<>` is `NOT (=)`, as Java builds it.
    pub(super) fn equal(&self, negated: bool, left: Node, right: Node) -> Result<Node, SqlError> {
        self.check_equal_operand(&left)?;
        self.check_equal_operand(&right)?;
        if let (Expr::Const(l), Expr::Const(r)) = (&left.e, &right.e) {
            let boolean = |c: &Const| matches!(c, Const::Bool(_) | Const::Null);
            if boolean(l) && !boolean(r) {
                let (l, r) = (self.text(&left), self.text(&right));
                return Err(self.err(left.at, format!("{l} cannot be compared with {r}")));
            }
        }
        let kids = [(left.depth, left.size), (right.depth, right.size)];
        let eq = Expr::Equal(Box::new(left.e), Box::new(right.e));
        let eq = self.node(left.at, eq, &kids)?;
        if !negated {
            return Ok(eq);
        }
        let kids = [(eq.depth, eq.size)];
        self.node(eq.at, Expr::Not(Box::new(eq.e)), &kids)
    }

    /// `left IS [NOT] NULL` (the `IS` consumed).
    pub(super) fn is_null(&mut self, left: Node) -> Result<Node, SqlError> {
        let negated = self.peek().tok == Tok::Not;
        if negated {
            self.bump();
        }
        self.expect(&Tok::Null, "NULL or NOT NULL after IS")?;
        let kids = [(left.depth, left.size)];
        let at = left.at;
        let is_null = self.node(at, Expr::IsNull(Box::new(left.e)), &kids)?;
        if !negated {
            return Ok(is_null);
        }
        let kids = [(is_null.depth, is_null.size)];
        self.node(at, Expr::Not(Box::new(is_null.e)), &kids)
    }

    /// `left [NOT] CONTAINS / STARTSWITH / ENDSWITH 'text'` (the operator consumed).
    pub(super) fn text_op(
        &mut self,
        op: Tok<'_>,
        negated: bool,
        left: Node,
    ) -> Result<Node, SqlError> {
        let search = self.string_literal(&op)?;
        let op = match op {
            Tok::Contains => TextOp::Contains,
            Tok::StartsWith => TextOp::StartsWith,
            _ => TextOp::EndsWith,
        };
        let kids = [(left.depth, left.size)];
        let e = Expr::Text {
            op,
            negated,
            operand: Box::new(left.e),
            search: search.into(),
        };
        self.node(left.at, e, &kids)
    }

    /// `left OP right` for `<`, `<=`, `>`, `>=`, after Java's `checkLessThanOperand` on
    /// both sides.
    pub(super) fn compare(&self, tok: Tok<'_>, left: Node, right: Node) -> Result<Node, SqlError> {
        let op = match tok {
            Tok::Gt => CmpOp::Gt,
            Tok::Ge => CmpOp::Ge,
            Tok::Lt => CmpOp::Lt,
            _ => CmpOp::Le,
        };
        self.cmp_node(op, left, right, &tok)
    }

    pub(super) fn cmp_node(
        &self,
        op: CmpOp,
        left: Node,
        right: Node,
        tok: &Tok<'_>,
    ) -> Result<Node, SqlError> {
        self.check_less_than(&left, tok)?;
        self.check_less_than(&right, tok)?;
        let kids = [(left.depth, left.size), (right.depth, right.size)];
        let e = Expr::Compare(op, Box::new(left.e), Box::new(right.e));
        self.node(left.at, e, &kids)
    }

    /// `v [NOT] BETWEEN low AND high` (the operator consumed): Java's `createBetween` /
    /// `createNotBetween`, `v >= low AND v <= high` or `v < low OR v > high`; constant
    /// bounds must be non-null and in order.
    pub(super) fn between(&mut self, v: Node, negated: bool) -> Result<Node, SqlError> {
        let low = self.unary()?;
        self.expect(&Tok::And, "AND between the two bounds of BETWEEN")?;
        let high = self.unary()?;
        self.between_node(v, low, high, negated)
    }

    pub(super) fn between_node(
        &self,
        v: Node,
        low: Node,
        high: Node,
        negated: bool,
    ) -> Result<Node, SqlError> {
        if !negated {
            if let (Expr::Const(l), Expr::Const(h)) = (&low.e, &high.e) {
                let (lv, hv) = (l.value(), h.value());
                if lv == Value::Null || hv == Value::Null {
                    return Err(self.err(low.at, "the bounds of BETWEEN cannot be NULL"));
                }
                let ordered = compare(hv, lv).map(|o| o.is_ge()).unwrap_or(false);
                if !ordered {
                    return Err(self.err(
                        low.at,
                        format!(
                            "BETWEEN {} AND {}: the bounds must be numbers, the lower first",
                            self.text(&low),
                            self.text(&high)
                        ),
                    ));
                }
            }
        }
        let (first, second) = if negated {
            (CmpOp::Lt, CmpOp::Gt)
        } else {
            (CmpOp::Ge, CmpOp::Le)
        };
        let tok = Tok::Between;
        self.check_less_than(&v, &tok)?;
        self.check_less_than(&low, &tok)?;
        self.check_less_than(&high, &tok)?;
        // The value is evaluated twice, as in Java: its copy counts against the limits,
        // checked before it is made.
        self.check(v.at, v.depth + 2, 2 * v.size + low.size + high.size + 3)?;
        let at = v.at;
        let copy = Node {
            e: v.e.clone(),
            ..v
        };
        let a = self.cmp_node(first, v, low, &tok)?;
        let b = self.cmp_node(second, copy, high, &tok)?;
        let kids = [(a.depth, a.size), (b.depth, b.size)];
        let e = if negated {
            Expr::Or(vec![a.e, b.e])
        } else {
            Expr::And(vec![a.e, b.e])
        };
        self.node(at, e, &kids)
    }

    /// `prop [NOT] IN ('a', 'b', ...)`: Java accepts only a property on the left and only
    /// string literals in the list.
    pub(super) fn in_list(&mut self, left: Node, negated: bool) -> Result<Node, SqlError> {
        let Expr::Property(property) = left.e else {
            let msg = format!(
                "{} IN (...): only a property can be tested with IN",
                self.text(&left)
            );
            return Err(self.err(left.at, msg));
        };
        self.expect(&Tok::LParen, "'(' after IN")?;
        let mut list = vec![self.string_literal(&Tok::In)?.into_boxed_str()];
        loop {
            let t = self.bump();
            match t.tok {
                Tok::Comma => list.push(self.string_literal(&Tok::In)?.into_boxed_str()),
                Tok::RParen => break,
                other => {
                    let msg = format!(
                        "expected ',' or ')' in the IN list, found {}",
                        other.describe()
                    );
                    return Err(self.err(t.at, msg));
                }
            }
        }
        list.sort_unstable();
        list.dedup();
        let e = Expr::In {
            property,
            list,
            negated,
        };
        Ok(self.leaf(left.at, e))
    }
    /// Java's `checkLessThanOperand`: a literal must be a number, a condition cannot be
    /// ordered.
    pub(super) fn check_less_than(&self, n: &Node, op: &Tok<'_>) -> Result<(), SqlError> {
        let bad = match &n.e {
            Expr::Const(Const::Int(_) | Const::Long(_) | Const::Double(_)) => false,
            Expr::Const(_) => true,
            e => e.is_boolean(),
        };
        if bad {
            let msg = format!(
                "{} cannot be used with {}: only numbers and properties can",
                self.text(n),
                op.describe()
            );
            return Err(self.err(n.at, msg));
        }
        Ok(())
    }

    /// Java's `checkEqualOperand`: NULL cannot be compared with `=` or `<>`.
    pub(super) fn check_equal_operand(&self, n: &Node) -> Result<(), SqlError> {
        if n.e == Expr::Const(Const::Null) {
            return Err(self.err(
                n.at,
                "NULL cannot be compared with '=' or '<>': use IS NULL or IS NOT NULL",
            ));
        }
        Ok(())
    }
}
