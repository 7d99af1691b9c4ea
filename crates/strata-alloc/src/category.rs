//! Memory categories: what the bytes of a block hold for the program (PyTorch's memory
//! timeline infers these after the fact from a profile; strata is told as it runs).

use std::fmt;

/// What a block of memory holds. A block is counted under exactly one category at a time;
/// new blocks start as [`Category::Temporary`] and the tensor library moves them as their
/// role changes.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// A model's weights (marked by the caller).
    Parameter,
    /// A leaf's accumulated gradient (`.grad`).
    Gradient,
    /// An optimizer's state: momentum, Adam's moments (marked by the caller).
    OptimizerState,
    /// Saved by a live autograd graph node for backward.
    Activation,
    /// A batch of input data (marked by the caller).
    Input,
    /// Anything else an op allocated: results in flight, scratch buffers.
    #[default]
    Temporary,
    /// Marked by the caller as none of the above.
    Other,
}

impl Category {
    /// Every category, in the order of the summary and the statistics.
    pub const ALL: [Category; 7] = [
        Category::Parameter,
        Category::Gradient,
        Category::OptimizerState,
        Category::Activation,
        Category::Input,
        Category::Temporary,
        Category::Other,
    ];

    /// The snake-case name used in statistics keys (`category_bytes.parameter.current`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::Gradient => "gradient",
            Category::OptimizerState => "optimizer_state",
            Category::Activation => "activation",
            Category::Input => "input",
            Category::Temporary => "temporary",
            Category::Other => "other",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
