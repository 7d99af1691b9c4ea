//! Per-sample transforms, applied in place to a field of a sample as it is written into its
//! batch, drawing their randomness from the sample's own generator (so the same sample is
//! transformed the same way whichever worker builds it).

use std::sync::Arc;

use strata_core::Tensor;

use crate::dataset::{Dataset, Field, SampleContext};
use crate::error::{DataError, Result};

/// A transform of one field of a sample (an image `[C, H, W]`, say), in place.
pub trait Transform: Send + Sync {
    /// Transforms `x` in place, drawing from `ctx.generator` if it is random.
    fn apply(&self, x: &Tensor, ctx: &mut SampleContext) -> Result<()>;
}

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
}

impl Transform for Normalize {
    fn apply(&self, x: &Tensor, _: &mut SampleContext) -> Result<()> {
        x.sub_(f64::from(self.mean))?.div_(f64::from(self.std))?;
        Ok(())
    }
}

/// Pads the last two dimensions with `padding` zeros on every side and crops a window of the
/// original size at a random offset (torchvision's `RandomCrop(size, padding)` with the size
/// unchanged): the content moves by up to `padding` in each direction, zeros fill in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RandomCrop {
    /// Zeros added on each side before cropping.
    pub padding: usize,
}

impl Transform for RandomCrop {
    fn apply(&self, x: &Tensor, ctx: &mut SampleContext) -> Result<()> {
        let shape = x.shape();
        if shape.len() < 2 {
            return Err(DataError::argument(
                "RandomCrop",
                format!("needs at least 2 dimensions (…, H, W), got {shape:?}"),
            ));
        }
        let (h, w) = (shape[shape.len() - 2], shape[shape.len() - 1]);
        let p = self.padding;
        // Offsets into the padded image, uniform in 0..=2p, rows first as torchvision draws.
        let mut offset = || (ctx.generator.next_u32() as usize) % (2 * p + 1);
        let (dy, dx) = (offset(), offset());
        let source = x.deep_clone()?;
        x.zero_()?;
        // Output row y shows source row y + dy - p.
        let span = |d: usize, n: usize| {
            let len = n.saturating_sub(d.abs_diff(p));
            (p.saturating_sub(d), d.saturating_sub(p), len)
        };
        let ((oy, sy, hl), (ox, sx, wl)) = (span(dy, h), span(dx, w));
        if hl > 0 && wl > 0 {
            let window = |t: &Tensor, y: usize, x0: usize| -> strata_core::Result<Tensor> {
                t.narrow(-2, y as i64, hl)?.narrow(-1, x0 as i64, wl)
            };
            window(x, oy, ox)?.copy_(&window(&source, sy, sx)?)?;
        }
        Ok(())
    }
}

/// Mirrors the last dimension with probability `p` (torchvision's `RandomHorizontalFlip`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomHorizontalFlip {
    /// The probability of a flip.
    pub p: f64,
}

impl Transform for RandomHorizontalFlip {
    fn apply(&self, x: &Tensor, ctx: &mut SampleContext) -> Result<()> {
        if ctx.generator.next_f64() >= self.p {
            return Ok(());
        }
        let w = x.shape().last().copied().unwrap_or(0);
        let reversed: Vec<i64> = (0..w as i64).rev().collect();
        let index = Tensor::from_vec(reversed, &[w])?;
        x.copy_(&x.index_select(-1, &index)?)?;
        Ok(())
    }
}

/// Transforms one after the other (torchvision's `Compose`).
#[derive(Clone, Default)]
pub struct Compose(pub Vec<Arc<dyn Transform>>);

impl Transform for Compose {
    fn apply(&self, x: &Tensor, ctx: &mut SampleContext) -> Result<()> {
        self.0.iter().try_for_each(|t| t.apply(x, ctx))
    }
}

/// A dataset whose field `field` goes through `transform` as each sample is written.
pub struct Transformed {
    dataset: Arc<dyn Dataset>,
    field: usize,
    transform: Arc<dyn Transform>,
}

impl Transformed {
    /// `dataset` with `transform` applied to its field number `field` (a floating one).
    pub fn new(
        dataset: Arc<dyn Dataset>,
        field: usize,
        transform: Arc<dyn Transform>,
    ) -> Result<Transformed> {
        let fields = dataset.fields();
        match fields.get(field) {
            Some(f) if f.dtype.is_floating() => Ok(Transformed {
                dataset,
                field,
                transform,
            }),
            Some(f) => Err(DataError::argument(
                "Transformed::new",
                format!(
                    "field {field} (`{}`) is {:?}; transforms work on floating fields",
                    f.name, f.dtype
                ),
            )),
            None => Err(DataError::argument(
                "Transformed::new",
                format!("the dataset has {} fields, not {}", fields.len(), field + 1),
            )),
        }
    }
}

impl Dataset for Transformed {
    fn len(&self) -> usize {
        self.dataset.len()
    }

    fn fields(&self) -> Vec<Field> {
        self.dataset.fields()
    }

    fn write(&self, index: usize, out: &[Tensor], ctx: &mut SampleContext) -> Result<()> {
        self.dataset.write(index, out, ctx)?;
        self.transform.apply(&out[self.field], ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_core::DType;

    fn image() -> Tensor {
        Tensor::arange(16, DType::F32)
            .unwrap()
            .add(1.0)
            .unwrap()
            .view(&[1, 4, 4])
            .unwrap()
    }

    /// Runs `t` on a fresh image with the context of sample `index`.
    fn run(t: &dyn Transform, index: usize) -> Vec<f32> {
        let x = image();
        t.apply(&x, &mut SampleContext::new(1, 0, index)).unwrap();
        x.to_vec().unwrap()
    }

    #[test]
    fn crops_move_the_content_and_fill_with_zeros() {
        let crop = RandomCrop { padding: 1 };
        let source = image().to_vec::<f32>().unwrap();
        let mut moved = 0;
        for index in 0..40 {
            let got = run(&crop, index);
            // Find the shift: some (dy, dx) in -1..=1 explains every output pixel.
            let explained = (-1i64..=1).any(|dy| {
                (-1i64..=1).any(|dx| {
                    (0..4i64).all(|y| {
                        (0..4i64).all(|x| {
                            let (sy, sx) = (y + dy, x + dx);
                            let want = if (0..4).contains(&sy) && (0..4).contains(&sx) {
                                source[(sy * 4 + sx) as usize]
                            } else {
                                0.0
                            };
                            got[(y * 4 + x) as usize] == want
                        })
                    })
                })
            });
            assert!(explained, "sample {index}: {got:?}");
            moved += usize::from(got != source);
            assert_eq!(got, run(&crop, index), "the same sample crops the same way");
        }
        assert!(moved > 20, "most crops move the image ({moved} of 40)");
    }

    #[test]
    fn flips_mirror_rows_with_their_probability() {
        let always = run(&RandomHorizontalFlip { p: 1.0 }, 0);
        assert_eq!(&always[..4], &[4.0, 3.0, 2.0, 1.0]);
        assert_eq!(
            run(&RandomHorizontalFlip { p: 0.0 }, 0),
            image().to_vec::<f32>().unwrap()
        );
        let composed = Compose(vec![
            Arc::new(RandomHorizontalFlip { p: 1.0 }),
            Arc::new(Normalize {
                mean: 1.0,
                std: 2.0,
            }),
        ]);
        assert_eq!(&run(&composed, 0)[..4], &[1.5, 1.0, 0.5, 0.0]);
    }
}
