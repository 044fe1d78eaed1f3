//! The syntax errors of Go's `encoding/json`, word for word.
//!
//! kube-apiserver reads the kind of a JSON body with `encoding/json` (apimachinery
//! `runtime/serializer/json/meta.go` `SimpleMetaFactory.Interpret`), whose `Unmarshal` first checks the whole input
//! with its scanner (`encoding/json/scanner.go` `checkValid`) and reports the first syntax error in the scanner's
//! words (`invalid character 'n' looking for beginning of object key string`). Clients and tests see that text in
//! the 400 answer; serde_json finds the same errors but words them differently (`key must be a string at line 1
//! column 2`) and no maintained crate reproduces Go's messages, so this module walks Go's scanner states itself.

/// Go's nesting limit (`encoding/json/scanner.go` `maxNestingDepth`).
const MAX_DEPTH: usize = 10000;

/// Where the scanner is: the states of `encoding/json/scanner.go` (`stateBeginValue`, `stateInString`, …).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    BeginValue,
    BeginValueOrEmpty,
    BeginStringOrEmpty,
    BeginString,
    EndValue,
    EndTop,
    InString,
    InStringEsc,
    InStringEscU(u8),
    Neg,
    One,
    Zero,
    Dot,
    Dot0,
    E,
    ESign,
    E0,
    /// Inside a literal: the literal and how many of its bytes were read.
    Literal(&'static str, usize),
}

/// What an open container expects next (`parseObjectKey`, `parseObjectValue`, `parseArrayValue`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parse {
    ObjectKey,
    ObjectValue,
    ArrayValue,
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

/// Go's `quoteChar`: the byte as a rune in single quotes, escaped as `strconv.Quote` escapes it.
fn quote_char(c: u8) -> String {
    let inner = match c {
        b'\'' => return "'\\''".into(),
        b'"' => return "'\"'".into(),
        0x07 => "\\a".into(),
        0x08 => "\\b".into(),
        0x0c => "\\f".into(),
        b'\n' => "\\n".into(),
        b'\r' => "\\r".into(),
        b'\t' => "\\t".into(),
        0x0b => "\\v".into(),
        b'\\' => "\\\\".into(),
        c if c < 0x20 || c == 0x7f => format!("\\x{c:02x}"),
        // `string(byte)` is the rune U+0080..U+00FF; of those `strconv.IsPrint` rejects the C1 controls, the
        // no-break space and the soft hyphen.
        c if (0x80..=0xa0).contains(&c) || c == 0xad => format!("\\u{c:04x}"),
        c => char::from(c).to_string(),
    };
    format!("'{inner}'")
}

struct Scanner {
    state: State,
    stack: Vec<Parse>,
}

impl Scanner {
    fn error(c: u8, context: &str) -> String {
        format!("invalid character {} {context}", quote_char(c))
    }

    /// The state after a value ended, re-reading `c` there (`stateEndValue`).
    fn end_value(&mut self, c: u8) -> Result<(), String> {
        self.state = State::EndValue;
        let Some(&top) = self.stack.last() else {
            self.state = State::EndTop;
            return self.step(c);
        };
        if is_space(c) {
            return Ok(());
        }
        match (top, c) {
            (Parse::ObjectKey, b':') => {
                *self.stack.last_mut().unwrap() = Parse::ObjectValue;
                self.state = State::BeginValue;
                Ok(())
            }
            (Parse::ObjectKey, _) => Err(Self::error(c, "after object key")),
            (Parse::ObjectValue, b',') => {
                *self.stack.last_mut().unwrap() = Parse::ObjectKey;
                self.state = State::BeginString;
                Ok(())
            }
            (Parse::ObjectValue, b'}') => self.pop(),
            (Parse::ObjectValue, _) => Err(Self::error(c, "after object key:value pair")),
            (Parse::ArrayValue, b',') => {
                self.state = State::BeginValue;
                Ok(())
            }
            (Parse::ArrayValue, b']') => self.pop(),
            (Parse::ArrayValue, _) => Err(Self::error(c, "after array element")),
        }
    }

    fn pop(&mut self) -> Result<(), String> {
        self.stack.pop();
        self.state = if self.stack.is_empty() { State::EndTop } else { State::EndValue };
        Ok(())
    }

    fn push(&mut self, c: u8, p: Parse, next: State) -> Result<(), String> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(Self::error(c, "exceeded max depth"));
        }
        self.stack.push(p);
        self.state = next;
        Ok(())
    }

    fn begin_value(&mut self, c: u8) -> Result<(), String> {
        if is_space(c) {
            return Ok(());
        }
        match c {
            b'{' => self.push(c, Parse::ObjectKey, State::BeginStringOrEmpty),
            b'[' => self.push(c, Parse::ArrayValue, State::BeginValueOrEmpty),
            b'"' => {
                self.state = State::InString;
                Ok(())
            }
            b'-' => {
                self.state = State::Neg;
                Ok(())
            }
            b'0' => {
                self.state = State::Zero;
                Ok(())
            }
            b'1'..=b'9' => {
                self.state = State::One;
                Ok(())
            }
            b't' => {
                self.state = State::Literal("true", 1);
                Ok(())
            }
            b'f' => {
                self.state = State::Literal("false", 1);
                Ok(())
            }
            b'n' => {
                self.state = State::Literal("null", 1);
                Ok(())
            }
            _ => Err(Self::error(c, "looking for beginning of value")),
        }
    }

    fn step(&mut self, c: u8) -> Result<(), String> {
        match self.state {
            State::BeginValue => self.begin_value(c),
            State::BeginValueOrEmpty => {
                if is_space(c) {
                    Ok(())
                } else if c == b']' {
                    self.end_value(c)
                } else {
                    self.begin_value(c)
                }
            }
            State::BeginStringOrEmpty => {
                if is_space(c) {
                    Ok(())
                } else if c == b'}' {
                    *self.stack.last_mut().unwrap() = Parse::ObjectValue;
                    self.end_value(c)
                } else {
                    self.state = State::BeginString;
                    self.step(c)
                }
            }
            State::BeginString => {
                if is_space(c) {
                    Ok(())
                } else if c == b'"' {
                    self.state = State::InString;
                    Ok(())
                } else {
                    Err(Self::error(c, "looking for beginning of object key string"))
                }
            }
            State::EndValue => self.end_value(c),
            State::EndTop => {
                if is_space(c) {
                    Ok(())
                } else {
                    Err(Self::error(c, "after top-level value"))
                }
            }
            State::InString => match c {
                b'"' => {
                    self.state = State::EndValue;
                    Ok(())
                }
                b'\\' => {
                    self.state = State::InStringEsc;
                    Ok(())
                }
                c if c < 0x20 => Err(Self::error(c, "in string literal")),
                _ => Ok(()),
            },
            State::InStringEsc => match c {
                b'b' | b'f' | b'n' | b'r' | b't' | b'\\' | b'/' | b'"' => {
                    self.state = State::InString;
                    Ok(())
                }
                b'u' => {
                    self.state = State::InStringEscU(0);
                    Ok(())
                }
                _ => Err(Self::error(c, "in string escape code")),
            },
            State::InStringEscU(n) => {
                if c.is_ascii_hexdigit() {
                    self.state = if n == 3 { State::InString } else { State::InStringEscU(n + 1) };
                    Ok(())
                } else {
                    Err(Self::error(c, "in \\u hexadecimal character escape"))
                }
            }
            State::Neg => match c {
                b'0' => {
                    self.state = State::Zero;
                    Ok(())
                }
                b'1'..=b'9' => {
                    self.state = State::One;
                    Ok(())
                }
                _ => Err(Self::error(c, "in numeric literal")),
            },
            State::One if c.is_ascii_digit() => Ok(()),
            State::One | State::Zero => match c {
                b'.' => {
                    self.state = State::Dot;
                    Ok(())
                }
                b'e' | b'E' => {
                    self.state = State::E;
                    Ok(())
                }
                _ => self.end_value(c),
            },
            State::Dot => {
                if c.is_ascii_digit() {
                    self.state = State::Dot0;
                    Ok(())
                } else {
                    Err(Self::error(c, "after decimal point in numeric literal"))
                }
            }
            State::Dot0 => match c {
                b'0'..=b'9' => Ok(()),
                b'e' | b'E' => {
                    self.state = State::E;
                    Ok(())
                }
                _ => self.end_value(c),
            },
            State::E if c == b'+' || c == b'-' => {
                self.state = State::ESign;
                Ok(())
            }
            State::E | State::ESign => {
                if c.is_ascii_digit() {
                    self.state = State::E0;
                    Ok(())
                } else {
                    Err(Self::error(c, "in exponent of numeric literal"))
                }
            }
            State::E0 => {
                if c.is_ascii_digit() {
                    Ok(())
                } else {
                    self.end_value(c)
                }
            }
            State::Literal(lit, n) => {
                let want = lit.as_bytes()[n];
                if c != want {
                    return Err(Self::error(c, &format!("in literal {lit} (expecting {})", quote_char(want))));
                }
                self.state = if n + 1 == lit.len() { State::EndValue } else { State::Literal(lit, n + 1) };
                Ok(())
            }
        }
    }
}

/// The syntax error Go's `json.Unmarshal` reports for `data`, or `None` when Go's scanner accepts it.
pub fn syntax_error(data: &[u8]) -> Option<String> {
    let mut s = Scanner { state: State::BeginValue, stack: Vec::new() };
    for &c in data {
        if let Err(e) = s.step(c) {
            return Some(e);
        }
    }
    // `scanner.eof`: a final space ends a number or a literal; anything still open is cut short.
    if s.state == State::EndTop {
        return None;
    }
    if let Err(e) = s.step(b' ') {
        return Some(e);
    }
    if s.state == State::EndTop { None } else { Some("unexpected end of JSON input".into()) }
}

#[cfg(test)]
mod tests {
    use super::syntax_error;

    #[test]
    fn go_messages() {
        let cases: &[(&str, Option<&str>)] = &[
            ("{not json", Some("invalid character 'n' looking for beginning of object key string")),
            ("", Some("unexpected end of JSON input")),
            ("{\"a\":1", Some("unexpected end of JSON input")),
            ("{\"a\" 1}", Some("invalid character '1' after object key")),
            ("{\"a\":1 2}", Some("invalid character '2' after object key:value pair")),
            ("[1 2]", Some("invalid character '2' after array element")),
            ("{} x", Some("invalid character 'x' after top-level value")),
            ("tru", Some("invalid character ' ' in literal true (expecting 'e')")),
            ("nul!", Some("invalid character '!' in literal null (expecting 'l')")),
            ("-x", Some("invalid character 'x' in numeric literal")),
            ("1.x", Some("invalid character 'x' after decimal point in numeric literal")),
            ("1e+", Some("invalid character ' ' in exponent of numeric literal")),
            ("\"\\q\"", Some("invalid character 'q' in string escape code")),
            ("\"\\u12g4\"", Some("invalid character 'g' in \\u hexadecimal character escape")),
            ("\"a\nb\"", Some("invalid character '\\n' in string literal")),
            ("'a'", Some("invalid character '\\'' looking for beginning of value")),
            ("{\"a\":}", Some("invalid character '}' looking for beginning of value")),
            ("{\"a\": [1, {\"b\": -0.5e-3}], \"c\": null, \"d\": true} ", None),
            ("[]", None),
            ("{ }", None),
            ("12", None),
        ];
        for (input, want) in cases {
            assert_eq!(syntax_error(input.as_bytes()).as_deref(), *want, "input {input:?}");
        }
    }

    #[test]
    fn depth_limit() {
        assert_eq!(
            syntax_error("[".repeat(10001).as_bytes()).as_deref(),
            Some("invalid character '[' exceeded max depth")
        );
    }
}
