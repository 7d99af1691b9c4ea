//! Choosing what to prune: host computations over importance scores.

use strata_core::{Error, Result};

/// How much to prune: a fraction of the units still unpruned, or a count of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// A fraction in `[0, 1]` of the remaining units (rounded to the nearest count).
    Fraction(f64),
    /// A number of the remaining units.
    Count(usize),
}

/// The number of units `amount` prunes out of `n` remaining.
pub(crate) fn count(op: &'static str, amount: Amount, n: usize) -> Result<usize> {
    match amount {
        Amount::Fraction(f) if (0.0..=1.0).contains(&f) => Ok((f * n as f64).round() as usize),
        Amount::Fraction(f) => Err(Error::argument(
            op,
            format!("a fraction to prune must be in [0, 1], got {f}"),
            None,
        )),
        Amount::Count(k) if k <= n => Ok(k),
        Amount::Count(k) => Err(Error::argument(
            op,
            format!("cannot prune {k} units: only {n} remain unpruned"),
            None,
        )),
    }
}

/// A keep-mask over `scores`: the `k` lowest-scored `eligible` units are pruned (ties go to
/// the lower index), units that are not eligible stay pruned, the rest are kept.
pub(crate) fn keep_all_but_lowest(scores: &[f64], eligible: &[bool], k: usize) -> Vec<bool> {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&i| eligible[i]).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    let mut keep = eligible.to_vec();
    for &i in order.iter().take(k) {
        keep[i] = false;
    }
    keep
}

/// The `n`-norm (`f64::INFINITY`: the largest magnitude) of each slice of a row-major
/// tensor of `shape` along dimension `dim`.
pub(crate) fn slice_norms(values: &[f64], shape: &[usize], dim: usize, n: f64) -> Vec<f64> {
    let inner: usize = shape[dim + 1..].iter().product();
    let size = shape[dim];
    let mut acc = vec![0.0f64; size];
    for (flat, v) in values.iter().enumerate() {
        let i = (flat / inner.max(1)) % size.max(1);
        let a = v.abs();
        if n.is_infinite() {
            acc[i] = acc[i].max(a);
        } else {
            acc[i] += a.powf(n);
        }
    }
    if n.is_finite() && n > 0.0 {
        acc.iter_mut().for_each(|s| *s = s.powf(1.0 / n));
    }
    acc
}

/// The slice of dimension `dim` each element of a row-major tensor of `shape` lies in.
pub(crate) fn slice_of(flat: usize, shape: &[usize], dim: usize) -> usize {
    let inner: usize = shape[dim + 1..].iter().product();
    (flat / inner.max(1)) % shape[dim].max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_lowest() {
        assert_eq!(count("t", Amount::Fraction(0.25), 10).unwrap(), 3);
        assert!(count("t", Amount::Fraction(1.5), 10).is_err());
        assert!(count("t", Amount::Count(11), 10).is_err());
        let keep = keep_all_but_lowest(&[3.0, 1.0, 2.0, 0.0], &[true, true, true, false], 2);
        assert_eq!(keep, [true, false, false, false]);
    }

    #[test]
    fn norms_along_a_dimension() {
        // [[3, 4], [0, 1]]
        let v = [3.0, 4.0, 0.0, 1.0];
        assert_eq!(slice_norms(&v, &[2, 2], 0, 2.0), [5.0, 1.0]);
        assert_eq!(slice_norms(&v, &[2, 2], 1, 1.0), [3.0, 5.0]);
        assert_eq!(slice_norms(&v, &[2, 2], 1, f64::INFINITY), [3.0, 4.0]);
        assert_eq!(slice_of(3, &[2, 2], 0), 1);
        assert_eq!(slice_of(3, &[2, 2], 1), 1);
    }
}
