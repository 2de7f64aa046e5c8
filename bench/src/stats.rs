//! Medians, spreads and ratio cells shared by the benchmark reports (fleet and remote).

/// The median of the finite values (mean of the middle two for an even count); NaN for none.
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Minimum and maximum of the finite values (NaN for none).
pub fn range(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold((f64::NAN, f64::NAN), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

/// A number with `decimals`, or a dash when there is none.
pub fn fmt(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "—".to_string()
    }
}

/// `num ÷ den` as `N.N×`, or what makes the ratio meaningless.
pub fn ratio_text(den: f64, num: f64) -> String {
    if !(den.is_finite() && num.is_finite()) {
        "—".to_string()
    } else if den == 0.0 {
        if num == 0.0 {
            "=".to_string()
        } else {
            "ours 0".to_string()
        }
    } else {
        format!("{:.1}×", num / den)
    }
}

/// A cell: `median (min–max)`, or the value alone for one run.
pub fn cell(xs: &[f64], decimals: usize) -> String {
    let finite = xs.iter().filter(|x| x.is_finite()).count();
    if finite <= 1 {
        return fmt(median(xs), decimals);
    }
    let (lo, hi) = range(xs);
    format!(
        "{} ({}–{})",
        fmt(median(xs), decimals),
        fmt(lo, decimals),
        fmt(hi, decimals)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_ranges_and_cells() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(range(&[3.0, 1.0, f64::NAN, 2.0]), (1.0, 3.0));
        assert_eq!(cell(&[3.0, 1.0, 2.0], 1), "2.0 (1.0–3.0)");
        assert_eq!(cell(&[3.0, f64::NAN], 1), "3.0");
        assert_eq!(ratio_text(2.0, 5.0), "2.5×");
        assert_eq!(ratio_text(0.0, 16.0), "ours 0");
        assert_eq!(ratio_text(2.0, f64::NAN), "—");
    }
}
