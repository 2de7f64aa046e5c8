//! The runtime cost budget of one CEL evaluation.
//!
//! The `cel` crate has no cost hook, so the compiled expressions are instrumented (see
//! `shape.rs`) with calls to the functions registered here. They are named with a leading
//! `@`, which CEL source cannot spell, and account to a per-thread [`Meter`] that is active
//! while [`metered`] runs an evaluation:
//!
//! - `@rflux_tick(x)`: one comprehension iteration (placed on each loop's condition or guard);
//!   also looks at the deadline;
//! - `@rflux_charge(x)`: the size of a value a function or `+` has just built;
//! - `@rflux_weigh(x)`: the size of a value about to be copied into a list or map;
//! - `@rflux_replace`, `@rflux_join`, `@rflux_split`: `replace`, `join` and `split` of the
//!   strings extension, with the size of the result checked before it is built (they are the
//!   operations whose result can be much larger than their arguments);
//! - `@rflux_pattern(p)`: the pattern of `matches`, refused when longer than
//!   [`MAX_PATTERN_LENGTH`] (compiling a regular expression is not interruptible).
//!
//! Each passes its value through, or fails the evaluation once a limit is exceeded.

use std::cell::RefCell;
use std::time::{Duration, Instant};

use cel::common::types::{CelBytes, CelInt, CelList, CelMap, CelMapKey, CelOptional, CelString};
use cel::common::types::{DYN_TYPE, LIST_TYPE, Type};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// Default cap on comprehension iterations (`all`, `exists`, `exists_one`, `map`, `filter`,
/// nested ones counting each inner iteration) in one evaluation.
pub const MAX_ITERATIONS: u64 = 100_000;
/// Default cap on the bytes of the values one evaluation builds (strings, lists and maps).
pub const MAX_EVAL_BYTES: u64 = 16 << 20;
/// Default wall-clock limit of one evaluation.
pub const EVAL_TIMEOUT: Duration = Duration::from_millis(100);

/// Accounted size of a value besides its bytes (a rough per-value overhead).
const VALUE_OVERHEAD: u64 = 16;

pub(super) const TICK: &str = "@rflux_tick";
pub(super) const CHARGE: &str = "@rflux_charge";
pub(super) const WEIGH: &str = "@rflux_weigh";
pub(super) const REPLACE: &str = "@rflux_replace";
pub(super) const JOIN: &str = "@rflux_join";
pub(super) const SPLIT: &str = "@rflux_split";
pub(super) const PATTERN: &str = "@rflux_pattern";

/// Longest regular expression `matches` accepts, in bytes (as long as an expression may be,
/// so that any pattern written in the expression passes; a longer one comes from the data).
pub const MAX_PATTERN_LENGTH: usize = 4096;

/// The limits of one evaluation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvalLimits {
    /// Comprehension iterations.
    pub iterations: u64,
    /// Bytes of built values.
    pub bytes: u64,
    /// Wall-clock limit.
    pub timeout: Duration,
}

impl Default for EvalLimits {
    fn default() -> Self {
        EvalLimits {
            iterations: MAX_ITERATIONS,
            bytes: MAX_EVAL_BYTES,
            timeout: EVAL_TIMEOUT,
        }
    }
}

/// Which limit an evaluation exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Exceeded {
    #[error("cost limit exceeded: more than {0} comprehension iterations")]
    Iterations(u64),
    #[error("cost limit exceeded: more than {0} bytes of values built")]
    Bytes(u64),
    #[error("cost limit exceeded: evaluation took longer than {}ms", .0.as_millis())]
    Time(Duration),
}

struct Meter {
    limits: EvalLimits,
    /// None: too far away to represent.
    deadline: Option<Instant>,
    iterations: u64,
    bytes: u64,
    exceeded: Option<Exceeded>,
}

thread_local! {
    static METER: RefCell<Option<Meter>> = const { RefCell::new(None) };
}

/// Runs `f` (one evaluation) with a fresh meter on this thread; reports the limit it
/// exceeded, if any (its result is then meaningless: the evaluation was cut short).
pub(super) fn metered<T>(limits: EvalLimits, f: impl FnOnce() -> T) -> (T, Option<Exceeded>) {
    struct Reset(Option<Meter>);
    impl Drop for Reset {
        fn drop(&mut self) {
            let previous = self.0.take();
            METER.with(|m| *m.borrow_mut() = previous);
        }
    }
    let fresh = Meter {
        limits,
        deadline: Instant::now().checked_add(limits.timeout),
        iterations: 0,
        bytes: 0,
        exceeded: None,
    };
    let previous = METER.with(|m| m.borrow_mut().replace(fresh));
    let reset = Reset(previous);
    let out = f();
    let exceeded = METER.with(|m| m.borrow().as_ref().and_then(|m| m.exceeded));
    drop(reset);
    (out, exceeded)
}

/// Applies `account` to the active meter (none: not metered, nothing to do) and turns an
/// exceeded limit into an evaluation error.
fn account(
    function: &str,
    account: impl FnOnce(&mut Meter) -> Option<Exceeded>,
) -> Result<(), ExecutionError> {
    METER.with(|m| {
        let mut m = m.borrow_mut();
        let Some(meter) = m.as_mut() else {
            return Ok(());
        };
        if meter.exceeded.is_none() {
            meter.exceeded = account(meter);
        }
        match meter.exceeded {
            Some(e) => Err(ExecutionError::function_error(function, e)),
            None => Ok(()),
        }
    })
}

impl Meter {
    fn add_bytes(&mut self, n: u64) -> Option<Exceeded> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.limits.bytes {
            return Some(Exceeded::Bytes(self.limits.bytes));
        }
        self.check_time()
    }

    fn check_time(&self) -> Option<Exceeded> {
        self.deadline
            .is_some_and(|d| Instant::now() >= d)
            .then_some(Exceeded::Time(self.limits.timeout))
    }

    /// The bytes still allowed (a value walk stops once past them).
    fn room(&self) -> u64 {
        self.limits.bytes.saturating_sub(self.bytes)
    }
}

/// The budget left on this thread (unmetered: no limit).
fn room() -> u64 {
    METER.with(|m| m.borrow().as_ref().map_or(u64::MAX, Meter::room))
}

/// Registers the metering functions on `env`.
pub(super) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    let dyn_args = |n: usize| -> Vec<Type> { (0..n).map(|_| DYN_TYPE).collect() };
    env.add_overload(TICK, "rflux_tick", dyn_args(1), tick)?;
    env.add_overload(CHARGE, "rflux_charge", dyn_args(1), charge)?;
    env.add_overload(WEIGH, "rflux_weigh", dyn_args(1), weigh)?;
    env.add_overload(REPLACE, "rflux_replace", dyn_args(3), replace)?;
    env.add_overload(REPLACE, "rflux_replace_n", dyn_args(4), replace)?;
    env.add_overload(JOIN, "rflux_join", dyn_args(1), join)?;
    env.add_overload(JOIN, "rflux_join_sep", dyn_args(2), join)?;
    env.add_overload(SPLIT, "rflux_split", dyn_args(2), split)?;
    env.add_overload(SPLIT, "rflux_split_n", dyn_args(3), split)?;
    env.add_overload(PATTERN, "rflux_pattern", dyn_args(1), pattern)?;
    Ok(())
}

fn first<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let n = args.len();
    args.into_iter()
        .next()
        .ok_or(ExecutionError::invalid_argument_count(1, n))
}

fn tick<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    account(TICK, |m| {
        m.iterations += 1;
        if m.iterations > m.limits.iterations {
            return Some(Exceeded::Iterations(m.limits.iterations));
        }
        m.check_time()
    })?;
    first(args)
}

fn charge<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    let size = if value.is_owned() {
        size_of(value.as_ref(), room())
    } else {
        0
    };
    account(CHARGE, |m| m.add_bytes(size))?;
    Ok(value)
}

fn weigh<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    let size = size_of(value.as_ref(), room());
    account(WEIGH, |m| m.add_bytes(size))?;
    Ok(value)
}

/// The accounted size of `value`: its strings' and bytes' lengths plus an overhead per value,
/// walking lists and maps; the walk stops once past `cap`.
fn size_of(value: &dyn Val, cap: u64) -> u64 {
    let mut total = 0u64;
    let mut stack: Vec<&dyn Val> = vec![value];
    while let Some(v) = stack.pop() {
        total = total.saturating_add(VALUE_OVERHEAD);
        if total > cap {
            break;
        }
        if let Some(s) = v.downcast_ref::<CelString>() {
            total = total.saturating_add(s.inner().len() as u64);
        } else if let Some(b) = v.downcast_ref::<CelBytes>() {
            total = total.saturating_add(b.inner().len() as u64);
        } else if let Some(map) = v.downcast_ref::<CelMap>() {
            for (k, item) in map.inner() {
                if let CelMapKey::String(s) = k {
                    total = total.saturating_add(s.inner().len() as u64);
                }
                stack.push(item.as_ref());
            }
        } else if let Some(list) = v.downcast_ref::<CelList>() {
            stack.extend(list.inner().iter().map(|item| item.as_ref()));
        } else if let Some(opt) = v.downcast_ref::<CelOptional>() {
            stack.extend(opt.inner());
        } else if let Some(items) = v.as_iterable() {
            let mut it = items.iter();
            while let Some(item) = it.next() {
                stack.push(item);
            }
        }
    }
    total
}

fn pattern<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = first(args)?;
    if let Some(p) = value.downcast_ref::<CelString>()
        && p.inner().len() > MAX_PATTERN_LENGTH
    {
        return Err(ExecutionError::function_error(
            "matches",
            format!(
                "regular expression is {} bytes long, more than the limit of {MAX_PATTERN_LENGTH}",
                p.inner().len()
            ),
        ));
    }
    Ok(value)
}

fn type_names(args: &[CowVal<'_, '_>]) -> Vec<String> {
    args.iter()
        .map(|a| a.get_type().name().to_owned())
        .collect()
}

fn string_arg<'b>(args: &'b [CowVal<'_, '_>], i: usize) -> Option<&'b str> {
    args.get(i)?.downcast_ref::<CelString>().map(|s| s.inner())
}

/// `s.replace(from, to)` and `s.replace(from, to, n)` (the first `n`; all when negative).
fn replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let limit = match args.get(3) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            Some(n) => usize::try_from(*n.inner()).ok(),
            None => {
                return Err(ExecutionError::no_such_member_overload(
                    "replace",
                    type_names(&args),
                ));
            }
        },
    };
    let (Some(s), Some(from), Some(to)) = (
        string_arg(&args, 0),
        string_arg(&args, 1),
        string_arg(&args, 2),
    ) else {
        return Err(ExecutionError::no_such_member_overload(
            "replace",
            type_names(&args),
        ));
    };
    // An empty `from` matches before every character and at the end.
    let all = if from.is_empty() {
        s.chars().count() + 1
    } else {
        s.matches(from).count()
    };
    let count = all.min(limit.unwrap_or(usize::MAX)) as u64;
    let size = (s.len() as u64 - count * from.len() as u64)
        .saturating_add(count.saturating_mul(to.len() as u64));
    account(REPLACE, |m| {
        m.add_bytes(size.saturating_add(VALUE_OVERHEAD))
    })?;
    let out = match limit {
        Some(n) => s.replacen(from, to, n),
        None => s.replace(from, to),
    };
    Ok(CowVal::owned(CelString::from(out)))
}

/// `list.join()` and `list.join(sep)`.
fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let wrong = || ExecutionError::no_such_member_overload("join", type_names(&args));
    let Some(list) = args.first() else {
        return Err(wrong());
    };
    let sep = match args.get(1) {
        None => "",
        Some(_) => string_arg(&args, 1).ok_or_else(wrong)?,
    };
    if !LIST_TYPE.is_assignable(list.as_ref()) {
        return Err(wrong());
    }
    let items = list
        .as_iterable()
        .ok_or_else(|| ExecutionError::UnexpectedType {
            got: list.get_type().name().to_owned(),
            want: "iterable".to_owned(),
        })?;
    let mut parts: Vec<&str> = Vec::new();
    let mut size = 0u64;
    let cap = room();
    let mut it = items.iter();
    while let Some(item) = it.next() {
        let s = item
            .downcast_ref::<CelString>()
            .ok_or_else(|| ExecutionError::UnexpectedType {
                got: item.get_type().name().to_owned(),
                want: "string".to_owned(),
            })?;
        if !parts.is_empty() {
            size = size.saturating_add(sep.len() as u64);
        }
        size = size.saturating_add(s.inner().len() as u64);
        parts.push(s.inner());
        if size > cap {
            break;
        }
    }
    account(JOIN, |m| m.add_bytes(size.saturating_add(VALUE_OVERHEAD)))?;
    Ok(CowVal::owned(CelString::from(parts.join(sep))))
}

/// `s.split(sep)` and `s.split(sep, n)` (at most `n` parts, the last holding the rest; none
/// when `n` is zero, all when negative); an empty separator splits between characters.
fn split<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let limit = match args.get(2) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            Some(n) => usize::try_from(*n.inner()).ok(),
            None => {
                return Err(ExecutionError::no_such_member_overload(
                    "split",
                    type_names(&args),
                ));
            }
        },
    };
    let (Some(s), Some(sep)) = (string_arg(&args, 0), string_arg(&args, 1)) else {
        return Err(ExecutionError::no_such_member_overload(
            "split",
            type_names(&args),
        ));
    };
    let max_parts = limit.unwrap_or(usize::MAX);
    let pieces = if sep.is_empty() {
        s.chars().count()
    } else {
        s.matches(sep).count() + 1
    }
    .min(max_parts) as u64;
    let size = (s.len() as u64).saturating_add((pieces + 1).saturating_mul(VALUE_OVERHEAD));
    account(SPLIT, |m| m.add_bytes(size))?;
    let parts: Vec<&str> = match (limit, sep.is_empty()) {
        (Some(0), _) => Vec::new(),
        (_, true) => split_chars(s, max_parts),
        (Some(n), false) => s.splitn(n, sep).collect(),
        (None, false) => s.split(sep).collect(),
    };
    let list: Vec<Box<dyn Val + 'v>> = parts
        .into_iter()
        .map(|p| Box::new(CelString::from(p.to_owned())) as Box<dyn Val + 'v>)
        .collect();
    Ok(CowVal::owned(CelList::from(list)))
}

/// `s` cut between characters into at most `max_parts` parts (the last holds the rest).
fn split_chars(s: &str, max_parts: usize) -> Vec<&str> {
    if max_parts == 0 {
        return Vec::new();
    }
    let mut parts: Vec<&str> = s
        .char_indices()
        .take(max_parts - 1)
        .map(|(i, c)| &s[i..i + c.len_utf8()])
        .collect();
    let used: usize = parts.iter().map(|p| p.len()).sum();
    if used < s.len() {
        parts.push(&s[used..]);
    }
    parts
}
