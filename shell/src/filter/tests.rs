//! The selector language against RocketMQ's semantics (cases from its `ExpressionTest`
//! and `ParserTest`, plus Java's conversion and NULL rules), and property tests.

use proptest::prelude::*;

use super::eval::EvalError;
use super::{MAX_DEPTH, MAX_EXPRESSION_BYTES, Outcome, SqlError, SqlExpression};

fn eval(sql: &str, props: &[(&str, &str)]) -> Outcome {
    let e = SqlExpression::parse(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    e.evaluate(&|n| props.iter().rev().find(|(k, _)| *k == n).map(|p| p.1))
}

fn yes(sql: &str, props: &[(&str, &str)]) {
    assert_eq!(eval(sql, props), Outcome::True, "{sql} with {props:?}");
}

fn no(sql: &str, props: &[(&str, &str)]) {
    assert_eq!(eval(sql, props), Outcome::False, "{sql} with {props:?}");
}

fn unknown(sql: &str, props: &[(&str, &str)]) {
    assert_eq!(eval(sql, props), Outcome::Unknown, "{sql} with {props:?}");
}

fn fails(sql: &str, props: &[(&str, &str)]) {
    assert!(
        matches!(eval(sql, props), Outcome::Error(_)),
        "{sql} with {props:?}: {:?}",
        eval(sql, props)
    );
}

fn bad(sql: &str) -> SqlError {
    match SqlExpression::parse(sql) {
        Ok(e) => panic!("{sql:?} parsed: {e:?}"),
        Err(e) => e,
    }
}

/// Asserts a parse error at a 1-based column whose message contains `needle`.
#[track_caller]
fn bad_at(sql: &str, column: usize, needle: &str) {
    let e = bad(sql);
    assert_eq!(e.column, column, "{sql:?}: {e}");
    assert!(e.message.contains(needle), "{sql:?}: {e}");
    assert!(e.to_string().contains(&format!("column {column}")), "{e}");
}

#[test]
fn comparison_operators_on_numbers() {
    let a = [("a", "5")];
    yes("a = 5", &a);
    no("a = 6", &a);
    yes("a <> 6", &a);
    no("a <> 5", &a);
    yes("a > 4", &a);
    no("a > 5", &a);
    yes("a >= 5", &a);
    yes("a < 6", &a);
    no("a < 5", &a);
    yes("a <= 5", &a);
    yes("a = 5", &[("a", "05")]);
    yes("a > -10", &a);
    yes("-a < 0 OR TRUE", &a);
    yes("a = 5L", &a);
    yes("a BETWEEN 5 AND 5", &a);
    no("a NOT BETWEEN 5 AND 5", &a);
    yes("a BETWEEN -1 AND 10", &a);
    no("a BETWEEN 6 AND 10", &a);
    yes("a NOT BETWEEN 6 AND 10", &a);
}

#[test]
fn strings_compare_by_equality_and_as_doubles() {
    yes("a = 'hello'", &[("a", "hello")]);
    no("a = 'hello'", &[("a", "Hello")]);
    yes("a <> 'x'", &[("a", "y")]);
    // Two properties under an ordering operator are read as doubles.
    yes("a > b", &[("a", "20"), ("b", "10")]);
    no("a > b", &[("a", "10"), ("b", "20")]);
    fails("a > b", &[("a", "x"), ("b", "1")]);
    yes("a = b", &[("a", "3.14"), ("b", "3.14")]);
    yes("a <> b", &[("a", "3.14"), ("b", "3.141")]);
    yes(
        "TAGS is not null and TAGS='''''tag'''''",
        &[("TAGS", "''tag''")],
    );
}

#[test]
fn a_string_property_is_converted_to_the_literal_type_as_java_does() {
    // Integer literal: Integer.valueOf, so decimals and out-of-int values fail.
    fails("a > 5", &[("a", "7.5")]);
    fails("a > 5", &[("a", "abc")]);
    fails("a > 5", &[("a", "3000000000")]);
    fails("a = 5", &[("a", " 5")]);
    yes("a > 5", &[("a", "+7")]);
    // A long literal reads the property as a long.
    yes("a < 5000000000", &[("a", "3000000000")]);
    // A double literal: Double.valueOf trims and takes exponents, NaN, Infinity, suffixes.
    yes("a > 5.0", &[("a", "7.5")]);
    yes("a > 5.0", &[("a", " 5.5 ")]);
    yes("a > 3.1E10", &[("a", "3.1415E10")]);
    yes("a > 1.5", &[("a", "NaN")]);
    yes("a > 1.5", &[("a", "Infinity")]);
    yes("a < 1.5", &[("a", "1d")]);
    fails("a > 1.5", &[("a", "0x1p3")]);
    fails("a > 1.5", &[("a", "1e")]);
    // Booleans: Boolean.valueOf on the property.
    yes("a = TRUE", &[("a", "TRUE")]);
    yes("a = FALSE", &[("a", "yes")]);
    yes("a=TRUE OR b=FALSE", &[("a", "true"), ("b", "false")]);
    no("a=TRUE OR b=FALSE", &[("a", "false"), ("b", "true")]);
    // A boolean left of a string is Java's ClassCastException.
    assert_eq!(
        eval("TRUE = a", &[("a", "true")]),
        Outcome::Error(EvalError::WrongType)
    );
    // A number against a boolean is "less": never equal.
    no("5 = TRUE", &[]);
}

#[test]
fn an_evaluation_error_fails_the_whole_expression_unless_short_circuited() {
    let p = [("a", "abc"), ("b", "x")];
    fails("a > 5 OR b = 'x'", &p);
    yes("b = 'x' OR a > 5", &p);
    fails("NOT (a > 5)", &p);
    no("b = 'y' AND a > 5", &p);
    fails("a > 5 AND b = 'y'", &p);
    // A missing left side stops a comparison before its right side is evaluated.
    unknown("missing > -(a > 5)", &p);
}

#[test]
fn null_is_unknown_and_three_valued() {
    let none: [(&str, &str); 0] = [];
    unknown("a = 1", &none);
    unknown("a > 1", &none);
    unknown("a BETWEEN 1 AND 2", &none);
    unknown("a IN ('x')", &none);
    unknown("a NOT IN ('x')", &none);
    unknown("NOT (a = 1)", &none);
    yes("a IS NULL", &none);
    no("a IS NOT NULL", &none);
    no("a IS NULL", &[("a", "v")]);
    yes("a is null OR a='hello'", &none);
    yes("a is null OR a='hello'", &[("a", "hello")]);
    no("a is null OR a='hello'", &[("a", "abc")]);
    // Kleene logic: unknown OR TRUE, unknown AND FALSE are decided.
    yes("a = 1 OR TRUE", &none);
    no("a = 1 AND FALSE", &none);
    unknown("a = 1 OR FALSE", &none);
    unknown("a = 1 AND TRUE", &none);
    unknown("NULL", &none);
    // Java's asymmetric `=`: null on the left is unknown, on the right FALSE.
    unknown("a <> 'x'", &none);
    yes("'x' <> a", &none);
    yes("a = b", &none);
    // A property alone is cast to a boolean: strings are never TRUE.
    no("a", &[("a", "true")]);
    unknown("a", &none);
}

#[test]
fn in_and_text_operators() {
    let p = [("a", "3"), ("c", "axbdc")];
    yes("a in ('3', '4', '5')", &p);
    no("a not in ('3', '4', '5')", &p);
    yes("a NOT IN ('6', '4', '5')", &p);
    yes("(a) IN ('3')", &p);
    yes(
        "a not in ('4', '4', '5') and a between 3 and 10 and c not contains 'axbc'",
        &p,
    );
    let v = [("value", "axb")];
    yes("value contains 'x'", &v);
    yes("value startswith 'ax'", &v);
    yes("value endswith 'xb'", &v);
    no("value not contains 'x'", &v);
    yes("value not endswith 'x'", &v);
    // Empty search, missing or non-string value: FALSE with or without NOT.
    no("value contains ''", &v);
    no("value not contains ''", &v);
    no("missing contains 'x'", &v);
    no("missing not startswith 'x'", &v);
    yes("NOT (missing contains 'x')", &v);
    no("(value = 'axb') contains 'x'", &v);
    yes("'axb' contains 'x'", &[]);
    yes("' ' endswith ' '", &[]);
    no("'s' contains '\\'", &[]);
    yes("value CONTAINS 'x' AND value StartsWith 'a'", &v);
}

#[test]
fn precedence_is_not_then_and_then_or() {
    // AND before OR.
    yes("TRUE OR TRUE AND FALSE", &[]);
    no("(TRUE OR TRUE) AND FALSE", &[]);
    yes("FALSE AND FALSE OR TRUE", &[]);
    // NOT before AND.
    no("NOT FALSE AND FALSE", &[]);
    yes("NOT (FALSE AND FALSE)", &[]);
    // NOT binds tighter than comparisons (JMS grammar): `NOT a = 1` is `(NOT a) = 1`.
    no("NOT a = 1", &[("a", "2")]);
    yes("NOT (a = 1)", &[("a", "2")]);
    // Comparisons bind tighter than AND/OR; BETWEEN's AND is its own.
    let p = [("a", "4"), ("b", "x"), ("TAGS", "B")];
    yes("a BETWEEN 3 AND 6 AND TAGS IN ('A','B')", &p);
    no("a BETWEEN 3 AND 6 AND TAGS IN ('A','C')", &p);
    yes("a > 10 OR a BETWEEN 3 AND 6 AND b = 'x'", &p);
    yes("a = 4 = TRUE", &p);
}

#[test]
fn keywords_comments_and_literals() {
    yes(
        "a between 1 and 2 AnD b iS nOt NuLl",
        &[("a", "1"), ("b", "")],
    );
    yes(
        "/* c */ a = 1 -- note\n AND b = 2",
        &[("a", "1"), ("b", "2")],
    );
    yes("a = 'it''s'", &[("a", "it's")]);
    yes("a = ''", &[("a", "")]);
    yes("a = 'é ✓'", &[("a", "é ✓")]);
    // 2147483647 is an Integer literal: the property must fit in an int...
    fails("a > 2147483647", &[("a", "2147483648")]);
    // ...2147483648 a Long one.
    yes("a > 2147483648", &[("a", "2147483649")]);
    yes("a = -2147483648", &[("a", "-2147483648")]);
    yes("a < .5", &[("a", "0.25")]);
    yes("a < 5.", &[("a", "4.5")]);
    yes("a > 1e2", &[("a", "100.5")]);
    yes("$x_1 = 1", &[("$x_1", "1")]);
    yes("now <= 5", &[("now", "5")]);
}

#[test]
fn malformed_expressions_report_the_column() {
    bad_at("a >", 4, "expected a value");
    bad_at("a = 'x", 5, "unterminated string");
    bad_at("a != 1", 3, "'<>'");
    bad_at("a.b = 1", 2, "cannot contain '.'");
    bad_at("a = 1 && b = 2", 7, "AND / OR");
    bad_at("a = \"x\"", 5, "single quotes");
    bad_at("(a = 1", 7, "expected ')'");
    bad_at("a = 1 b = 2", 7, "after a complete expression");
    bad_at("a = 007", 6, "after a complete expression");
    bad_at("a IN (1)", 7, "string in single quotes");
    bad_at("a IN ('x' 'y')", 11, "',' or ')'");
    bad_at("5 IN ('x')", 1, "only a property");
    bad_at("a > 'x'", 5, "cannot be used with '>'");
    bad_at("a > TRUE", 5, "cannot be used");
    bad_at("(a > 1) > 2", 1, "cannot be used");
    bad_at("a = NULL", 5, "IS NULL");
    bad_at("TRUE = 5", 1, "cannot be compared");
    bad_at("5", 1, "not a condition");
    bad_at("a AND 'x'", 7, "not a condition");
    bad_at("a BETWEEN 5 AND 3", 11, "lower first");
    bad_at("a BETWEEN 'a' AND 'b'", 11, "BETWEEN");
    bad_at("a BETWEEN NULL AND 3", 11, "NULL");
    bad_at("a BETWEEN 1 OR 3", 13, "AND between");
    bad_at("a IS 5", 6, "NULL or NOT NULL");
    bad_at("a > 100000000000000000000000", 5, "out of range");
    bad_at("a > 0.0", 5, "zero");
    bad_at("a > 1e400", 5, "too large");
    bad_at("a and between 2 and 10", 7, "expected a value");
    bad_at("/* open", 1, "unterminated comment");
    bad_at("a = 1 -- no line break", 7, "after a complete expression");
    bad_at("'é' = a #", 9, "unexpected character '#'");
    bad_at("a = \u{7}", 5, "U+0007");
    bad_at("", 1, "empty");
    bad_at("  ", 1, "empty");
}

#[test]
fn nesting_and_size_are_bounded() {
    let deep = |n: usize| format!("{}a = 1{}", "(".repeat(n), ")".repeat(n));
    assert!(SqlExpression::parse(&deep(MAX_DEPTH - 3)).is_ok());
    assert!(bad(&deep(MAX_DEPTH + 1)).message.contains("nested"));
    assert!(
        bad(&deep(100_000).chars().take(60_000).collect::<String>())
            .message
            .contains("nested")
    );
    let nots = format!("{}a = 1", "NOT ".repeat(10_000));
    assert!(bad(&nots).message.contains("nested"));
    let minus = format!("a = {}1", "-".repeat(10_000));
    assert!(bad(&minus).message.contains("nested"));
    // A left-deep chain of `=` grows without recursion: the tree depth is checked too.
    let chain = format!("a = 1{}", " = TRUE".repeat(200));
    assert!(bad(&chain).message.contains("nested"));
    // Long AND/OR chains are flat, but their size is bounded.
    let ors = |n: usize| vec!["a = 1"; n].join(" OR ");
    yes(&ors(100), &[("a", "1")]);
    assert!(bad(&ors(1000)).message.contains("too complex"));
    // BETWEEN copies its value: nesting it cannot blow up.
    let mut b = "a".to_owned();
    for _ in 0..20 {
        b = format!("-({b} BETWEEN 1 AND 2)");
    }
    assert!(bad(&format!("{b} IS NULL")).message.contains("too complex"));
    // A long IN list counts once.
    let list: Vec<String> = (0..5000).map(|i| format!("'v{i}'")).collect();
    yes(&format!("a IN ({})", list.join(",")), &[("a", "v4999")]);
    let huge = format!("a = '{}'", "x".repeat(MAX_EXPRESSION_BYTES));
    assert!(bad(&huge).message.contains("limit"));
}

#[test]
fn the_deepest_accepted_expressions_fit_a_small_stack() {
    // Brokers parse on executor threads with 2 MiB stacks; a quarter of that must do,
    // even unoptimised (checked with CARGO_PROFILE_TEST_OPT_LEVEL=0).
    let d = MAX_DEPTH;
    let worst = [
        format!("{}a = 1{}", "(".repeat(d), ")".repeat(d)),
        format!("{}TRUE", "NOT ".repeat(d - 1)),
        format!("{}a = 1{}", "NOT (".repeat(d / 2), ")".repeat(d / 2)),
        format!("a = {}1", "-".repeat(d - 2)),
        format!("{}TRUE{}", "TRUE AND (".repeat(d - 1), ")".repeat(d - 1)),
        format!("{}1{}", "a = (".repeat(d / 2), ")".repeat(d / 2)),
        format!("a BETWEEN {}1{} AND 2", "(".repeat(d), ")".repeat(d)),
        format!("{}1", "a > -(".repeat(d)),
    ];
    std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(move || {
            for sql in &worst {
                match SqlExpression::parse(sql) {
                    Ok(e) => {
                        let _ = e.evaluate(&|_| Some("1"));
                    }
                    Err(e) => assert!(e.message.contains("nested"), "{sql}: {e}"),
                }
            }
        })
        .unwrap()
        .join()
        .unwrap();
}

#[test]
fn stored_properties_are_read_as_the_engine_reads_them() {
    let e = SqlExpression::parse("a BETWEEN 3 AND 6 AND TAGS IN ('A','B')").unwrap();
    assert!(e.matches_properties(b"a\x014\x02TAGS\x01A\x02"));
    assert!(!e.matches_properties(b"a\x017\x02TAGS\x01A\x02"));
    // The last value of a repeated name counts; malformed pairs are skipped.
    assert!(e.matches_properties(b"a\x019\x02a\x015\x02\x02TAGS\x01B\x02junk"));
    assert!(!e.matches_properties(b""));
    assert!(e.matches(&[("a", "3"), ("TAGS", "B")]));
}

/// A generated boolean expression and a reference evaluation in Kleene logic.
#[derive(Debug, Clone)]
enum Gen {
    /// `a = n` / `b > n` / `c IS NULL` / TRUE / FALSE.
    Atom(u8, i8),
    Not(Box<Gen>),
    And(Box<Gen>, Box<Gen>),
    Or(Box<Gen>, Box<Gen>),
}

impl Gen {
    /// Renders with the fewest parentheses precedence allows (0 = OR, 1 = AND, 2 = NOT).
    fn render(&self, parent: u8) -> String {
        let (prec, s) = match self {
            Gen::Atom(kind, n) => {
                let s = match kind % 5 {
                    0 => format!("a = {n}"),
                    1 => format!("b > {n}"),
                    2 => "c IS NULL".into(),
                    3 => "TRUE".into(),
                    _ => "FALSE".into(),
                };
                // A comparison under NOT needs parentheses: NOT binds tighter.
                (if kind % 5 < 3 { 2 } else { 3 }, s)
            }
            Gen::Not(x) => (3, format!("NOT {}", x.render(3))),
            Gen::And(x, y) => (1, format!("{} AND {}", x.render(1), y.render(2))),
            Gen::Or(x, y) => (0, format!("{} OR {}", x.render(0), y.render(1))),
        };
        if prec < parent { format!("({s})") } else { s }
    }

    fn eval(&self, a: Option<i8>, b: Option<i8>, c: bool) -> Option<bool> {
        match self {
            Gen::Atom(kind, n) => match kind % 5 {
                0 => a.map(|a| a == *n),
                1 => b.map(|b| b > *n),
                2 => Some(c),
                3 => Some(true),
                _ => Some(false),
            },
            Gen::Not(x) => x.eval(a, b, c).map(|v| !v),
            Gen::And(x, y) => match (x.eval(a, b, c), y.eval(a, b, c)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            },
            Gen::Or(x, y) => match (x.eval(a, b, c), y.eval(a, b, c)) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            },
        }
    }
}

fn gen_expr() -> impl Strategy<Value = Gen> {
    let leaf = (any::<u8>(), -3i8..4).prop_map(|(k, n)| Gen::Atom(k, n));
    leaf.prop_recursive(6, 48, 2, |inner| {
        prop_oneof![
            inner.clone().prop_map(|x| Gen::Not(Box::new(x))),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| Gen::And(Box::new(x), Box::new(y))),
            (inner.clone(), inner).prop_map(|(x, y)| Gen::Or(Box::new(x), Box::new(y))),
        ]
    })
}

proptest! {
    #[test]
    fn generated_expressions_follow_precedence_and_three_valued_logic(
        g in gen_expr(),
        a in proptest::option::of(-3i8..4),
        b in proptest::option::of(-3i8..4),
        c in any::<bool>(),
    ) {
        let sql = g.render(0);
        let (sa, sb) = (a.map(|v| v.to_string()), b.map(|v| v.to_string()));
        let mut props = Vec::new();
        if let Some(v) = &sa { props.push(("a", v.as_str())); }
        if let Some(v) = &sb { props.push(("b", v.as_str())); }
        if !c { props.push(("c", "set")); }
        let want = match g.eval(a, b, c) {
            Some(true) => Outcome::True,
            Some(false) => Outcome::False,
            None => Outcome::Unknown,
        };
        prop_assert_eq!(eval(&sql, &props), want, "{}", sql);
    }

    #[test]
    fn any_input_parses_or_errors_and_evaluates_without_panicking(
        sql in "[ -~éλ\\n]{0,80}",
        v in "[ -~]{0,12}",
    ) {
        match SqlExpression::parse(&sql) {
            Ok(e) => {
                for name in ["a", "b", "TAGS", "x"] {
                    let _ = e.evaluate(&|n| (n == name).then_some(v.as_str()));
                }
            }
            Err(e) => prop_assert!(e.column >= 1 && e.offset <= sql.len()),
        }
    }

    #[test]
    fn token_soup_never_panics(words in proptest::collection::vec(
        prop_oneof![
            Just("a"), Just("b"), Just("1"), Just("-"), Just("2.5"), Just("'s'"),
            Just("("), Just(")"), Just("NOT"), Just("AND"), Just("OR"), Just("="),
            Just("<>"), Just(">"), Just("<="), Just("IS"), Just("NULL"), Just("IN"),
            Just(","), Just("BETWEEN"), Just("CONTAINS"), Just("TRUE"), Just("+"),
        ],
        0..30,
    )) {
        let sql = words.join(" ");
        if let Ok(e) = SqlExpression::parse(&sql) {
            let _ = e.evaluate(&|n| (n == "a").then_some("2"));
            let _ = e.evaluate(&|_| None);
        }
    }
}
