//! The loader's batches copied to a real CUDA device on a side stream ([`DeviceCopy`]):
//! double buffering, for real. Needs a CUDA device: ignored by `cargo test`, run by
//! `scripts/gpu-check`'s runner with `--ignored`, where it fails if no device is found.

#![cfg(feature = "cuda")]

use std::sync::Arc;

use strata_core::{cuda, DType, Device, Tensor};
use strata_data::{DataLoader, DeviceCopy, LoaderOptions, Prefetch, TensorDataset};

fn loader(pin_memory: bool) -> DataLoader {
    let n = 64;
    let feats = Tensor::from_vec((0..n * 1024).map(|i| i as f32).collect(), &[n, 1024]).unwrap();
    let ids = Tensor::arange(n, DType::I64).unwrap();
    let data = Arc::new(TensorDataset::new(vec![feats, ids]).unwrap());
    DataLoader::new(
        data,
        LoaderOptions {
            batch_size: 8,
            num_workers: 2,
            pin_memory,
            ..LoaderOptions::default()
        },
    )
    .unwrap()
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn batches_arrive_on_the_device_in_order_with_their_values() {
    let n = cuda::device_count().unwrap_or_else(|e| panic!("no CUDA device to test on: {e}"));
    assert!(n > 0, "no CUDA device to test on: the driver sees none");
    for (pin, depth) in [(true, 1), (true, 2), (false, 1)] {
        let mut reference = loader(pin);
        let expected: Vec<_> = reference.epoch().unwrap().map(|b| b.unwrap()).collect();
        let mut l = loader(pin);
        let stage = DeviceCopy::new(0).expect("a side stream");
        let side = stage.stream().id();
        assert_ne!(side, cuda::current_stream(0).unwrap().id());
        let batches = Prefetch::new(l.epoch().unwrap(), depth, stage).unwrap();
        let mut seen = 0;
        for (b, want) in batches.zip(&expected) {
            let b = b.expect("a staged batch");
            assert_eq!(b.index, want.index);
            for (t, w) in b.tensors.iter().zip(&want.tensors) {
                assert_eq!(t.device(), Device::Cuda(0));
                assert_eq!(t.dtype(), w.dtype());
                let host = t.cpu().expect("back to the host");
                match t.dtype() {
                    DType::I64 => {
                        assert_eq!(host.to_vec::<i64>().unwrap(), w.to_vec::<i64>().unwrap())
                    }
                    _ => assert_eq!(host.to_vec::<f32>().unwrap(), w.to_vec::<f32>().unwrap()),
                }
            }
            seen += 1;
        }
        assert_eq!(seen, expected.len(), "pin {pin}, depth {depth}");
        cuda::synchronize(0).expect("synchronized");
    }
}
