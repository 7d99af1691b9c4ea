//! The ranges `Tensor::arange` takes, as PyTorch's `arange(end)`, `arange(start, end)` and
//! `arange(start, end, step)`: a count, a Rust range, or a `(start, end, step)` tuple.

use std::ops::Range;

use crate::{Error, Result};

/// What `Tensor::arange` counts over: `n` (`0..n`), `start..end`, or `(start, end, step)`
/// with integers or floats. The length is PyTorch's `ceil((end - start) / step)`.
///
/// ```
/// use strata_core::{DType, Tensor};
/// assert_eq!(Tensor::arange(4, DType::I64)?.to_vec::<i64>()?, [0, 1, 2, 3]);
/// assert_eq!(Tensor::arange(2..5, DType::I64)?.to_vec::<i64>()?, [2, 3, 4]);
/// assert_eq!(Tensor::arange((10, 0, -3), DType::I64)?.to_vec::<i64>()?, [10, 7, 4, 1]);
/// assert_eq!(Tensor::arange((0.0, 1.0, 0.25), DType::F32)?.to_vec::<f32>()?, [0.0, 0.25, 0.5, 0.75]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ArangeRange {
    /// Integer bounds and step: exact.
    Int {
        /// The first value.
        start: i64,
        /// The bound, not included.
        end: i64,
        /// The difference between neighbours (not 0).
        step: i64,
    },
    /// Floating bounds or step: value `i` is `start + i * step`, computed in f64.
    Float {
        /// The first value.
        start: f64,
        /// The bound, not included.
        end: f64,
        /// The difference between neighbours (not 0).
        step: f64,
    },
}

impl ArangeRange {
    /// How many values the range holds, or why it holds none that make sense (PyTorch's
    /// refusals: a zero step, a step pointing away from the bound).
    pub(crate) fn len(&self, op: &'static str) -> Result<usize> {
        let (start, end, step) = match *self {
            ArangeRange::Int { start, end, step } => (start as f64, end as f64, step as f64),
            ArangeRange::Float { start, end, step } => (start, end, step),
        };
        if !(start.is_finite() && end.is_finite() && step.is_finite()) {
            return Err(Error::argument(
                op,
                format!("the range ({start}, {end}, {step}) is not finite"),
                None,
            ));
        }
        if step == 0.0 {
            return Err(Error::argument(op, "the step must not be 0", None));
        }
        if (step > 0.0 && end < start) || (step < 0.0 && end > start) {
            return Err(Error::argument(
                op,
                format!(
                    "the bound {end} cannot be reached from {start} with step {step}: the \
                     step's sign must point from start to end"
                ),
                None,
            ));
        }
        let n = match *self {
            ArangeRange::Int { start, end, step } => {
                let span = i128::from(end) - i128::from(start);
                let step = i128::from(step);
                (span + step - step.signum()) / step
            }
            ArangeRange::Float { .. } => ((end - start) / step).ceil() as i128,
        };
        usize::try_from(n.max(0))
            .map_err(|_| Error::argument(op, format!("the range holds {n} values: too many"), None))
    }
}

macro_rules! int_ranges {
    ($($t:ty),*) => {$(
        impl From<$t> for ArangeRange {
            /// `0..n`, PyTorch's `arange(end)`.
            fn from(n: $t) -> ArangeRange {
                ArangeRange::Int { start: 0, end: n as i64, step: 1 }
            }
        }

        impl From<Range<$t>> for ArangeRange {
            /// `start..end` with step 1.
            fn from(r: Range<$t>) -> ArangeRange {
                ArangeRange::Int { start: r.start as i64, end: r.end as i64, step: 1 }
            }
        }

        impl From<($t, $t, $t)> for ArangeRange {
            /// `(start, end, step)`.
            fn from((start, end, step): ($t, $t, $t)) -> ArangeRange {
                ArangeRange::Int { start: start as i64, end: end as i64, step: step as i64 }
            }
        }
    )*};
}

int_ranges!(i32, i64, usize);

impl From<(f64, f64, f64)> for ArangeRange {
    /// `(start, end, step)` in floating point.
    fn from((start, end, step): (f64, f64, f64)) -> ArangeRange {
        ArangeRange::Float { start, end, step }
    }
}

impl From<Range<f64>> for ArangeRange {
    /// `start..end` with step 1.0.
    fn from(r: Range<f64>) -> ArangeRange {
        ArangeRange::Float {
            start: r.start,
            end: r.end,
            step: 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn len(r: impl Into<ArangeRange>) -> Result<usize> {
        r.into().len("arange")
    }

    #[test]
    fn lengths_are_pytorchs() {
        assert_eq!(len(5).unwrap(), 5);
        assert_eq!(len(0).unwrap(), 0);
        assert_eq!(len(2..7).unwrap(), 5);
        assert_eq!(len((0, 10, 3)).unwrap(), 4); // 0 3 6 9
        assert_eq!(len((10, 0, -3)).unwrap(), 4); // 10 7 4 1
        assert_eq!(len((0.0, 1.0, 0.1)).unwrap(), 10);
        assert_eq!(len((1.0, 2.5, 0.5)).unwrap(), 3);
        assert_eq!(len(3..3).unwrap(), 0);
    }

    #[test]
    fn a_step_that_cannot_reach_the_bound_is_refused() {
        assert!(len((0, 10, 0))
            .unwrap_err()
            .to_string()
            .contains("must not be 0"));
        assert!(len((0, 10, -1)).unwrap_err().to_string().contains("sign"));
        assert!(len((0.0, f64::NAN, 1.0)).is_err());
    }
}
