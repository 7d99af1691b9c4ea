//! Per-sample transforms.

use strata_core::Tensor;

use crate::error::Result;

/// Fashion-MNIST's pixel mean over its training images, after scaling to [0, 1].
pub const FASHION_MNIST_MEAN: f32 = 0.2860;
/// Fashion-MNIST's pixel standard deviation over its training images, after scaling to
/// [0, 1].
pub const FASHION_MNIST_STD: f32 = 0.3530;
/// MNIST's pixel mean, after scaling to [0, 1].
pub const MNIST_MEAN: f32 = 0.1307;
/// MNIST's pixel standard deviation, after scaling to [0, 1].
pub const MNIST_STD: f32 = 0.3081;

/// `(x - mean) / std` (torchvision's `Normalize` with one channel).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    /// Subtracted first.
    pub mean: f32,
    /// Then divided by.
    pub std: f32,
}

impl Normalize {
    /// Fashion-MNIST's statistics.
    pub const FASHION_MNIST: Normalize = Normalize {
        mean: FASHION_MNIST_MEAN,
        std: FASHION_MNIST_STD,
    };
    /// MNIST's statistics.
    pub const MNIST: Normalize = Normalize {
        mean: MNIST_MEAN,
        std: MNIST_STD,
    };

    /// Normalises `values` in place, in f32 as torchvision does (subtract, then divide).
    pub fn apply_slice(&self, values: &mut [f32]) {
        for v in values {
            *v = (*v - self.mean) / self.std;
        }
    }

    /// Normalises a floating tensor in place.
    pub fn apply(&self, t: &Tensor) -> Result<()> {
        t.sub_(f64::from(self.mean))?.div_(f64::from(self.std))?;
        Ok(())
    }
}
