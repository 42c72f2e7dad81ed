//! Values as envoyproxy/ratelimit reads them from its environment (Go's `envconfig`): the
//! spellings of booleans, numbers, durations, lists and maps that its users' manifests hold.

use std::time::Duration;

/// A boolean as Go's `strconv.ParseBool` takes it.
pub(crate) fn boolean(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!(
            "{text:?} is not a boolean (1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)"
        )),
    }
}

/// A whole number as Go's `strconv.ParseInt(text, 0, 64)` takes it: decimal, or `0x`, `0o`,
/// `0b` and leading-`0` octal, with `_` between digits after a prefix.
pub(crate) fn integer(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a whole number");
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(rest) = lower.strip_prefix("0x") {
        (16, rest.replace('_', ""))
    } else if let Some(rest) = lower.strip_prefix("0o") {
        (8, rest.replace('_', ""))
    } else if let Some(rest) = lower.strip_prefix("0b") {
        (2, rest.replace('_', ""))
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, lower[1..].replace('_', ""))
    } else {
        (10, lower.clone())
    };
    if body.is_empty() || body.starts_with('+') || body.starts_with('-') {
        return Err(bad());
    }
    let magnitude = i128::from_str_radix(&body, radix).map_err(|_| bad())?;
    let value = if negative { -magnitude } else { magnitude };
    i64::try_from(value).map_err(|_| bad())
}

/// A number as Go's `strconv.ParseFloat` takes it (the common spellings).
pub(crate) fn float(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .map_err(|_| format!("{text:?} is not a number"))
}

/// A duration as Go's `time.ParseDuration` takes it: `300ms`, `1.5h`, `1h2m3s`, `250us`, or a
/// bare `0`. Negative durations mean nothing for these settings and are refused.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| format!("{text:?} is not a duration ({why}; e.g. 300ms, 10s, 1h30m)");
    let unsigned = text.strip_prefix('+').unwrap_or(text);
    if unsigned.starts_with('-') {
        return Err(bad("it is negative"));
    }
    if unsigned == "0" {
        return Ok(Duration::ZERO);
    }
    if unsigned.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total = 0f64;
    let mut rest = unsigned;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() || number == "." {
            return Err(bad("a number is missing"));
        }
        let value: f64 = number.parse().map_err(|_| bad("a number does not parse"))?;
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let nanos_per_unit = match unit {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(bad("a unit is missing")),
            _ => return Err(bad("the unit is not one of ns, us, ms, s, m, h")),
        };
        total += value * nanos_per_unit;
        rest = next;
    }
    if total > u64::MAX as f64 {
        return Err(bad("it is too long"));
    }
    Ok(Duration::from_nanos(total as u64))
}

/// A list as `envconfig` splits it: on `,`, untrimmed; empty (after trimming) for none.
pub(crate) fn list(text: &str) -> Vec<String> {
    if text.trim().is_empty() {
        return Vec::new();
    }
    text.split(',').map(str::to_owned).collect()
}

/// A map as `envconfig` reads it: `k1:v1,k2:v2`, each item exactly one `:`, untrimmed.
pub(crate) fn map(text: &str) -> Result<Vec<(String, String)>, String> {
    list(text)
        .into_iter()
        .map(|item| {
            let parts: Vec<&str> = item.split(':').collect();
            match parts.as_slice() {
                [key, value] => Ok(((*key).to_owned(), (*value).to_owned())),
                _ => Err(format!("{item:?} is not a key:value item")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booleans_take_gos_spellings_only() {
        for text in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(boolean(text), Ok(true), "{text}");
        }
        for text in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(boolean(text), Ok(false), "{text}");
        }
        for text in ["yes", "on", "", "tRUE", " true"] {
            assert!(boolean(text).is_err(), "{text}");
        }
    }

    #[test]
    fn integers_take_gos_prefixes() {
        assert_eq!(integer("8080"), Ok(8080));
        assert_eq!(integer("0x10"), Ok(16));
        assert_eq!(integer("010"), Ok(8));
        assert_eq!(integer("0o17"), Ok(15));
        assert_eq!(integer("0b101"), Ok(5));
        assert_eq!(integer("-3"), Ok(-3));
        assert_eq!(integer("0"), Ok(0));
        for text in ["", "8080 ", "0x", "12a", "99999999999999999999", "--1"] {
            assert!(integer(text).is_err(), "{text}");
        }
    }

    #[test]
    fn durations_take_gos_form() {
        assert_eq!(duration("0"), Ok(Duration::ZERO));
        assert_eq!(duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("1h2m3s"), Ok(Duration::from_secs(3723)));
        assert_eq!(duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(duration("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(duration("24h"), Ok(Duration::from_secs(86_400)));
        for text in ["", "10", "5x", "-1s", "s", "1.s.", "1h 2m"] {
            assert!(duration(text).is_err(), "{text}");
        }
    }

    #[test]
    fn maps_and_lists_split_as_envconfig_does() {
        assert_eq!(
            map("a:1,b:2"),
            Ok(vec![
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ])
        );
        assert_eq!(map(""), Ok(Vec::new()));
        assert_eq!(map("  "), Ok(Vec::new()));
        assert!(map("a:1:2").is_err());
        assert!(map("a").is_err());
        assert_eq!(list("x, y"), vec!["x".to_owned(), " y".to_owned()]);
    }
}
