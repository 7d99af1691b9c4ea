//! How a loss reduces its per-element values.

use crate::{Error, Result, Tensor};

/// How a loss reduces its per-element values (PyTorch's `reduction=`).
///
/// ```
/// use strata_core::nn::functional::Reduction;
/// assert_eq!("sum".parse::<Reduction>()?, Reduction::Sum);
/// assert_eq!(Reduction::default(), Reduction::Mean);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reduction {
    /// No reduction: one loss per element (or per sample, for the class losses).
    None,
    /// The mean of the per-element losses (the default).
    #[default]
    Mean,
    /// The sum of the per-element losses.
    Sum,
}

impl std::str::FromStr for Reduction {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Reduction::None),
            "mean" => Ok(Reduction::Mean),
            "sum" => Ok(Reduction::Sum),
            other => Err(Error::argument(
                "reduction",
                format!("unknown reduction '{other}'"),
                Some("use \"none\", \"mean\" or \"sum\""),
            )),
        }
    }
}

impl Reduction {
    /// `losses` reduced.
    pub(super) fn apply(self, losses: &Tensor) -> Result<Tensor> {
        match self {
            Reduction::None => Ok(losses.clone()),
            Reduction::Mean => losses.mean(None, false),
            Reduction::Sum => losses.sum(None, false),
        }
    }
}
