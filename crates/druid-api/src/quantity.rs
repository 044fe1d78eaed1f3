//! Kubernetes quantities (`8Gi`, `500M`, `1.5Gi`) as bytes, and bytes as short binary sizes (`412Mi`).
//!
//! k8s-openapi's `Quantity` is only the string; the quantity crates on crates.io either pull in a big numeric
//! stack or do not round-trip the suffixes kube-apiserver accepts. The subset a quota uses (an integer or decimal
//! with a binary or decimal suffix) is parsed here.

/// Bytes of a quantity such as `8Gi`, `8589934592`, `500M` or `1.5Gi`; `None` when it is not one.
pub fn parse_bytes(text: &str) -> Option<i64> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let multiplier: f64 = match suffix {
        "" => 1.0,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        _ => return None,
    };
    if number.is_empty() {
        return None;
    }
    let value: f64 = number.parse().ok()?;
    let bytes = (value * multiplier).ceil();
    (bytes.is_finite() && bytes >= 0.0 && bytes <= i64::MAX as f64).then_some(bytes as i64)
}

/// Bytes of a quantity field the CRD types as int-or-string (`spec.etcd.quota`: `8Gi` or `8589934592`).
pub fn int_or_string_bytes(q: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString) -> Option<i64> {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match q {
        IntOrString::Int(i) => (*i >= 0).then_some(i64::from(*i)),
        IntOrString::String(s) => parse_bytes(s),
    }
}

/// A byte count in the largest binary unit that keeps it at or above 1, with at most one decimal (`412Mi`,
/// `1.5Gi`, `8Gi`, `900B`), as `kubectl` and `etcdctl -w table` users read sizes.
pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
    if bytes.abs() < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64;
    let mut unit = "";
    for u in UNITS {
        if value.abs() < 1024.0 {
            break;
        }
        value /= 1024.0;
        unit = u;
    }
    if value.abs() >= 10.0 || (value - value.round()).abs() < 0.05 {
        format!("{}{unit}", value.round() as i64)
    } else {
        format!("{value:.1}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_parse_to_bytes() {
        assert_eq!(parse_bytes("8Gi"), Some(8 * 1024 * 1024 * 1024));
        assert_eq!(parse_bytes("8589934592"), Some(8_589_934_592));
        assert_eq!(parse_bytes("500M"), Some(500_000_000));
        assert_eq!(parse_bytes("1.5Gi"), Some(1_610_612_736));
        assert_eq!(parse_bytes("2Mi"), Some(2 * 1024 * 1024));
        assert_eq!(parse_bytes("Gi"), None);
        assert_eq!(parse_bytes("8 apples"), None);
        assert_eq!(parse_bytes("-1"), None);
    }

    #[test]
    fn sizes_read_as_short_binary_units() {
        assert_eq!(human_bytes(900), "900B");
        assert_eq!(human_bytes(412 * 1024 * 1024), "412Mi");
        assert_eq!(human_bytes(8 * 1024 * 1024 * 1024), "8Gi");
        assert_eq!(human_bytes(1_610_612_736), "1.5Gi");
        assert_eq!(human_bytes(20 * 1024), "20Ki");
    }
}
