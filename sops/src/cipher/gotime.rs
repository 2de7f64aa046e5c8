//! RFC 3339 timestamps read and written the way Go's `time` package does for sops:
//! `time.Parse(time.RFC3339, …)` (also used by `Time.UnmarshalText`) and
//! `Format(time.RFC3339)` / `Format(time.RFC3339Nano)`.

/// A parsed timestamp: the wall-clock fields as written, plus the zone offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GoTime {
    pub year: i16,
    pub month: i8,
    pub day: i8,
    pub hour: i8,
    pub minute: i8,
    pub second: i8,
    pub nanos: i32,
    /// Seconds east of UTC (0 prints as `Z`).
    pub offset: i32,
}

impl GoTime {
    /// Parses like Go's `time.Parse(time.RFC3339, s)`: the strict RFC 3339 form first, then
    /// the looser layout-driven parse (one-digit hour, `,` before the fraction, offsets up
    /// to `24:60`).
    pub(crate) fn parse(s: &str) -> Option<GoTime> {
        parse_strict(s.as_bytes()).or_else(|| parse_layout(s.as_bytes()))
    }

    /// `Format(time.RFC3339)`: seconds precision.
    pub(crate) fn format_seconds(&self) -> String {
        self.format(false)
    }

    /// `Format(time.RFC3339Nano)`: the fraction without trailing zeros, none when zero.
    pub(crate) fn format_nanos(&self) -> String {
        self.format(true)
    }

    fn format(&self, nanos: bool) -> String {
        let mut out = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        );
        if nanos && self.nanos > 0 {
            let frac = format!("{:09}", self.nanos);
            out.push('.');
            out.push_str(frac.trim_end_matches('0'));
        }
        if self.offset == 0 {
            out.push('Z');
        } else {
            let minutes = self.offset / 60;
            let (sign, minutes) = if minutes < 0 {
                ('-', -minutes)
            } else {
                ('+', minutes)
            };
            out.push(sign);
            out.push_str(&format!("{:02}:{:02}", minutes / 60, minutes % 60));
        }
        out
    }

    /// The instant, for callers that want a `jiff` timestamp.
    pub(crate) fn timestamp(&self) -> Option<jiff::Timestamp> {
        let dt = jiff::civil::DateTime::new(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanos,
        )
        .ok()?;
        let offset = jiff::tz::Offset::from_seconds(self.offset).ok()?;
        offset.to_timestamp(dt).ok()
    }
}

fn digits(b: &[u8]) -> Option<i32> {
    if b.is_empty() || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(b.iter().fold(0i32, |acc, d| acc * 10 + i32::from(d - b'0')))
}

fn valid_date(year: i32, month: i32, day: i32) -> bool {
    let (Ok(y), Ok(m), Ok(d)) = (i16::try_from(year), i8::try_from(month), i8::try_from(day))
    else {
        return false;
    };
    jiff::civil::Date::new(y, m, d).is_ok()
}

/// Nanoseconds from the digits after the separator (at most 9 are used, as Go does).
fn nanos(frac: &[u8]) -> i32 {
    let used = &frac[..frac.len().min(9)];
    let mut n = digits(used).unwrap_or(0);
    for _ in used.len()..9 {
        n *= 10;
    }
    n
}

fn build(ymd: (i32, i32, i32), hms: (i32, i32, i32), nanos: i32, offset: i32) -> Option<GoTime> {
    let (year, month, day) = ymd;
    let (hour, minute, second) = hms;
    if !(0..=9999).contains(&year)
        || !(1..=12).contains(&month)
        || !valid_date(year, month, day)
        || !(0..=23).contains(&hour)
        || !(0..=59).contains(&minute)
        || !(0..=59).contains(&second)
    {
        return None;
    }
    Some(GoTime {
        year: i16::try_from(year).ok()?,
        month: i8::try_from(month).ok()?,
        day: i8::try_from(day).ok()?,
        hour: i8::try_from(hour).ok()?,
        minute: i8::try_from(minute).ok()?,
        second: i8::try_from(second).ok()?,
        nanos,
        offset,
    })
}

/// Go's fast path: `YYYY-MM-DDTHH:MM:SS[.fff]` then `Z` or `±hh:mm` (hh ≤ 23, mm ≤ 59).
fn parse_strict(s: &[u8]) -> Option<GoTime> {
    if s.len() < 19 {
        return None;
    }
    if s[4] != b'-' || s[7] != b'-' || s[10] != b'T' || s[13] != b':' || s[16] != b':' {
        return None;
    }
    let ymd = (digits(&s[0..4])?, digits(&s[5..7])?, digits(&s[8..10])?);
    let hms = (
        digits(&s[11..13])?,
        digits(&s[14..16])?,
        digits(&s[17..19])?,
    );
    let mut rest = &s[19..];
    let mut ns = 0;
    if rest.len() >= 2 && rest[0] == b'.' && rest[1].is_ascii_digit() {
        let n = 1 + rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        ns = nanos(&rest[1..n]);
        rest = &rest[n..];
    }
    let offset = if rest == b"Z" {
        0
    } else {
        if rest.len() != 6 || !(rest[0] == b'+' || rest[0] == b'-') || rest[3] != b':' {
            return None;
        }
        let hh = digits(&rest[1..3])?;
        let mm = digits(&rest[4..6])?;
        if hh > 23 || mm > 59 {
            return None;
        }
        let off = (hh * 60 + mm) * 60;
        if rest[0] == b'-' { -off } else { off }
    };
    build(ymd, hms, ns, offset)
}

/// Go's layout-driven `time.Parse` for `2006-01-02T15:04:05Z07:00`: what the fast path
/// refuses but Go still accepts.
fn parse_layout(s: &[u8]) -> Option<GoTime> {
    let take = |s: &mut &[u8], n: usize| -> Option<i32> {
        if s.len() < n {
            return None;
        }
        let v = digits(&s[..n])?;
        *s = &s[n..];
        Some(v)
    };
    let lit = |s: &mut &[u8], c: u8| -> Option<()> {
        if s.first() == Some(&c) {
            *s = &s[1..];
            Some(())
        } else {
            None
        }
    };
    let mut s = s;
    let year = take(&mut s, 4)?;
    lit(&mut s, b'-')?;
    let month = take(&mut s, 2)?;
    lit(&mut s, b'-')?;
    let day = take(&mut s, 2)?;
    lit(&mut s, b'T')?;
    // The hour may have one or two digits.
    let hour_len = if s.len() >= 2 && s[1].is_ascii_digit() {
        2
    } else {
        1
    };
    let hour = take(&mut s, hour_len)?;
    lit(&mut s, b':')?;
    let minute = take(&mut s, 2)?;
    lit(&mut s, b':')?;
    let second = take(&mut s, 2)?;
    let mut ns = 0;
    if s.len() >= 2 && (s[0] == b'.' || s[0] == b',') && s[1].is_ascii_digit() {
        let n = 1 + s[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        ns = nanos(&s[1..n]);
        s = &s[n..];
    }
    let offset = if s.first() == Some(&b'Z') {
        s = &s[1..];
        0
    } else {
        if s.len() < 6 || !(s[0] == b'+' || s[0] == b'-') || s[3] != b':' {
            return None;
        }
        let hh = digits(&s[1..3])?;
        let mm = digits(&s[4..6])?;
        if hh > 24 || mm > 60 {
            return None;
        }
        let off = (hh * 60 + mm) * 60;
        let off = if s[0] == b'-' { -off } else { off };
        s = &s[6..];
        off
    };
    if !s.is_empty() {
        return None;
    }
    build((year, month, day), (hour, minute, second), ns, offset)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::GoTime;

    fn round(s: &str) -> Option<(String, String)> {
        GoTime::parse(s).map(|t| (t.format_seconds(), t.format_nanos()))
    }

    #[test]
    fn strict_and_layout_forms() {
        assert_eq!(
            round("2024-01-02T03:04:05Z"),
            Some(("2024-01-02T03:04:05Z".into(), "2024-01-02T03:04:05Z".into()))
        );
        assert_eq!(
            round("2024-01-02T03:04:05.120000Z"),
            Some((
                "2024-01-02T03:04:05Z".into(),
                "2024-01-02T03:04:05.12Z".into()
            ))
        );
        assert_eq!(
            round("2024-01-02T03:04:05+00:00").map(|r| r.0),
            Some("2024-01-02T03:04:05Z".into())
        );
        assert_eq!(
            round("2024-01-02T03:04:05-02:30").map(|r| r.0),
            Some("2024-01-02T03:04:05-02:30".into())
        );
        // Go's layout parse: one-digit hour, comma fraction, offset hour 24.
        assert_eq!(
            round("2024-01-02T3:04:05,5Z").map(|r| r.1),
            Some("2024-01-02T03:04:05.5Z".into())
        );
        assert_eq!(
            round("2024-01-02T03:04:05+24:00").map(|r| r.0),
            Some("2024-01-02T03:04:05+24:00".into())
        );
        for bad in [
            "",
            "2024-02-30T00:00:00Z",
            "2024-01-02 03:04:05Z",
            "2024-01-02T03:04:05z",
            "2024-01-02T03:04:60Z",
            "2024-01-02T03:04:05",
            "2024-01-02T03:04:05Zjunk",
            "2024-01-02T03:04:05+25:00",
        ] {
            assert_eq!(GoTime::parse(bad), None, "{bad}");
        }
    }
}
