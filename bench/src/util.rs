//! Small helpers shared by the other modules: progress logging and percentiles.

pub fn log(msg: impl AsRef<str>) {
    eprintln!(
        "[{}] {}",
        jiff::Timestamp::now().strftime("%H:%M:%S"),
        msg.as_ref()
    );
}

pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}
