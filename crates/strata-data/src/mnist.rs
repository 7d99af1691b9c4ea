//! MNIST-format datasets: 28×28 grey images and class labels in four IDX files, as MNIST
//! and Fashion-MNIST ship them. A sample is an image `[1, rows, cols]` f32 scaled to [0, 1]
//! (then normalised, if asked) and a label `[]` i64, as torchvision's `ToTensor` gives.

use std::path::{Path, PathBuf};

use strata_core::{DType, Tensor};

use crate::dataset::{Dataset, Field, SampleContext};
use crate::datasets::check_index;
use crate::error::{DataError, Result};
use crate::idx::{self, IdxData};
use crate::transform::Normalize;

/// Which part of a dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The training images (`train-*`).
    Train,
    /// The test images (`t10k-*`).
    Test,
}

impl Split {
    /// The files' base names: images, then labels.
    fn files(self) -> [&'static str; 2] {
        match self {
            Split::Train => ["train-images-idx3-ubyte", "train-labels-idx1-ubyte"],
            Split::Test => ["t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"],
        }
    }
}

/// The four files an MNIST-format directory holds (each may also be gzip-compressed, with
/// `.gz` appended).
pub const MNIST_FILES: [&str; 4] = [
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
];

/// An MNIST-format dataset in memory: `len` images of `rows×cols` bytes and their labels.
#[derive(Debug, Clone)]
pub struct Mnist {
    images: Vec<u8>,
    labels: Vec<u8>,
    rows: usize,
    cols: usize,
    normalize: Option<Normalize>,
}

impl Mnist {
    /// Reads `split` from the MNIST-format files in `dir`.
    pub fn load(dir: &Path, split: Split) -> Result<Mnist> {
        let [images, labels] = split.files().map(|base| find(dir, base));
        let (Some(images), Some(labels)) = (images, labels) else {
            return Err(DataError::NotFound {
                message: format!(
                    "{} lacks the {split:?} files of an MNIST-format dataset",
                    dir.display()
                ),
                hint: format!(
                    "the directory needs {} (each raw or gzip-compressed, `.gz` appended)",
                    MNIST_FILES.join(", ")
                ),
            });
        };
        Self::from_files(&images, &labels)
    }

    /// Reads an images file and a labels file.
    pub fn from_files(images: &Path, labels: &Path) -> Result<Mnist> {
        let (img, lab) = (idx::read(images)?, idx::read(labels)?);
        let (IdxData::U8(pixels), [n, rows, cols]) = (img.data, img.dims.as_slice()) else {
            return Err(DataError::format(
                images,
                "an images file holds u8 elements in 3 dimensions [images, rows, columns]",
            ));
        };
        let (IdxData::U8(classes), [m]) = (lab.data, lab.dims.as_slice()) else {
            return Err(DataError::format(
                labels,
                "a labels file holds u8 elements in 1 dimension [images]",
            ));
        };
        if n != m {
            return Err(DataError::format(
                labels,
                format!("{m} labels for the {n} images of {}", images.display()),
            ));
        }
        if let Some(bad) = classes.iter().position(|&c| c > 9) {
            return Err(DataError::format(
                labels,
                format!("label {bad} is {}, outside the classes 0..=9", classes[bad]),
            ));
        }
        Ok(Mnist {
            images: pixels,
            labels: classes,
            rows: *rows,
            cols: *cols,
            normalize: None,
        })
    }

    /// The same data, each image normalised by `n` after scaling to [0, 1].
    pub fn normalized(mut self, n: Normalize) -> Mnist {
        self.normalize = Some(n);
        self
    }

    /// Image `i`'s bytes, row by row.
    pub fn image(&self, i: usize) -> Option<&[u8]> {
        let size = self.rows * self.cols;
        self.images.get(i * size..(i + 1) * size)
    }

    /// Label `i`.
    pub fn label(&self, i: usize) -> Option<u8> {
        self.labels.get(i).copied()
    }

    /// Image height and width.
    pub fn image_size(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
}

/// `dir/base.gz` or `dir/base`, whichever exists.
fn find(dir: &Path, base: &str) -> Option<PathBuf> {
    [format!("{base}.gz"), base.to_owned()]
        .into_iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
}

impl Dataset for Mnist {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn fields(&self) -> Vec<Field> {
        vec![
            Field::new("image", &[1, self.rows, self.cols], DType::F32),
            Field::new("label", &[], DType::I64),
        ]
    }

    fn write(&self, index: usize, out: &[Tensor], _: &mut SampleContext) -> Result<()> {
        check_index("Mnist", index, self.len())?;
        let (Some(pixels), Some(label)) = (self.image(index), self.label(index)) else {
            return Err(DataError::Sample {
                index,
                message: "no such image".into(),
            });
        };
        let mut values: Vec<f32> = pixels.iter().map(|&b| f32::from(b) / 255.0).collect();
        if let Some(n) = self.normalize {
            n.apply_slice(&mut values);
        }
        out[0].copy_(&Tensor::from_vec(values, &[1, self.rows, self.cols])?)?;
        out[1].fill_(i64::from(label))?;
        Ok(())
    }
}

/// Fashion-MNIST (Zalando's 70 000 clothing images in MNIST's format), read from Debian's
/// `dataset-fashion-mnist` package or a directory of the four files.
pub struct FashionMnist;

impl FashionMnist {
    /// Where Debian's `dataset-fashion-mnist` package installs the files.
    pub const DEFAULT_DIR: &'static str = "/usr/share/datasets/fashion-mnist";

    /// The ten classes, by label.
    pub const CLASSES: [&'static str; 10] = [
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ];

    /// `split` from [`FashionMnist::DEFAULT_DIR`].
    pub fn load(split: Split) -> Result<Mnist> {
        Self::load_from(Path::new(Self::DEFAULT_DIR), split)
    }

    /// `split` from the Fashion-MNIST files in `dir`.
    pub fn load_from(dir: &Path, split: Split) -> Result<Mnist> {
        Mnist::load(dir, split).map_err(|e| match e {
            DataError::NotFound { message, .. } => DataError::NotFound {
                message: format!("Fashion-MNIST not found: {message}"),
                hint: format!(
                    "install it with `apt-get install -y dataset-fashion-mnist` (files in {}), \
                     or pass the directory that holds {}",
                    Self::DEFAULT_DIR,
                    MNIST_FILES.join(", ")
                ),
            },
            other => other,
        })
    }
}
