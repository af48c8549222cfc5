//! Latency statistics for `bench`.

use std::time::Duration;

/// Summary of a set of run times, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub n: usize,
    pub min: f64,
    pub max: f64,
    pub mean: f64,
    pub median: f64,
    pub p90: f64,
}

impl Stats {
    /// `None` for no samples.
    pub fn of_ms(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        Some(Stats {
            n: v.len(),
            min: v[0],
            max: v[v.len() - 1],
            mean: v.iter().sum::<f64>() / v.len() as f64,
            median: percentile(&v, 0.5),
            p90: percentile(&v, 0.9),
        })
    }

    pub fn of(times: &[Duration]) -> Option<Stats> {
        let ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        Stats::of_ms(&ms)
    }
}

/// The `q` quantile (0..=1) of sorted, non-empty data, interpolating linearly between the two
/// nearest ranks (numpy's default), so the median of an even count is the mean of the middle two.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return f64::NAN;
    };
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    let frac = pos - lo as f64;
    match (sorted.get(lo), sorted.get(hi)) {
        (Some(a), Some(b)) => a + (b - a) * frac,
        _ => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn known_data() {
        // Unsorted 1..=10.
        let s = Stats::of_ms(&[7.0, 1.0, 10.0, 3.0, 5.0, 2.0, 9.0, 4.0, 8.0, 6.0]).unwrap();
        assert_eq!(s.n, 10);
        assert!(close(s.min, 1.0) && close(s.max, 10.0));
        assert!(close(s.mean, 5.5));
        assert!(close(s.median, 5.5));
        assert!(close(s.p90, 9.1)); // numpy.percentile(range(1, 11), 90)
    }

    #[test]
    fn odd_count_and_outlier() {
        let s = Stats::of_ms(&[3.0, 100.0, 1.0, 2.0, 4.0]).unwrap();
        assert!(close(s.median, 3.0));
        assert!(close(s.mean, 22.0));
        assert!(close(s.p90, 61.6)); // 4 + 0.6 * (100 - 4)
    }

    #[test]
    fn single_and_empty() {
        let s = Stats::of(&[Duration::from_millis(5)]).unwrap();
        assert!(close(s.min, 5.0) && close(s.median, 5.0) && close(s.p90, 5.0));
        assert!(Stats::of_ms(&[]).is_none());
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn quantile_ends() {
        let v = [1.0, 2.0, 4.0];
        assert!(close(percentile(&v, 0.0), 1.0));
        assert!(close(percentile(&v, 1.0), 4.0));
        assert!(close(percentile(&v, 0.75), 3.0));
    }
}
