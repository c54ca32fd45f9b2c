//! Tokens of RocketMQ's selector grammar (`filter/.../SelectorParser.jj`).
//!
//! The rules are JavaCC's longest match over that grammar's token definitions, so an input
//! splits into the same tokens as in a Java broker: keywords and identifiers are
//! case-insensitive ASCII, `0` never takes an `L` suffix (`007` is `0` then `07`...), an
//! exponent belongs to a number only when digits follow it, and `--` starts a comment only
//! when a line break ends it (otherwise it is two minus signs).
//!
//! The whole input is tokenized up front (it is bounded by
//! [`super::MAX_EXPRESSION_BYTES`]); Java tokenizes lazily and never looks past the last
//! token its parser needed, see the parser for how trailing input is treated.

use super::SqlError;

/// One token, with its byte offset in the expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Token<'a> {
    /// What it is.
    pub tok: Tok<'a>,
    /// Byte offset of its first character.
    pub at: usize,
    /// Byte offset just past its last character.
    pub end: usize,
}

/// Token kinds. Literal values stay text until the parser checks them, as Java does.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Tok<'a> {
    Not,
    And,
    Or,
    Between,
    In,
    True,
    False,
    Null,
    Is,
    Contains,
    StartsWith,
    EndsWith,
    /// `0`, or `[1-9][0-9]*` with an optional `l`/`L`.
    Decimal(&'a str),
    /// `5.`, `5.5`, `.5`, `5E10`, `5.5e-3`...
    Float(&'a str),
    /// A quoted string with `''` already turned into `'`.
    Str(String),
    /// A property name: `[A-Za-z_$][A-Za-z0-9_$]*`.
    Ident(&'a str),
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    Eof,
}

impl Tok<'_> {
    /// How an error message names the token.
    pub(super) fn describe(&self) -> String {
        let fixed = match self {
            Tok::Not => "NOT",
            Tok::And => "AND",
            Tok::Or => "OR",
            Tok::Between => "BETWEEN",
            Tok::In => "IN",
            Tok::True => "TRUE",
            Tok::False => "FALSE",
            Tok::Null => "NULL",
            Tok::Is => "IS",
            Tok::Contains => "CONTAINS",
            Tok::StartsWith => "STARTSWITH",
            Tok::EndsWith => "ENDSWITH",
            Tok::Eq => "'='",
            Tok::Ne => "'<>'",
            Tok::Gt => "'>'",
            Tok::Ge => "'>='",
            Tok::Lt => "'<'",
            Tok::Le => "'<='",
            Tok::LParen => "'('",
            Tok::RParen => "')'",
            Tok::Comma => "','",
            Tok::Plus => "'+'",
            Tok::Minus => "'-'",
            Tok::Eof => "the end of the expression",
            Tok::Decimal(t) | Tok::Float(t) => return format!("number {t}"),
            Tok::Ident(t) => return format!("property {t}"),
            Tok::Str(s) => return format!("string '{}'", clip(s)),
        };
        fixed.to_owned()
    }
}

/// At most 40 characters of `s`, for error messages.
pub(super) fn clip(s: &str) -> String {
    match s.char_indices().nth(40) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

fn keyword(word: &str) -> Option<Tok<'static>> {
    const WORDS: [(&str, Tok<'static>); 12] = [
        ("NOT", Tok::Not),
        ("AND", Tok::And),
        ("OR", Tok::Or),
        ("BETWEEN", Tok::Between),
        ("IN", Tok::In),
        ("TRUE", Tok::True),
        ("FALSE", Tok::False),
        ("NULL", Tok::Null),
        ("IS", Tok::Is),
        ("CONTAINS", Tok::Contains),
        ("STARTSWITH", Tok::StartsWith),
        ("ENDSWITH", Tok::EndsWith),
    ];
    WORDS
        .iter()
        .find(|(w, _)| w.eq_ignore_ascii_case(word))
        .map(|(_, t)| t.clone())
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$'
}

fn is_ident_part(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

/// Length of an exponent (`e`, optional sign, at least one digit) at the start of `s`,
/// or 0 when there is none.
fn exponent_len(s: &[u8]) -> usize {
    if !matches!(s.first(), Some(b'e' | b'E')) {
        return 0;
    }
    let sign = usize::from(matches!(s.get(1), Some(b'+' | b'-')));
    let digits = s[1 + sign..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    if digits == 0 { 0 } else { 1 + sign + digits }
}

/// Splits `sql` into tokens, ending with [`Tok::Eof`].
pub(super) fn tokenize(sql: &str) -> Result<Vec<Token<'_>>, SqlError> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at = i;
        let c = b[i];
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' | 0x0c => {
                i += 1;
                continue;
            }
            b'-' if b.get(i + 1) == Some(&b'-') => {
                // A comment runs to a line break; without one, JavaCC's longest match
                // makes these two minus signs.
                match b[i..].iter().position(|&x| x == b'\n' || x == b'\r') {
                    Some(n) => {
                        i += n + 1;
                        continue;
                    }
                    None => {
                        i += 1;
                        Tok::Minus
                    }
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => match sql[i + 2..].find("*/") {
                Some(n) => {
                    i += n + 4;
                    continue;
                }
                None => return Err(SqlError::new(sql, at, "unterminated comment: no '*/'")),
            },
            b'\'' => {
                let mut s = String::new();
                let mut j = i + 1;
                loop {
                    let Some(n) = sql[j..].find('\'') else {
                        return Err(SqlError::new(
                            sql,
                            at,
                            "unterminated string: no closing quote (write a quote inside a string as '')",
                        ));
                    };
                    s.push_str(&sql[j..j + n]);
                    j += n + 1;
                    if b.get(j) == Some(&b'\'') {
                        s.push('\'');
                        j += 1;
                    } else {
                        break;
                    }
                }
                i = j;
                Tok::Str(s)
            }
            b'0'..=b'9' => {
                let digits = b[i..].iter().take_while(|x| x.is_ascii_digit()).count();
                let mut j = i + digits;
                if b.get(j) == Some(&b'.') {
                    j += 1;
                    j += b[j..].iter().take_while(|x| x.is_ascii_digit()).count();
                    j += exponent_len(&b[j..]);
                    i = j;
                    Tok::Float(&sql[at..j])
                } else if exponent_len(&b[j..]) > 0 {
                    j += exponent_len(&b[j..]);
                    i = j;
                    Tok::Float(&sql[at..j])
                } else if c == b'0' {
                    i += 1;
                    Tok::Decimal("0")
                } else {
                    if matches!(b.get(j), Some(b'l' | b'L')) {
                        j += 1;
                    }
                    i = j;
                    Tok::Decimal(&sql[at..j])
                }
            }
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let mut j = i + 1;
                j += b[j..].iter().take_while(|x| x.is_ascii_digit()).count();
                j += exponent_len(&b[j..]);
                i = j;
                Tok::Float(&sql[at..j])
            }
            c if is_ident_start(c) => {
                let n = b[i..].iter().take_while(|&&x| is_ident_part(x)).count();
                let word = &sql[i..i + n];
                i += n;
                keyword(word).unwrap_or(Tok::Ident(word))
            }
            b'=' => {
                i += 1;
                Tok::Eq
            }
            b'<' => match b.get(i + 1) {
                Some(b'>') => {
                    i += 2;
                    Tok::Ne
                }
                Some(b'=') => {
                    i += 2;
                    Tok::Le
                }
                _ => {
                    i += 1;
                    Tok::Lt
                }
            },
            b'>' => {
                if b.get(i + 1) == Some(&b'=') {
                    i += 2;
                    Tok::Ge
                } else {
                    i += 1;
                    Tok::Gt
                }
            }
            b'(' | b')' | b',' | b'+' | b'-' => {
                i += 1;
                match c {
                    b'(' => Tok::LParen,
                    b')' => Tok::RParen,
                    b',' => Tok::Comma,
                    b'+' => Tok::Plus,
                    _ => Tok::Minus,
                }
            }
            _ => return Err(unexpected_char(sql, at, &out)),
        };
        out.push(Token { tok, at, end: i });
    }
    out.push(Token {
        tok: Tok::Eof,
        at: sql.len(),
        end: sql.len(),
    });
    Ok(out)
}

/// The error for a character no token starts with, with a hint for the usual mistakes.
fn unexpected_char(sql: &str, at: usize, before: &[Token<'_>]) -> SqlError {
    let rest = &sql[at..];
    let ch = rest.chars().next().unwrap_or(' ');
    let after_ident = before
        .last()
        .is_some_and(|t| matches!(t.tok, Tok::Ident(w) if t.at + w.len() == at));
    let hint = if rest.starts_with("!=") {
        "'!=' is not SQL92: write '<>'".to_owned()
    } else if rest.starts_with("&&") || rest.starts_with("||") {
        "write AND / OR instead of '&&' / '||' (this is SQL92, not a tag expression)".to_owned()
    } else if ch == '"' {
        "strings are in single quotes: 'text'".to_owned()
    } else if ch == '.' && after_ident {
        "property names cannot contain '.': RocketMQ's SQL92 names are letters, digits, '_' and '$'"
            .to_owned()
    } else if ch.is_control() {
        format!("unexpected character U+{:04X}", u32::from(ch))
    } else {
        format!("unexpected character '{ch}'")
    };
    SqlError::new(sql, at, hint)
}
