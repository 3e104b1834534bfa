//! Median, min and max of repeated measurements.

use std::time::Duration;

#[derive(Debug, Clone, Default)]
pub struct Samples(pub Vec<Duration>);

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.clone();
        v.sort_unstable();
        v
    }

    pub fn median(&self) -> Duration {
        let v = self.sorted();
        match v.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2,
        }
    }

    pub fn min(&self) -> Duration {
        self.sorted().first().copied().unwrap_or_default()
    }

    pub fn max(&self) -> Duration {
        self.sorted().last().copied().unwrap_or_default()
    }
}

pub fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even() {
        let s = |v: &[u64]| Samples(v.iter().map(|&m| Duration::from_millis(m)).collect());
        assert_eq!(s(&[3, 1, 2]).median(), Duration::from_millis(2));
        assert_eq!(s(&[4, 1, 2, 3]).median(), Duration::from_micros(2500));
        assert_eq!(s(&[4, 1, 2, 3]).min(), Duration::from_millis(1));
        assert_eq!(s(&[4, 1, 2, 3]).max(), Duration::from_millis(4));
    }
}
