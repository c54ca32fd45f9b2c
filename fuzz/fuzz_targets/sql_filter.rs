//! Any SQL92 subscription from the network and any stored properties: the selector parser
//! compiles or refuses with a position inside the text, never panics or overflows its
//! stack; a compiled expression evaluates against any properties without panicking, and
//! the same input always gives the same outcome.
//!
//! Input: a mode byte, then the expression, a 0 byte, and a properties string. Mode even:
//! the expression is the raw bytes (as text). Mode odd: each byte picks a token from the
//! grammar, so the fuzzer reaches deep, well-formed expressions quickly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_shell::filter::{MAX_EXPRESSION_BYTES, SqlExpression};

/// Tokens for structured inputs: every keyword and operator, a few properties (also ones
/// the properties part is likely to hold), literals of each type and edge values.
const TOKENS: &[&str] = &[
    "a",
    "b",
    "TAGS",
    "KEYS",
    "x$_1",
    "(",
    ")",
    "(",
    ")",
    "NOT",
    "AND",
    "OR",
    "=",
    "<>",
    "<",
    "<=",
    ">",
    ">=",
    "BETWEEN",
    "IN",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "CONTAINS",
    "STARTSWITH",
    "ENDSWITH",
    ",",
    "+",
    "-",
    "'A'",
    "'it''s'",
    "''",
    "'é'",
    "0",
    "1",
    "5L",
    "2147483648",
    "9223372036854775807",
    "9223372036854775808",
    "1.5",
    ".5",
    "5.",
    "1E3",
    "0.0",
    "1e400",
    "--c\n",
    "/* c */",
    "!=",
    ".",
    "'open",
];

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let (expr_bytes, props) = (&rest[..split], rest.get(split + 1..).unwrap_or(&[]));
    let sql = if mode % 2 == 0 {
        String::from_utf8_lossy(expr_bytes).into_owned()
    } else {
        expr_bytes
            .iter()
            .map(|b| TOKENS[*b as usize % TOKENS.len()])
            .collect::<Vec<_>>()
            .join(" ")
    };
    let expr = match SqlExpression::parse(&sql) {
        Ok(e) => e,
        Err(e) => {
            assert!(e.offset <= sql.len().max(MAX_EXPRESSION_BYTES), "{e}");
            assert!(sql.len() > MAX_EXPRESSION_BYTES || e.column >= 1, "{e}");
            return;
        }
    };
    // The stored properties as the broker reads them.
    let first = expr.evaluate_properties(props);
    assert_eq!(first, expr.evaluate_properties(props));
    // Every name set to the same value: the comparisons and conversions all run.
    if let Ok(value) = std::str::from_utf8(props) {
        let got = expr.evaluate(&|_| Some(value));
        assert_eq!(got, expr.evaluate(&|_| Some(value)));
    }
    let _ = expr.evaluate(&|_| None);
});
