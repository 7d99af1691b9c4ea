//! MNIST-format datasets: small IDX files written here, and the real Fashion-MNIST that the
//! test script installs (Debian's `dataset-fashion-mnist`).

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use strata_data::idx::encode_u8;
use strata_data::transform::{Normalize, FASHION_MNIST_MEAN, FASHION_MNIST_STD};
use strata_data::{DataError, DataLoader, Dataset, FashionMnist, LoaderOptions, Mnist, Split};

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// Three 2×2 training images (gzip) and labels (raw).
fn small(dir: &Path) {
    let pixels: Vec<u8> = (0..12).map(|i| i * 20).collect();
    std::fs::write(
        dir.join("train-images-idx3-ubyte.gz"),
        gzip(&encode_u8(&[3, 2, 2], &pixels)),
    )
    .unwrap();
    std::fs::write(
        dir.join("train-labels-idx1-ubyte"),
        encode_u8(&[3], &[7, 0, 9]),
    )
    .unwrap();
}

#[test]
fn small_files_load_scaled_labelled_and_normalised() {
    let dir = tempfile::tempdir().unwrap();
    small(dir.path());
    let data = Mnist::load(dir.path(), Split::Train).unwrap();
    assert_eq!(data.len(), 3);
    assert_eq!(data.image_size(), (2, 2));
    let sample = data.get(1).unwrap();
    assert_eq!(sample[0].shape().as_slice(), &[1, 2, 2]);
    let want: Vec<f32> = [80u8, 100, 120, 140]
        .iter()
        .map(|&b| f32::from(b) / 255.0)
        .collect();
    assert_eq!(sample[0].to_vec::<f32>().unwrap(), want);
    assert_eq!(sample[1].to_vec::<i64>().unwrap(), vec![0]);
    let normalised = data.normalized(Normalize::FASHION_MNIST).get(1).unwrap();
    let want: Vec<f32> = want
        .iter()
        .map(|v| (v - FASHION_MNIST_MEAN) / FASHION_MNIST_STD)
        .collect();
    assert_eq!(normalised[0].to_vec::<f32>().unwrap(), want);
}

#[test]
fn missing_and_broken_files_are_errors_that_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let mnist = Mnist::load(dir.path(), Split::Test)
        .unwrap_err()
        .to_string();
    assert!(mnist.contains("t10k-labels-idx1-ubyte"), "{mnist}");
    let fashion = FashionMnist::load_from(dir.path(), Split::Test)
        .unwrap_err()
        .to_string();
    assert!(
        fashion.contains("apt-get install -y dataset-fashion-mnist"),
        "{fashion}"
    );

    small(dir.path());
    let labels = dir.path().join("train-labels-idx1-ubyte");
    std::fs::write(&labels, encode_u8(&[2], &[1, 2])).unwrap();
    let err = Mnist::load(dir.path(), Split::Train).unwrap_err();
    assert!(matches!(err, DataError::Format { .. }), "{err}");
    assert!(
        err.to_string().contains("2 labels for the 3 images"),
        "{err}"
    );
    std::fs::write(&labels, encode_u8(&[3], &[1, 2, 12])).unwrap();
    let err = Mnist::load(dir.path(), Split::Train)
        .unwrap_err()
        .to_string();
    assert!(err.contains("label 2 is 12"), "{err}");
    let images = dir.path().join("train-images-idx3-ubyte.gz");
    let whole = std::fs::read(&images).unwrap();
    std::fs::write(&images, &whole[..whole.len() - 8]).unwrap();
    let err = Mnist::load(dir.path(), Split::Train)
        .unwrap_err()
        .to_string();
    assert!(err.contains("train-images-idx3-ubyte.gz"), "{err}");
}

/// The real files: sizes, first labels, balanced classes, the normalisation constants, and
/// a worker-loaded epoch equal to a plain loop's.
#[test]
fn fashion_mnist_from_the_debian_package() {
    let train = FashionMnist::load(Split::Train).expect(
        "Fashion-MNIST is installed by scripts/test (apt-get install -y dataset-fashion-mnist)",
    );
    let test = FashionMnist::load(Split::Test).unwrap();
    assert_eq!((train.len(), test.len()), (60_000, 10_000));
    assert_eq!(train.image_size(), (28, 28));
    let first = |d: &Mnist, n: usize| (0..n).map(|i| d.label(i).unwrap()).collect::<Vec<_>>();
    assert_eq!(first(&train, 5), vec![9, 0, 0, 3, 0]);
    assert_eq!(first(&test, 5), vec![9, 2, 1, 1, 6]);
    let mut counts = [0usize; 10];
    (0..train.len()).for_each(|i| counts[train.label(i).unwrap() as usize] += 1);
    assert_eq!(counts, [6000; 10]);

    // The named constants are the training images' own statistics.
    let (mut sum, mut squares, mut n) = (0f64, 0f64, 0f64);
    for i in 0..train.len() {
        for &b in train.image(i).unwrap() {
            let v = f64::from(b) / 255.0;
            sum += v;
            squares += v * v;
            n += 1.0;
        }
    }
    let mean = sum / n;
    let std = (squares / n - mean * mean).sqrt();
    assert!(
        (mean - f64::from(FASHION_MNIST_MEAN)).abs() < 1e-4,
        "mean {mean}"
    );
    assert!(
        (std - f64::from(FASHION_MNIST_STD)).abs() < 1e-4,
        "std {std}"
    );

    // Two workers give what a plain loop over the samples gives.
    let test: Arc<dyn Dataset> = Arc::new(test.normalized(Normalize::FASHION_MNIST));
    let mut loader = DataLoader::new(
        test.clone(),
        LoaderOptions {
            batch_size: 500,
            num_workers: 2,
            ..LoaderOptions::default()
        },
    )
    .unwrap();
    let mut seen = 0;
    for batch in loader.epoch().unwrap() {
        let batch = batch.unwrap();
        assert_eq!(batch.tensors[0].shape().as_slice(), &[500, 1, 28, 28]);
        for (row, &i) in batch.indices.iter().enumerate().step_by(97) {
            let one = test.get(i).unwrap();
            let got = batch.tensors[0].select(0, row as i64).unwrap();
            assert_eq!(
                got.to_vec::<f32>().unwrap(),
                one[0].to_vec::<f32>().unwrap()
            );
            let label = batch.tensors[1].select(0, row as i64).unwrap();
            assert_eq!(
                label.to_vec::<i64>().unwrap(),
                one[1].to_vec::<i64>().unwrap()
            );
        }
        seen += batch.indices.len();
    }
    assert_eq!(seen, 10_000);
}
