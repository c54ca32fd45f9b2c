//! The compiled expression and its evaluation, with the semantics of RocketMQ's
//! `filter/expression` classes (`ComparisonExpression`, `LogicExpression`,
//! `UnaryExpression`, `UnaryInExpression`):
//!
//! * values are Java's: `Integer`, `Long`, `Double`, `Boolean`, `String` or null; a decimal
//!   literal is an `Integer` when it fits, else a `Long`; property values are strings;
//! * a comparison converts a string property to the other side's type the way Java's
//!   `Integer.valueOf` / `Long.valueOf` / `Double.valueOf` / `Boolean.valueOf` do, so
//!   `a > 5` needs `a` to be an integer in `int` range and `a > 5.0` takes `"5.5"`; two
//!   strings under `<`, `<=`, `>`, `>=` are both read as doubles;
//! * a conversion that fails is an evaluation error ([`EvalError`]), which Java throws and
//!   the broker turns into "not matched", whatever `OR` or `NOT` surrounds it;
//! * null (a missing property) makes comparisons null; `AND`/`OR` are three-valued and
//!   short-circuit left to right; only a final `TRUE` matches.
//!
//! The evaluation order is Java's, because it decides which errors surface.

use std::cmp::Ordering;

/// What an evaluation can fail with (Java throws and the broker logs it); the message is
/// then not matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalError {
    /// A string that had to be a number is not one (Java's `NumberFormatException`).
    NotANumber,
    /// A value of the wrong kind was used (Java's `ClassCastException`: a boolean
    /// compared with a string, a non-boolean under `NOT`, `AND` or `OR`).
    WrongType,
}

impl std::fmt::Display for EvalError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::NotANumber => "a property compared with a number is not that kind of number",
            Self::WrongType => "a value has the wrong type for its operator",
        })
    }
}

/// A value during evaluation; strings borrow from the expression or the message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Value<'a> {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(&'a str),
}

/// A literal.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Const {
    Null,
    Bool(bool),
    Int(i32),
    Long(i64),
    Double(f64),
    Str(Box<str>),
}

impl Const {
    /// The literal as a value.
    pub(super) fn value(&self) -> Value<'_> {
        match self {
            Const::Null => Value::Null,
            Const::Bool(b) => Value::Bool(*b),
            Const::Int(i) => Value::Int(*i),
            Const::Long(l) => Value::Long(*l),
            Const::Double(d) => Value::Double(*d),
            Const::Str(s) => Value::Str(s),
        }
    }
}

/// `<`, `<=`, `>`, `>=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
}

/// `CONTAINS`, `STARTSWITH`, `ENDSWITH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TextOp {
    Contains,
    StartsWith,
    EndsWith,
}

/// A node of a compiled expression. Parentheses leave no node (as in Java, where `(a)` is
/// the property itself); `BETWEEN`, `<>` and `IS NOT NULL` are built from the others, as
/// Java builds them.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    Const(Const),
    Property(Box<str>),
    /// Unary minus: numbers negate (with Java's wrap-around), anything else is null.
    Negate(Box<Expr>),
    /// A property used where a boolean is expected (Java's `createBooleanCast`).
    BoolCast(Box<str>),
    Not(Box<Expr>),
    /// Operands of a chain of `AND`s, evaluated left to right.
    And(Vec<Expr>),
    /// Operands of a chain of `OR`s, evaluated left to right.
    Or(Vec<Expr>),
    Equal(Box<Expr>, Box<Expr>),
    IsNull(Box<Expr>),
    Compare(CmpOp, Box<Expr>, Box<Expr>),
    /// `prop [NOT] IN (...)`; the list sorted and deduplicated.
    In {
        property: Box<str>,
        list: Vec<Box<str>>,
        negated: bool,
    },
    Text {
        op: TextOp,
        negated: bool,
        operand: Box<Expr>,
        search: Box<str>,
    },
}

impl Expr {
    /// Whether Java's type of this node is a `BooleanExpression` (the parser's checks use
    /// it). TRUE, FALSE and NULL literals are `BooleanConstantExpression`s.
    pub(super) fn is_boolean(&self) -> bool {
        !matches!(
            self,
            Expr::Property(_)
                | Expr::Negate(_)
                | Expr::Const(Const::Int(_) | Const::Long(_) | Const::Double(_) | Const::Str(_))
        )
    }

    /// Evaluates against a message's properties.
    pub(super) fn eval<'a>(
        &'a self,
        prop: &dyn Fn(&str) -> Option<&'a str>,
    ) -> Result<Value<'a>, EvalError> {
        Ok(match self {
            Expr::Const(c) => c.value(),
            Expr::Property(name) => prop(name).map_or(Value::Null, Value::Str),
            Expr::Negate(e) => match e.eval(prop)? {
                Value::Int(i) => Value::Int(i.wrapping_neg()),
                Value::Long(l) => Value::Long(l.wrapping_neg()),
                Value::Double(d) => Value::Double(-d),
                _ => Value::Null,
            },
            // A property value is a string, never a Boolean: the cast gives FALSE.
            Expr::BoolCast(name) => match prop(name) {
                None => Value::Null,
                Some(_) => Value::Bool(false),
            },
            Expr::Not(e) => match truth(e.eval(prop)?)? {
                None => Value::Null,
                Some(b) => Value::Bool(!b),
            },
            Expr::And(ops) => {
                let mut unknown = false;
                for e in ops {
                    match truth(e.eval(prop)?)? {
                        Some(false) => return Ok(Value::Bool(false)),
                        None => unknown = true,
                        Some(true) => {}
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(true)
                }
            }
            Expr::Or(ops) => {
                let mut unknown = false;
                for e in ops {
                    match truth(e.eval(prop)?)? {
                        Some(true) => return Ok(Value::Bool(true)),
                        None => unknown = true,
                        Some(false) => {}
                    }
                }
                if unknown {
                    Value::Null
                } else {
                    Value::Bool(false)
                }
            }
            Expr::Equal(l, r) => {
                let (lv, rv) = (l.eval(prop)?, r.eval(prop)?);
                match (lv, rv) {
                    (Value::Null, Value::Null) => Value::Bool(true),
                    // Java's asymmetry, kept: a null left side is unknown, a null right
                    // side is FALSE (so `'x' <> missing` is TRUE, `missing <> 'x'` null).
                    (Value::Null, _) => Value::Null,
                    (_, Value::Null) => Value::Bool(false),
                    _ => Value::Bool(compare(lv, rv)? == Ordering::Equal),
                }
            }
            Expr::IsNull(e) => Value::Bool(e.eval(prop)? == Value::Null),
            Expr::Compare(op, l, r) => {
                let lv = l.eval(prop)?;
                if lv == Value::Null {
                    return Ok(Value::Null);
                }
                let rv = r.eval(prop)?;
                if rv == Value::Null {
                    return Ok(Value::Null);
                }
                let ord = match (lv, rv) {
                    // Two strings are compared as doubles, never as text.
                    (Value::Str(a), Value::Str(b)) => {
                        let a = java_parse_double(a).ok_or(EvalError::NotANumber)?;
                        let b = java_parse_double(b).ok_or(EvalError::NotANumber)?;
                        java_double_cmp(a, b)
                    }
                    _ => compare(lv, rv)?,
                };
                Value::Bool(match op {
                    CmpOp::Lt => ord == Ordering::Less,
                    CmpOp::Le => ord != Ordering::Greater,
                    CmpOp::Gt => ord == Ordering::Greater,
                    CmpOp::Ge => ord != Ordering::Less,
                })
            }
            Expr::In {
                property,
                list,
                negated,
            } => match prop(property) {
                None => Value::Null,
                Some(v) => {
                    let found = list.binary_search_by(|x| (**x).cmp(v)).is_ok();
                    Value::Bool(found != *negated)
                }
            },
            Expr::Text {
                op,
                negated,
                operand,
                search,
            } => {
                // Java answers FALSE, not null, for an empty search or a non-string value,
                // with or without NOT.
                if search.is_empty() {
                    return Ok(Value::Bool(false));
                }
                match operand.eval(prop)? {
                    Value::Str(s) => {
                        let hit = match op {
                            TextOp::Contains => s.contains(&**search),
                            TextOp::StartsWith => s.starts_with(&**search),
                            TextOp::EndsWith => s.ends_with(&**search),
                        };
                        Value::Bool(hit != *negated)
                    }
                    _ => Value::Bool(false),
                }
            }
        })
    }
}

/// A boolean operand's truth; anything else is Java's `ClassCastException`.
fn truth(v: Value<'_>) -> Result<Option<bool>, EvalError> {
    match v {
        Value::Bool(b) => Ok(Some(b)),
        Value::Null => Ok(None),
        _ => Err(EvalError::WrongType),
    }
}

/// Java's `ComparisonExpression.__compare` with string conversion on: values of different
/// types are converted towards the other side (int → long → double, string → the other
/// side's type); pairs Java cannot convert compare as "less" (-1), except a boolean left
/// of a string, which throws.
pub(super) fn compare(l: Value<'_>, r: Value<'_>) -> Result<Ordering, EvalError> {
    use Value::*;
    let nan = EvalError::NotANumber;
    Ok(match (l, r) {
        (Bool(a), Bool(b)) => a.cmp(&b),
        (Int(a), Int(b)) => a.cmp(&b),
        (Long(a), Long(b)) => a.cmp(&b),
        (Double(a), Double(b)) => java_double_cmp(a, b),
        (Str(a), Str(b)) => a.encode_utf16().cmp(b.encode_utf16()),
        (Bool(_), Str(_)) => return Err(EvalError::WrongType),
        (Int(a), Long(b)) => i64::from(a).cmp(&b),
        (Int(a), Double(b)) => java_double_cmp(f64::from(a), b),
        (Int(a), Str(b)) => a.cmp(&b.parse::<i32>().map_err(|_| nan)?),
        (Long(a), Int(b)) => a.cmp(&i64::from(b)),
        (Long(a), Double(b)) => java_double_cmp(a as f64, b),
        (Long(a), Str(b)) => a.cmp(&b.parse::<i64>().map_err(|_| nan)?),
        (Double(a), Int(b)) => java_double_cmp(a, f64::from(b)),
        (Double(a), Long(b)) => java_double_cmp(a, b as f64),
        (Double(a), Str(b)) => java_double_cmp(a, java_parse_double(b).ok_or(nan)?),
        (Str(a), Bool(b)) => java_parse_bool(a).cmp(&b),
        (Str(a), Int(b)) => a.parse::<i32>().map_err(|_| nan)?.cmp(&b),
        (Str(a), Long(b)) => a.parse::<i64>().map_err(|_| nan)?.cmp(&b),
        (Str(a), Double(b)) => java_double_cmp(java_parse_double(a).ok_or(nan)?, b),
        // Booleans against numbers, and nulls (callers never pass them): Java's -1.
        _ => Ordering::Less,
    })
}

/// Java's `Double.compare`: every NaN equals every NaN and is above +∞; -0.0 < 0.0.
pub(super) fn java_double_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.total_cmp(&b),
    }
}

/// Java's `Boolean.valueOf(String)`: true iff "true" in any case.
fn java_parse_bool(s: &str) -> bool {
    s.eq_ignore_ascii_case("true")
}

/// Java's `Double.valueOf(String)` for the forms people write: surrounding characters up
/// to U+0020 trimmed, an optional sign, `NaN`, `Infinity`, or decimal digits with an
/// optional point and exponent and an optional `f`/`d` suffix. Java's hexadecimal form
/// (`0x1p3`) is not read: such a property is "not a number" here.
pub(super) fn java_parse_double(s: &str) -> Option<f64> {
    let t = s.trim_matches(|c: char| c <= ' ');
    let (negative, body) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = match body {
        "NaN" => f64::NAN,
        "Infinity" => f64::INFINITY,
        _ => {
            let body = body.strip_suffix(['f', 'F', 'd', 'D']).unwrap_or(body);
            if !is_java_decimal(body) {
                return None;
            }
            body.parse::<f64>().ok()?
        }
    };
    Some(if negative { -v } else { v })
}

/// `digits [. digits] [e [sign] digits]` with at least one mantissa digit.
fn is_java_decimal(s: &str) -> bool {
    let b = s.as_bytes();
    let int = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let mut i = int;
    let mut frac = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac;
    }
    if int + frac == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len()
}
