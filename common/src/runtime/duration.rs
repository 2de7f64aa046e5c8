//! Go-style durations (`30s`, `1m30s`, `750ms`, `1.5h`), as Flux's flags and specs use them.

use std::time::Duration;

/// Why a Go duration string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// The input was empty.
    #[error("invalid duration: empty string")]
    Empty,
    /// Negative durations are not accepted here.
    #[error("invalid duration {0:?}: negative durations are not allowed")]
    Negative(String),
    /// A number was expected.
    #[error("invalid duration {0:?}: expected a number")]
    ExpectedNumber(String),
    /// A unit was missing after a number.
    #[error("invalid duration {0:?}: missing unit (one of ns, us, µs, ms, s, m, h)")]
    MissingUnit(String),
    /// The unit is not one Go knows.
    #[error("invalid duration {input:?}: unknown unit {unit:?}")]
    UnknownUnit {
        /// Whole input.
        input: String,
        /// The offending unit.
        unit: String,
    },
    /// The value does not fit.
    #[error("invalid duration {0:?}: out of range")]
    Overflow(String),
}

/// Parses a Go `time.ParseDuration` string into a [`Duration`] (non-negative only).
///
/// Accepts `0`, sequences of `<decimal><unit>` such as `1h30m`, `1.5s`, `750ms`, and an optional leading `+`.
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    let s = if let Some(rest) = s.strip_prefix('+') {
        rest
    } else if s.starts_with('-') {
        // "-0" is zero in Go; anything else negative is refused.
        if s.trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
        {
            return Ok(Duration::ZERO);
        }
        return Err(DurationError::Negative(input.to_string()));
    } else {
        s
    };
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total_nanos: u128 = 0;
    let mut rest = s;
    if rest.is_empty() {
        return Err(DurationError::ExpectedNumber(input.to_string()));
    }
    while !rest.is_empty() {
        let num_len = rest
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
            .map_or(rest.len(), |(i, _)| i);
        let num = &rest[..num_len];
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(DurationError::ExpectedNumber(input.to_string()));
        }
        rest = &rest[num_len..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let unit_nanos: u128 = match unit {
            "" => return Err(DurationError::MissingUnit(input.to_string())),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60 * 1_000_000_000,
            "h" => 3_600 * 1_000_000_000,
            other => {
                return Err(DurationError::UnknownUnit {
                    input: input.to_string(),
                    unit: other.to_string(),
                });
            }
        };
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        let int_value: u128 = if int_part.is_empty() {
            0
        } else {
            int_part
                .parse::<u128>()
                .map_err(|_| DurationError::Overflow(input.to_string()))?
        };
        let mut nanos = int_value
            .checked_mul(unit_nanos)
            .ok_or_else(|| DurationError::Overflow(input.to_string()))?;
        if !frac_part.is_empty() {
            // Keep at most 18 fractional digits; more cannot change a nanosecond result.
            let digits = &frac_part[..frac_part.len().min(18)];
            let frac_value: u128 = digits
                .parse::<u128>()
                .map_err(|_| DurationError::ExpectedNumber(input.to_string()))?;
            let scale = 10u128.pow(u32::try_from(digits.len()).unwrap_or(18));
            nanos = nanos
                .checked_add(frac_value * unit_nanos / scale)
                .ok_or_else(|| DurationError::Overflow(input.to_string()))?;
        }
        total_nanos = total_nanos
            .checked_add(nanos)
            .ok_or_else(|| DurationError::Overflow(input.to_string()))?;
    }
    let secs = u64::try_from(total_nanos / 1_000_000_000)
        .map_err(|_| DurationError::Overflow(input.to_string()))?;
    let sub = u32::try_from(total_nanos % 1_000_000_000)
        .map_err(|_| DurationError::Overflow(input.to_string()))?;
    Ok(Duration::new(secs, sub))
}

/// Formats a [`Duration`] the way Go's `time.Duration.String()` does (`1m30s`, `750ms`, `0s`).
pub fn format_go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".to_string();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", trim_fraction(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", trim_fraction(nanos, 1_000_000));
    }
    let total_secs = nanos / 1_000_000_000;
    let sub_nanos = nanos % 1_000_000_000;
    let hours = total_secs / 3600;
    let minutes = (total_secs % 3600) / 60;
    let secs = total_secs % 60;
    let mut out = String::new();
    if hours > 0 {
        out.push_str(&format!("{hours}h"));
    }
    if hours > 0 || minutes > 0 {
        out.push_str(&format!("{minutes}m"));
    }
    out.push_str(&trim_fraction(
        secs * 1_000_000_000 + sub_nanos,
        1_000_000_000,
    ));
    out.push('s');
    out
}

fn trim_fraction(value: u128, unit: u128) -> String {
    let int = value / unit;
    let frac = value % unit;
    if frac == 0 {
        return int.to_string();
    }
    let width = unit.to_string().len() - 1;
    let frac_str = format!("{frac:0width$}");
    format!("{int}.{}", frac_str.trim_end_matches('0'))
}

/// A clap value parser for Go-style durations.
pub fn clap_duration(s: &str) -> Result<Duration, DurationError> {
    parse_go_duration(s)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_examples() {
        assert_eq!(parse_go_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(
            parse_go_duration("750ms").unwrap(),
            Duration::from_millis(750)
        );
        assert_eq!(parse_go_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(
            parse_go_duration("1h30m").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(
            parse_go_duration("1.5h").unwrap(),
            Duration::from_secs(5400)
        );
        assert_eq!(parse_go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_go_duration("-0").unwrap(), Duration::ZERO);
        assert_eq!(parse_go_duration("+2s").unwrap(), Duration::from_secs(2));
        assert_eq!(
            parse_go_duration(".5s").unwrap(),
            Duration::from_millis(500)
        );
        assert_eq!(
            parse_go_duration("10us").unwrap(),
            Duration::from_micros(10)
        );
        assert_eq!(parse_go_duration("3µs").unwrap(), Duration::from_micros(3));
        assert_eq!(
            parse_go_duration("1h2m3s4ms").unwrap(),
            Duration::from_millis(3_723_004)
        );
    }

    #[test]
    fn rejects_bad_input() {
        assert_eq!(parse_go_duration(""), Err(DurationError::Empty));
        assert!(matches!(
            parse_go_duration("10"),
            Err(DurationError::MissingUnit(_))
        ));
        assert!(matches!(
            parse_go_duration("-5s"),
            Err(DurationError::Negative(_))
        ));
        assert!(matches!(
            parse_go_duration("5d"),
            Err(DurationError::UnknownUnit { .. })
        ));
        assert!(matches!(
            parse_go_duration("s"),
            Err(DurationError::ExpectedNumber(_))
        ));
        assert!(matches!(
            parse_go_duration("1..2s"),
            Err(DurationError::ExpectedNumber(_))
        ));
        assert!(matches!(
            parse_go_duration("99999999999999999999999999999999999999999h"),
            Err(DurationError::Overflow(_))
        ));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format_go_duration(Duration::ZERO), "0s");
        assert_eq!(format_go_duration(Duration::from_secs(90)), "1m30s");
        assert_eq!(format_go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format_go_duration(Duration::from_millis(750)), "750ms");
        assert_eq!(format_go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format_go_duration(Duration::from_nanos(12)), "12ns");
    }

    #[test]
    fn round_trips() {
        for s in ["1m30s", "750ms", "1h0m0s", "2.25s", "35s"] {
            assert_eq!(format_go_duration(parse_go_duration(s).unwrap()), s);
        }
    }
}
