//! Label selectors as the API server parses them (`labelSelector=`): a client can refuse what the server would
//! refuse before sending anything, and never refuse what it accepts; a server built on it answers alike.
//!
//! The rules are apimachinery's `labels.Parse` (`staging/src/k8s.io/apimachinery/pkg/labels/selector.go`):
//! - the lexer splits at blanks (space, tab, CR, LF) and at the symbols `= ! ( ) , > <`, taking the longest
//!   operator (`==`, `!=`); `in` and `notin` are keywords only where an operator is expected;
//! - a requirement is `[!]KEY`, `KEY (=|==|!=) VALUE` (VALUE may be empty), `KEY (>|<) INTEGER`, or
//!   `KEY (in|notin) (V1,V2,…)`; `()` and empty list items stand for the empty value, so `app in ()` selects
//!   `app=""` (the server answers it, it does not refuse it); requirements are joined by `,`;
//! - the empty selector selects everything;
//! - keys are qualified names (`[DNS-1123 subdomain/]name`, the name at most 63 characters of `[A-Za-z0-9_.-]`,
//!   starting and ending alphanumeric), values are empty or such a name.
//!
//! The crates that speak the API (`kube`, `k8s-openapi`) pass selectors through as strings and do not parse
//! them, so this crate is the parser of both druidctl (its `-l` check) and the embedded API server (`kube-sim`).

use std::fmt;

/// Why a label selector is invalid (worded like the API server's answer).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(String);

/// What a requirement asks of a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    /// `KEY`
    Exists,
    /// `!KEY`
    DoesNotExist,
    /// `KEY=V`
    Equals,
    /// `KEY==V`
    DoubleEquals,
    /// `KEY!=V`
    NotEquals,
    /// `KEY in (…)`
    In,
    /// `KEY notin (…)`
    NotIn,
    /// `KEY>N`
    GreaterThan,
    /// `KEY<N`
    LessThan,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key.
    pub key: String,
    /// The operator.
    pub operator: Operator,
    /// The values (sorted, without duplicates; empty for Exists / DoesNotExist).
    pub values: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    End,
    Identifier(String),
    In,
    NotIn,
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    Open,
    Close,
    Comma,
}

impl fmt::Display for Token {
    /// The literal, as the server quotes it in its errors.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Token::End => "",
            Token::Identifier(s) => s,
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Not => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::Open => "(",
            Token::Close => ")",
            Token::Comma => ",",
        })
    }
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn is_symbol(c: char) -> bool {
    matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn symbol(s: &str) -> Option<Token> {
    Some(match s {
        "=" => Token::Equals,
        "==" => Token::DoubleEquals,
        "!=" => Token::NotEquals,
        "!" => Token::Not,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "(" => Token::Open,
        ")" => Token::Close,
        "," => Token::Comma,
        _ => return None,
    })
}

fn lex(s: &str) -> Vec<Token> {
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if is_blank(c) {
            i += 1;
        } else if is_symbol(c) {
            // The longest run of symbols that is still an operator.
            let mut end = i + 1;
            while end < chars.len()
                && is_symbol(chars[end])
                && symbol(&chars[i..=end].iter().collect::<String>()).is_some()
            {
                end += 1;
            }
            out.push(symbol(&chars[i..end].iter().collect::<String>()).expect("every single symbol is a token"));
            i = end;
        } else {
            let start = i;
            while i < chars.len() && !is_blank(chars[i]) && !is_symbol(chars[i]) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            out.push(match word.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word),
            });
        }
    }
    out.push(Token::End);
    out
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    /// The next token where a key or value is expected: `in` and `notin` are plain words there.
    fn peek_value(&self) -> Token {
        match &self.tokens[self.at] {
            Token::In => Token::Identifier("in".into()),
            Token::NotIn => Token::Identifier("notin".into()),
            t => t.clone(),
        }
    }

    fn next_value(&mut self) -> Token {
        let t = self.peek_value();
        self.next_operator();
        t
    }

    fn next_operator(&mut self) -> Token {
        let t = self.tokens[self.at].clone();
        if self.at + 1 < self.tokens.len() {
            self.at += 1;
        }
        t
    }

    fn selector(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut out = Vec::new();
        loop {
            match self.peek_value() {
                Token::Identifier(_) | Token::Not => {
                    out.push(self.requirement().map_err(|e| err(format!("unable to parse requirement: {e}")))?);
                    match self.next_value() {
                        Token::End => return Ok(out),
                        Token::Comma => {
                            let t = self.peek_value();
                            if !matches!(t, Token::Identifier(_) | Token::Not) {
                                return Err(err(format!("found '{t}', expected: identifier after ','")));
                            }
                        }
                        t => return Err(err(format!("found '{t}', expected: ',' or 'end of string'"))),
                    }
                }
                Token::End => return Ok(out),
                t => return Err(err(format!("found '{t}', expected: !, identifier, or 'end of string'"))),
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let mut negated = false;
        let mut t = self.next_value();
        if t == Token::Not {
            negated = true;
            t = self.next_value();
        }
        let Token::Identifier(key) = t else {
            return Err(err(format!("found '{t}', expected: identifier")));
        };
        check_key(&key)?;
        let unary = matches!(self.peek_value(), Token::End | Token::Comma);
        if negated || unary {
            let operator = if negated { Operator::DoesNotExist } else { Operator::Exists };
            return Ok(Requirement { key, operator, values: Vec::new() });
        }
        let operator = match self.next_operator() {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            t => return Err(err(format!("found '{t}', expected: in, notin, =, ==, !=, gt, lt"))),
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        if matches!(operator, Operator::GreaterThan | Operator::LessThan) && values[0].parse::<i64>().is_err() {
            return Err(err(format!(
                "values[0]: Invalid value: {:?}: for 'Gt', 'Lt' operators, the value must be an integer",
                values[0]
            )));
        }
        for v in &values {
            check_value(&key, v)?;
        }
        Ok(Requirement { key, operator, values })
    }

    /// `(a,b)`; `()` and empty items are the empty value.
    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        let t = self.next_value();
        if t != Token::Open {
            return Err(err(format!("found '{t}' expected: '('")));
        }
        let mut set = std::collections::BTreeSet::new();
        match self.peek_value() {
            Token::Close => {
                self.next_value();
                set.insert(String::new());
                return Ok(set.into_iter().collect());
            }
            Token::Identifier(_) | Token::Comma => {}
            t => return Err(err(format!("found '{t}', expected: ',', ')' or identifier"))),
        }
        loop {
            match self.next_value() {
                Token::Identifier(v) => {
                    set.insert(v);
                    match self.peek_value() {
                        Token::Comma => {}
                        Token::Close => break,
                        t => return Err(err(format!("found '{t}', expected: ',' or ')'"))),
                    }
                }
                Token::Comma => {
                    if set.is_empty() {
                        set.insert(String::new());
                    }
                    match self.peek_value() {
                        Token::Close => {
                            set.insert(String::new());
                            break;
                        }
                        Token::Comma => {
                            set.insert(String::new());
                        }
                        _ => {}
                    }
                }
                t => return Err(err(format!("found '{t}', expected: ',', or identifier"))),
            }
        }
        let t = self.next_value();
        if t != Token::Close {
            return Err(err(format!("found '{t}', expected: ')'")));
        }
        Ok(set.into_iter().collect())
    }

    /// The one value of `=`, `==`, `!=`, `>`, `<` (empty at the end or before a comma).
    fn exact_value(&mut self) -> Result<String, SelectorError> {
        match self.peek_value() {
            Token::End | Token::Comma => Ok(String::new()),
            _ => match self.next_value() {
                Token::Identifier(v) => Ok(v),
                t => Err(err(format!("found '{t}', expected: identifier"))),
            },
        }
    }
}

fn err(s: String) -> SelectorError {
    SelectorError(s)
}

/// A label name part or value: at most 63 of `[A-Za-z0-9_.-]`, starting and ending alphanumeric.
fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// A DNS-1123 subdomain: at most 253 characters, lowercase labels of `[a-z0-9-]` joined by dots.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|l| {
            let b = l.as_bytes();
            !b.is_empty()
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
        })
}

/// apimachinery `IsQualifiedName`: `[prefix/]name`.
fn check_key(key: &str) -> Result<(), SelectorError> {
    let bad = |why: &str| Err(err(format!("key: Invalid value: {key:?}: {why}")));
    let (prefix, name) = match key.split('/').collect::<Vec<_>>().as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => return bad("a qualified name must be a name with an optional DNS subdomain prefix and '/'"),
    };
    if let Some(p) = prefix
        && !is_dns_subdomain(p)
    {
        return bad("prefix part must be a lowercase DNS-1123 subdomain");
    }
    if !is_label_name(name) {
        return bad(
            "name part must be at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric character",
        );
    }
    Ok(())
}

/// apimachinery `IsValidLabelValue`: empty, or a label name.
fn check_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_label_name(value) {
        return Ok(());
    }
    Err(err(format!(
        "values[0][{key}]: Invalid value: {value:?}: a valid label must be an empty string or at most 63 characters of alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric character"
    )))
}

/// Parses a label selector as the API server does; the empty selector has no requirements (everything).
pub fn parse(selector: &str) -> Result<Vec<Requirement>, SelectorError> {
    let mut requirements = Parser { tokens: lex(selector), at: 0 }.selector()?;
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(requirements)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What kube-apiserver v1.36.2 answered to `GET /api/v1/namespaces/default/configmaps?labelSelector=…`
    /// (druidctl's differential test asks both servers again).
    const SERVER_ANSWERS: &[(&str, bool)] = &[
        ("app in ()", true),
        ("app notin ()", true),
        ("app in (a,)", true),
        ("a in (,)", true),
        ("app=", true),
        ("a>1", true),
        ("a>x", false),
        ("app in (a", false),
        ("!app=b", false),
        ("app in a", false),
        ("", true),
        ("x/y/z=a", false),
        ("a==b==c", false),
        ("A_b.c=d", true),
        ("-a=b", false),
        ("a=-b", false),
        ("a b", false),
        (",", false),
        ("a,", false),
        ("a=b,,c=d", false),
        ("a in (b c)", false),
        ("a notin (b),!c", true),
    ];

    #[test]
    fn accepts_and_refuses_what_the_api_server_does() {
        for (s, ok) in SERVER_ANSWERS {
            assert_eq!(parse(s).is_ok(), *ok, "{s:?}: {:?}", parse(s));
        }
    }

    #[test]
    fn parses_every_operator_and_the_empty_value() {
        let r = parse("a in (x,,y), b notin (), !c, d, e==1, f!=, g>3, h<2, app.kubernetes.io/name=etcd").unwrap();
        let ops: Vec<(&str, Operator, Vec<&str>)> =
            r.iter().map(|r| (r.key.as_str(), r.operator, r.values.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            ops,
            [
                ("a", Operator::In, vec!["", "x", "y"]),
                ("app.kubernetes.io/name", Operator::Equals, vec!["etcd"]),
                ("b", Operator::NotIn, vec![""]),
                ("c", Operator::DoesNotExist, vec![]),
                ("d", Operator::Exists, vec![]),
                ("e", Operator::DoubleEquals, vec!["1"]),
                ("f", Operator::NotEquals, vec![""]),
                ("g", Operator::GreaterThan, vec!["3"]),
                ("h", Operator::LessThan, vec!["2"]),
            ]
        );
        assert_eq!(parse("in in (in, notin)").unwrap()[0].values, ["in", "notin"], "keywords are words as values");
        assert!(parse("h<-2").is_err(), "a value, also of `<`, starts alphanumeric");
    }

    #[test]
    fn errors_read_like_the_servers() {
        assert_eq!(parse("a,").unwrap_err().to_string(), "found '', expected: identifier after ','");
        assert_eq!(parse("!app=b").unwrap_err().to_string(), "found '=', expected: ',' or 'end of string'");
        assert_eq!(
            parse("a b").unwrap_err().to_string(),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(parse("app in a").unwrap_err().to_string(), "unable to parse requirement: found 'a' expected: '('");
        assert!(parse("k=v".repeat(30).as_str()).is_err());
        assert!(parse(&format!("{}=v", "k".repeat(64))).is_err(), "name part over 63 characters");
        assert!(parse(&format!("{}/k=v", "Ex.com")).is_err(), "prefix must be lowercase");
    }
}
