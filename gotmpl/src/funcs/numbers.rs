//! sprig's number functions, with its lenient conversions (`toInt64`, `toFloat64`).

use super::ctx::{Ctx, FResult};
use super::strings::i;
use crate::gofmt::sprint_value;
use crate::value::{ListKind, Value};

/// Go's `strconv.ParseInt(s, base, 64)` without base prefixes or underscores.
fn parse_int(st: &str, radix: u32) -> Option<i64> {
    let (neg, body) = match st.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, st.strip_prefix('+').unwrap_or(st)),
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let mag = u64::from_str_radix(body, radix).ok()?;
    if neg {
        if mag <= i64::MAX as u64 + 1 {
            Some((mag as i64).wrapping_neg())
        } else {
            None
        }
    } else {
        i64::try_from(mag).ok()
    }
}

fn parse_float(st: &str) -> Option<f64> {
    let t = st.strip_prefix('+').unwrap_or(st);
    if t.contains('_') || t.is_empty() {
        return None;
    }
    t.parse::<f64>().ok()
}

/// Go's float64 → int64 conversion as amd64 does it (out of range: MinInt64).
fn f2i(f: f64) -> i64 {
    if f.is_nan() || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// sprig's `toInt64`.
pub(crate) fn to_i64(v: &Value) -> i64 {
    match v {
        Value::Str(s) => parse_int(s, 10).unwrap_or(0),
        Value::Int(i, _) => *i,
        Value::Float(f) => f2i(*f),
        Value::Bool(b) => i64::from(*b),
        _ => 0,
    }
}

/// sprig's `toFloat64`.
pub(crate) fn to_f64(v: &Value) -> f64 {
    match v {
        Value::Str(s) => parse_float(s).unwrap_or(0.0),
        Value::Int(i, _) => *i as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        _ => 0.0,
    }
}

pub(super) fn atoi(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int(
        parse_int(super::strings::s(&a[0]), 10).unwrap_or(0),
    ))
}

pub(super) fn to_int(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int(to_i64(&a[0])))
}

pub(super) fn to_int64(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(to_i64(&a[0])))
}

pub(super) fn to_float64(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Float(to_f64(&a[0])))
}

pub(super) fn to_decimal(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(
        parse_int(&sprint_value(&a[0]), 8).unwrap_or(0),
    ))
}

pub(super) fn add1(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(to_i64(&a[0]).wrapping_add(1)))
}

pub(super) fn add(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(
        a.iter().fold(0i64, |acc, v| acc.wrapping_add(to_i64(v))),
    ))
}

pub(super) fn sub(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(to_i64(&a[0]).wrapping_sub(to_i64(&a[1]))))
}

pub(super) fn div(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let d = to_i64(&a[1]);
    if d == 0 {
        return Err("runtime error: integer divide by zero".into());
    }
    Ok(Value::int64(to_i64(&a[0]).wrapping_div(d)))
}

pub(super) fn modulo(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let d = to_i64(&a[1]);
    if d == 0 {
        return Err("runtime error: integer divide by zero".into());
    }
    Ok(Value::int64(to_i64(&a[0]).wrapping_rem(d)))
}

pub(super) fn mul(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(
        a[1..]
            .iter()
            .fold(to_i64(&a[0]), |acc, v| acc.wrapping_mul(to_i64(v))),
    ))
}

pub(super) fn rand_int(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let (lo, hi) = (i(&a[0]), i(&a[1]));
    let n = hi.wrapping_sub(lo);
    if n <= 0 {
        return Err("invalid argument to Intn".into());
    }
    Ok(Value::int(rand::random_range(0..n).wrapping_add(lo)))
}

pub(super) fn max(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(
        a.iter().map(to_i64).fold(to_i64(&a[0]), i64::max),
    ))
}

pub(super) fn min(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::int64(
        a.iter().map(to_i64).fold(to_i64(&a[0]), i64::min),
    ))
}

fn go_max(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}

fn go_min(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.min(y)
    }
}

pub(super) fn maxf(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Float(
        a[1..].iter().map(to_f64).fold(to_f64(&a[0]), go_max),
    ))
}

pub(super) fn minf(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Float(
        a[1..].iter().map(to_f64).fold(to_f64(&a[0]), go_min),
    ))
}

pub(super) fn ceil(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Float(to_f64(&a[0]).ceil()))
}

pub(super) fn floor(_: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(Value::Float(to_f64(&a[0]).floor()))
}

pub(super) fn round(_: &mut Ctx, a: Vec<Value>) -> FResult {
    let round_on = match a.get(2) {
        Some(Value::Float(f)) => *f,
        _ => 0.5,
    };
    let val = to_f64(&a[0]);
    let pow = 10f64.powf(i(&a[1]) as f64);
    let digit = pow * val;
    let frac = digit.fract();
    let r = if frac >= round_on {
        digit.ceil()
    } else {
        digit.floor()
    };
    Ok(Value::Float(r / pow))
}

/// sprig's `untilStep`, bounded: the element count is checked before anything is built.
fn until_step_vec(c: &mut Ctx, start: i64, stop: i64, step: i64) -> Result<Vec<i64>, String> {
    let count: i128 = if stop < start {
        if step >= 0 {
            return Ok(Vec::new());
        }
        ((start as i128 - stop as i128) + (-step as i128) - 1) / (-step as i128)
    } else {
        if step <= 0 {
            return Ok(Vec::new());
        }
        ((stop as i128 - start as i128) + step as i128 - 1) / step as i128
    };
    if count > (c.max_bytes / 2) as i128 {
        return Err(format!(
            "exceeded maximum output size ({} bytes)",
            c.max_bytes
        ));
    }
    c.charge(count as u64)?;
    let mut v = Vec::with_capacity(count as usize);
    let mut x = start as i128;
    for _ in 0..count {
        v.push(x as i64);
        x += step as i128;
    }
    Ok(v)
}

fn int_list(v: Vec<i64>) -> Value {
    Value::list_of(
        v.into_iter().map(Value::int).collect(),
        ListKind::Int,
        false,
    )
}

pub(super) fn until(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let n = i(&a[0]);
    let step = if n < 0 { -1 } else { 1 };
    Ok(int_list(until_step_vec(c, 0, n, step)?))
}

pub(super) fn until_step(c: &mut Ctx, a: Vec<Value>) -> FResult {
    Ok(int_list(until_step_vec(c, i(&a[0]), i(&a[1]), i(&a[2]))?))
}

pub(super) fn seq(c: &mut Ctx, a: Vec<Value>) -> FResult {
    let p: Vec<i64> = a.iter().map(i).collect();
    let v = match p.len() {
        1 => {
            let (start, end) = (1, p[0]);
            let inc = if end < start { -1 } else { 1 };
            until_step_vec(c, start, end.wrapping_add(inc), inc)?
        }
        2 => {
            let (start, end) = (p[0], p[1]);
            let step = if end < start { -1 } else { 1 };
            until_step_vec(c, start, end.wrapping_add(step), step)?
        }
        3 => {
            let (start, step, end) = (p[0], p[1], p[2]);
            let mut inc = 1;
            if end < start {
                inc = -1;
                if step > 0 {
                    return Ok(Value::str(""));
                }
            }
            until_step_vec(c, start, end.wrapping_add(inc), step)?
        }
        _ => Vec::new(),
    };
    let s: Vec<String> = v.iter().map(i64::to_string).collect();
    c.string(s.join(" "))
}
