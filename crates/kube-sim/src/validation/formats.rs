//! String formats kube-apiserver checks in CRD schemas (`supportedVersionedFormats` of
//! apiextensions-apiserver, validated with kube-openapi's `strfmt.Default`). Every other format
//! (`int32`, `int64`, `float`, `double`, ...) is stripped from the schema and never checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::LazyLock;

use base64::Engine;
use regex::Regex;

/// Formats kube-apiserver keeps in CRD schemas (the others are stripped and never checked).
const SUPPORTED: &[&str] = &[
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// Whether kube-apiserver validates `format` at all.
pub(crate) fn is_supported(format: &str) -> bool {
    SUPPORTED.contains(&format.replace('-', "").as_str())
}

/// Whether `s` is valid for `format`; unsupported formats accept everything.
pub(crate) fn is_valid(format: &str, s: &str) -> bool {
    match format.replace('-', "").as_str() {
        "bsonobjectid" => s.len() == 24 && s.chars().all(|c| c.is_ascii_hexdigit()),
        "uri" => is_request_uri(s),
        "email" => is_email(s),
        "hostname" => is_hostname(s),
        "ipv4" => s.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => s.contains(':') && s.parse::<Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        "mac" => MAC.is_match(s),
        "uuid" => UUID.is_match(s),
        "uuid3" => UUID3.is_match(s),
        "uuid4" => UUID4.is_match(s),
        "uuid5" => UUID5.is_match(s),
        "isbn" => is_isbn10(s) || is_isbn13(s),
        "isbn10" => is_isbn10(s),
        "isbn13" => is_isbn13(s),
        "creditcard" => CREDIT_CARD.is_match(&s.chars().filter(char::is_ascii_digit).collect::<String>()),
        "ssn" => SSN.is_match(s),
        "hexcolor" => HEX_COLOR.is_match(s),
        "rgbcolor" => RGB_COLOR.is_match(s),
        "byte" => base64::engine::general_purpose::STANDARD.decode(s).is_ok(),
        "password" => true,
        "date" => DATE.is_match(s) && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        "duration" => is_duration(s),
        "datetime" => is_date_time(s),
        _ => true,
    }
}

static MAC: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{2}[:-]){7}[0-9A-Fa-f]{2}$|^([0-9A-Fa-f]{4}\.){2}[0-9A-Fa-f]{4}$").unwrap()
});
static UUID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$").unwrap());
static UUID3: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?3[0-9a-f]{3}-?[0-9a-f]{4}-?[0-9a-f]{12}$").unwrap());
static UUID4: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?4[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$").unwrap()
});
static UUID5: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?5[0-9a-f]{3}-?[89ab][0-9a-f]{3}-?[0-9a-f]{12}$").unwrap()
});
static CREDIT_CARD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:4[0-9]{12}(?:[0-9]{3})?|5[1-5][0-9]{14}|6(?:011|5[0-9][0-9])[0-9]{12}|3[47][0-9]{13}|3(?:0[0-5]|[68][0-9])[0-9]{11}|(?:2131|1800|35\d{3})\d{11})$").unwrap()
});
static SSN: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\d{3}[- ]?\d{2}[- ]?\d{4}$").unwrap());
static HEX_COLOR: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^#?([0-9a-fA-F]{3}|[0-9a-fA-F]{6})$").unwrap());
static RGB_COLOR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^rgb\(\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*,\s*(0|[1-9]\d?|1\d\d?|2[0-4]\d|25[0-5])\s*\)$").unwrap()
});
static DATE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\d{4}-\d{2}-\d{2}$").unwrap());
static HOSTNAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^([a-zA-Z0-9\p{S}\p{L}]((-?[a-zA-Z0-9\p{S}\p{L}]{0,62})?)|([a-zA-Z0-9\p{S}\p{L}](([a-zA-Z0-9-\p{S}\p{L}]{0,61}[a-zA-Z0-9\p{S}\p{L}])?)(\.)){1,}([a-zA-Z\p{L}]){2,63})$").unwrap()
});
static EMAIL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(?:[^<>@\s]+\s*<)?[^@\s<>]+@[^@\s<>]+>?$").unwrap());
static GO_DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^[-+]?(\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))*$|^[-+]?0$")
        .unwrap()
});
static SCALA_DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^((\d+)\s*(ns|us|ms|s|m|h|d|w|nano|nanos|nanosecond|nanoseconds|micro|micros|microsecond|microseconds|milli|millis|millisecond|milliseconds|sec|secs|second|seconds|min|mins|minute|minutes|hour|hours|day|days|week|weeks))$").unwrap()
});

/// Go's `url.ParseRequestURI`: an absolute URI or an absolute path.
fn is_request_uri(s: &str) -> bool {
    if s.is_empty() || s.chars().any(|c| c.is_control() || c == ' ') {
        return false;
    }
    if s.starts_with('/') {
        return true;
    }
    match s.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        }
        None => false,
    }
}

fn is_email(s: &str) -> bool {
    EMAIL.is_match(s)
}

fn is_hostname(s: &str) -> bool {
    s.len() <= 255 && HOSTNAME.is_match(s)
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

fn is_isbn10(s: &str) -> bool {
    let d: Vec<char> = s.chars().filter(|c| *c != '-' && *c != ' ').collect();
    if d.len() != 10 {
        return false;
    }
    let mut sum = 0;
    for (i, c) in d.iter().enumerate() {
        let v = match c {
            '0'..='9' => *c as u32 - '0' as u32,
            'X' | 'x' if i == 9 => 10,
            _ => return false,
        };
        sum += v * (10 - i as u32);
    }
    sum % 11 == 0
}

fn is_isbn13(s: &str) -> bool {
    let d: Vec<u32> = s.chars().filter(|c| *c != '-' && *c != ' ').filter_map(|c| c.to_digit(10)).collect();
    if d.len() != 13 || s.chars().filter(|c| *c != '-' && *c != ' ').count() != 13 {
        return false;
    }
    let sum: u32 = d.iter().enumerate().map(|(i, v)| if i % 2 == 0 { *v } else { v * 3 }).sum();
    sum.is_multiple_of(10)
}

/// `strfmt.ParseDuration`: Go durations or Scala-style `22 ns`.
fn is_duration(s: &str) -> bool {
    GO_DURATION.is_match(s) || SCALA_DURATION.is_match(s)
}

/// Go's `time.ParseDuration` (`1h30m`, `-1.5s`, `0`).
pub(crate) fn parse_go_duration(s: &str) -> Option<chrono::Duration> {
    let (neg, mut rest) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(chrono::Duration::zero());
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let num: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let nanos = match &rest[..unit_end] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += num * nanos;
        rest = &rest[unit_end..];
    }
    let nanos = if neg { -total } else { total };
    (nanos.abs() < 9.2e18).then(|| chrono::Duration::nanoseconds(nanos.round() as i64))
}

/// `strfmt.ParseDateTime`: RFC 3339 (with optional fractional seconds), also without a zone colon.
pub(crate) fn is_date_time(s: &str) -> bool {
    parse_date_time(s).is_some()
}

/// Parses what `strfmt.ParseDateTime` accepts into a fixed-offset time.
pub(crate) fn parse_date_time(s: &str) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t);
    }
    for layout in ["%Y-%m-%dT%H:%M:%S%.f%z", "%Y-%m-%dT%H:%M:%S%z"] {
        if let Ok(t) = chrono::DateTime::parse_from_str(s, layout) {
            return Some(t);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_time_accepts_rfc3339_and_rejects_garbage() {
        assert!(is_valid("date-time", "2024-01-02T03:04:05Z"));
        assert!(is_valid("date-time", "2024-01-02T03:04:05.123+02:00"));
        assert!(!is_valid("date-time", "yesterday"));
    }

    #[test]
    fn integer_formats_are_not_checked() {
        assert!(is_valid("int32", "anything"));
    }

    #[test]
    fn byte_is_base64() {
        assert!(is_valid("byte", "aGVsbG8="));
        assert!(!is_valid("byte", "not base64!"));
    }
}
