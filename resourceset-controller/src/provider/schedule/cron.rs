//! Cron expressions as Flux Operator reads `spec.schedule[].cron`: five fields (minute, hour,
//! day of month, month, day of week; `*`, `?`, lists, ranges, steps, month and day names) or a
//! descriptor (`@yearly`/`@annually`, `@monthly`, `@weekly`, `@daily`/`@midnight`, `@hourly`,
//! `@every <Go duration>`), in an IANA time zone (`timeZone`, `UTC` by default). The semantics
//! are those of robfig/cron v3 with its standard parser plus descriptors: day of month and day
//! of week are ORed unless either starts with `*`/`?`, triggers fall on whole minutes, `@every`
//! counts from the current second and ignores the time zone.
//!
//! Differences (documented): a local time skipped by a DST jump never triggers (as robfig); a
//! local time repeated by a DST fold triggers once, at its first instant (robfig fires twice).

use std::time::Duration;

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};
use rflux_common::runtime::{format_go_duration, parse_go_duration};

/// How far `next` looks ahead, in years (robfig gives up after five).
const YEAR_LIMIT: i16 = 5;

/// Why a cron expression was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// Nothing to parse.
    #[error("empty spec string")]
    Empty,
    /// Not five fields.
    #[error("expected exactly 5 fields, found {found}: {spec:?}")]
    FieldCount {
        /// Fields found.
        found: usize,
        /// The expression.
        spec: String,
    },
    /// A field part is malformed.
    #[error("invalid {field} field {part:?}: {why}")]
    Field {
        /// `minute`, `hour`, `day of month`, `month` or `day of week`.
        field: &'static str,
        /// The offending part.
        part: String,
        /// What is wrong.
        why: String,
    },
    /// An `@` descriptor this parser does not know.
    #[error("unrecognized descriptor: {0}")]
    Descriptor(String),
    /// `@every` with a duration that does not parse.
    #[error("failed to parse duration {0}")]
    Every(String),
    /// The time zone is not in the IANA database.
    #[error("unknown time zone {0:?}")]
    TimeZone(String),
}

/// A parsed cron schedule.
#[derive(Debug, Clone)]
pub struct Cron {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Fields(Fields),
    /// `@every`: whole seconds, at least one.
    Every(Duration),
}

#[derive(Debug, Clone)]
struct Fields {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    /// Day of month or day of week started with `*`/`?` (robfig's star bit): both must match.
    day_star: bool,
    tz: TimeZone,
}

struct Bounds {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Bounds = Bounds {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Bounds = Bounds {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DOM: Bounds = Bounds {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Bounds = Bounds {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
const DOW: Bounds = Bounds {
    name: "day of week",
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

/// The time zone `name` (Go's `time.LoadLocation`: empty and `UTC` are UTC, `Local` the
/// system's).
pub fn time_zone(name: &str) -> Result<TimeZone, CronError> {
    match name {
        "" | "UTC" => Ok(TimeZone::UTC),
        "Local" => Ok(TimeZone::system()),
        other => TimeZone::get(other).map_err(|_| CronError::TimeZone(other.to_string())),
    }
}

impl Cron {
    /// Parses `spec` in time zone `tz_name` (empty: `UTC`, or a leading `CRON_TZ=`/`TZ=` of
    /// the spec, as robfig reads it).
    pub fn parse(spec: &str, tz_name: &str) -> Result<Cron, CronError> {
        let mut spec = spec.trim();
        if spec.is_empty() {
            return Err(CronError::Empty);
        }
        let mut tz_name = tz_name.to_string();
        if tz_name.is_empty()
            && let Some(rest) = spec
                .strip_prefix("CRON_TZ=")
                .or_else(|| spec.strip_prefix("TZ="))
        {
            let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
            tz_name = name.to_string();
            spec = tail.trim();
        }
        let tz = time_zone(&tz_name)?;
        if spec.starts_with('@') {
            return descriptor(spec, tz);
        }
        let fields: Vec<&str> = spec.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount {
                found: fields.len(),
                spec: spec.to_string(),
            });
        }
        let (minute, _) = field(fields[0], &MINUTE)?;
        let (hour, _) = field(fields[1], &HOUR)?;
        let (dom, dom_star) = field(fields[2], &DOM)?;
        let (month, _) = field(fields[3], &MONTH)?;
        let (dow, dow_star) = field(fields[4], &DOW)?;
        Ok(Cron {
            kind: Kind::Fields(Fields {
                minute,
                hour,
                dom,
                month,
                dow,
                day_star: dom_star || dow_star,
                tz,
            }),
        })
    }

    /// The first trigger strictly after `after`, or `None` when there is none in the next five
    /// years (for example `0 0 30 2 *`).
    pub fn next(&self, after: Timestamp) -> Option<Timestamp> {
        match &self.kind {
            Kind::Every(d) => {
                let base = Timestamp::from_second(after.as_second()).ok()?;
                base.checked_add(SignedDuration::try_from(*d).ok()?).ok()
            }
            Kind::Fields(f) => f.next(after),
        }
    }

    /// The last trigger at or before `now` (within five years), found as robfig-based Flux
    /// Operator finds it: the latest `next(t)` that comes before `next(now)`.
    pub fn previous(&self, now: Timestamp) -> Option<Timestamp> {
        let upcoming = self.next(now)?;
        let look_back = SignedDuration::from_hours(5 * 365 * 24);
        let mut lo = now.checked_sub(look_back).ok()?.as_second();
        let mut hi = upcoming.as_second() - 1;
        let before = |s: i64| {
            Timestamp::from_second(s)
                .ok()
                .and_then(|t| self.next(t))
                .filter(|n| *n < upcoming)
        };
        before(lo)?;
        // Invariant: next(lo) < upcoming; find the largest such second.
        while lo < hi {
            let mid = lo + (hi - lo + 1) / 2;
            if before(mid).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        before(lo)
    }
}

fn descriptor(spec: &str, tz: TimeZone) -> Result<Cron, CronError> {
    let all = |b: &Bounds| bits(b.min, b.max, 1);
    let fields = |minute, hour, dom, month, dow, day_star| Cron {
        kind: Kind::Fields(Fields {
            minute,
            hour,
            dom,
            month,
            dow,
            day_star,
            tz: tz.clone(),
        }),
    };
    let one = |v: u32| 1u64 << v;
    Ok(match spec {
        "@yearly" | "@annually" => fields(one(0), one(0), one(1), one(1), all(&DOW), true),
        "@monthly" => fields(one(0), one(0), one(1), all(&MONTH), all(&DOW), true),
        "@weekly" => fields(one(0), one(0), all(&DOM), all(&MONTH), one(0), true),
        "@daily" | "@midnight" => fields(one(0), one(0), all(&DOM), all(&MONTH), all(&DOW), true),
        "@hourly" => fields(one(0), all(&HOUR), all(&DOM), all(&MONTH), all(&DOW), true),
        other => {
            let Some(dur) = other.strip_prefix("@every ") else {
                return Err(CronError::Descriptor(other.to_string()));
            };
            let d = parse_go_duration(dur).map_err(|e| CronError::Every(format!("{dur}: {e}")))?;
            // At least a second, whole seconds.
            let secs = d.as_secs().max(1);
            Cron {
                kind: Kind::Every(Duration::from_secs(secs)),
            }
        }
    })
}

fn bits(min: u32, max: u32, step: u32) -> u64 {
    (min..=max)
        .step_by(usize::try_from(step).unwrap_or(1))
        .fold(0, |acc, v| acc | (1u64 << v))
}

/// One field: its bit set and whether it had the star bit (`*`/`?` without a step > 1).
fn field(text: &str, b: &Bounds) -> Result<(u64, bool), CronError> {
    let mut set = 0;
    let mut star = false;
    for part in text.split(',') {
        let (s, st) = range(part, b)?;
        set |= s;
        star |= st;
    }
    Ok((set, star))
}

fn range(part: &str, b: &Bounds) -> Result<(u64, bool), CronError> {
    let err = |why: String| CronError::Field {
        field: b.name,
        part: part.to_string(),
        why,
    };
    let mut slash = part.split('/');
    let span = slash.next().unwrap_or_default();
    let step_text = slash.next();
    if slash.next().is_some() {
        return Err(err("too many slashes".into()));
    }
    let (start, mut end, mut star);
    let single;
    if span == "*" || span == "?" {
        (start, end, star, single) = (b.min, b.max, true, false);
    } else {
        let mut dash = span.split('-');
        let low = dash.next().unwrap_or_default();
        let high = dash.next();
        if dash.next().is_some() {
            return Err(err("too many hyphens".into()));
        }
        start = value(low, b).map_err(err)?;
        end = match high {
            Some(h) => value(h, b).map_err(err)?,
            None => start,
        };
        star = false;
        single = high.is_none();
    }
    let step = match step_text {
        None => 1,
        Some(s) => {
            let step = number(s).map_err(err)?;
            if single {
                // `N/step` means `N-max/step`.
                end = b.max;
            }
            if step > 1 {
                star = false;
            }
            step
        }
    };
    if start < b.min {
        return Err(err(format!(
            "beginning of range ({start}) below minimum ({})",
            b.min
        )));
    }
    if end > b.max {
        return Err(err(format!(
            "end of range ({end}) above maximum ({})",
            b.max
        )));
    }
    if start > end {
        return Err(err(format!(
            "beginning of range ({start}) beyond end of range ({end})"
        )));
    }
    if step == 0 {
        return Err(err("step of range should be a positive number".into()));
    }
    Ok((bits(start, end, step), star))
}

fn value(text: &str, b: &Bounds) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(i) = b.names.iter().position(|n| *n == lower) {
        let i = u32::try_from(i).unwrap_or(0);
        return Ok(if b.min == 1 { i + 1 } else { i });
    }
    number(text)
}

/// Go's `strconv.Atoi`, refusing negatives.
fn number(text: &str) -> Result<u32, String> {
    let n: i64 = text
        .parse()
        .map_err(|_| format!("failed to parse int from {text:?}"))?;
    if n < 0 {
        return Err(format!("negative number ({n}) not allowed"));
    }
    u32::try_from(n).map_err(|_| format!("number {n} out of range"))
}

impl Fields {
    fn day_matches(&self, d: Date) -> bool {
        let dom = self.dom & (1 << d.day()) != 0;
        let dow_index = u32::try_from(d.weekday().to_sunday_zero_offset()).unwrap_or(0);
        let dow = self.dow & (1 << dow_index) != 0;
        if self.day_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn next(&self, after: Timestamp) -> Option<Timestamp> {
        // The upcoming second, then the next whole minute, in local civil time.
        let start = Timestamp::from_second(after.as_second().checked_add(1)?).ok()?;
        let mut dt = self.tz.to_datetime(start);
        if dt.second() != 0 || dt.subsec_nanosecond() != 0 {
            dt = minute_floor(dt)
                .checked_add(SignedDuration::from_mins(1))
                .ok()?;
        }
        let limit = dt.year().checked_add(YEAR_LIMIT)?;
        while dt.year() <= limit {
            let month = u32::try_from(dt.month()).unwrap_or(0);
            if self.month & (1 << month) == 0 {
                dt = dt
                    .date()
                    .first_of_month()
                    .checked_add(jiff::Span::new().months(1))
                    .ok()?
                    .to_datetime(jiff::civil::Time::midnight());
                continue;
            }
            if !self.day_matches(dt.date()) {
                dt = dt
                    .date()
                    .tomorrow()
                    .ok()?
                    .to_datetime(jiff::civil::Time::midnight());
                continue;
            }
            let hour = u32::try_from(dt.hour()).unwrap_or(0);
            if self.hour & (1 << hour) == 0 {
                dt = hour_floor(dt)
                    .checked_add(SignedDuration::from_hours(1))
                    .ok()?;
                continue;
            }
            let minute = u32::try_from(dt.minute()).unwrap_or(0);
            if self.minute & (1 << minute) == 0 {
                dt = dt.checked_add(SignedDuration::from_mins(1)).ok()?;
                continue;
            }
            match self.tz.to_ambiguous_timestamp(dt).offset() {
                AmbiguousOffset::Unambiguous { offset } => {
                    if let Ok(t) = offset.to_timestamp(dt)
                        && t > after
                    {
                        return Some(t);
                    }
                }
                AmbiguousOffset::Fold {
                    before,
                    after: later,
                } => {
                    for off in [before, later] {
                        if let Ok(t) = off.to_timestamp(dt)
                            && t > after
                        {
                            return Some(t);
                        }
                    }
                }
                // A local time skipped by a DST jump never triggers.
                AmbiguousOffset::Gap { .. } => {}
            }
            dt = dt.checked_add(SignedDuration::from_mins(1)).ok()?;
        }
        None
    }
}

fn minute_floor(dt: DateTime) -> DateTime {
    dt.date().at(dt.hour(), dt.minute(), 0, 0)
}

fn hour_floor(dt: DateTime) -> DateTime {
    dt.date().at(dt.hour(), 0, 0, 0)
}

/// A Go duration for messages (`4h0m0s`).
pub fn go_duration(d: Duration) -> String {
    format_go_duration(d)
}

#[cfg(test)]
#[path = "cron_tests.rs"]
mod tests;
