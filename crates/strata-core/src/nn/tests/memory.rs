//! What the backward nodes keep alive.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};

use crate::nn::functional::{cross_entropy, Reduction};
use crate::{with_allocator, DType, Generator, Tensor};

#[test]
fn cross_entropy_keeps_no_softmax_or_one_hot_for_backward() {
    let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let dynamic: Arc<dyn DeviceAllocator> = cache.clone();
    with_allocator(&dynamic, || {
        let (n, c) = (256, 1000);
        let logits = Tensor::randn_with(&[n, c], DType::F32, &mut Generator::new(1))
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let labels: Vec<i64> = (0..n as i64).map(|i| (i * 7) % c as i64).collect();
        let target = Tensor::from_vec(labels, &[n]).unwrap();
        let before = cache.memory_allocated();
        let loss = cross_entropy(&logits, &target, Reduction::Mean).unwrap();
        let held = cache.memory_allocated() - before;
        // The loss itself plus rounding; the node saves the logits and the target as they are.
        assert!(
            held <= 4096,
            "the forward left {held} bytes alive beyond the inputs ({} bytes of logits)",
            logits.nbytes()
        );
        loss.backward().unwrap();
        assert_eq!(logits.grad().unwrap().shape().as_slice(), vec![n, c]);
    });
}

/// The conv2d from the memory guide's example: 32 → 64 channels, 3×3, padding 1, 14×14,
/// batch 256, f32. Whole-batch im2col held a 58 MB column matrix (plus a padded copy of the
/// input) in forward and again in backward.
#[test]
fn conv2d_columns_stay_within_their_budget() {
    use crate::nn::functional::{conv2d_with, Conv2dOptions, Pair, COLUMN_BUDGET_BYTES};
    let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let dynamic: Arc<dyn DeviceAllocator> = cache.clone();
    with_allocator(&dynamic, || {
        let mut gen = Generator::new(5);
        let x = Tensor::randn_with(&[256, 32, 14, 14], DType::F32, &mut gen)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let w = Tensor::randn_with(&[64, 32, 3, 3], DType::F32, &mut gen)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        let opts = Conv2dOptions {
            padding: Pair(1, 1),
            ..Default::default()
        };
        let whole_batch_columns = 256 * 32 * 9 * 196 * 4;
        assert!(whole_batch_columns > 57_000_000);

        let before = cache.memory_allocated();
        cache.reset_peak_memory_stats();
        let y = conv2d_with(&x, &w, None, opts).unwrap();
        let out_bytes = y.nbytes();
        let forward_peak = cache.max_memory_allocated() - before;
        // f32, stride 1, one group: the CPU convolves straight from the image, so forward
        // allocates its output and nothing else (no column buffer at all).
        assert_eq!(
            forward_peak, out_bytes,
            "forward peaked {forward_peak} bytes above its inputs (output {out_bytes})"
        );
        // In f64 the columns are built: the output plus one column buffer of at most the
        // budget (rounded to blocks).
        let x64 = x.detach().unwrap().to(DType::F64).unwrap();
        let w64 = w.detach().unwrap().to(DType::F64).unwrap();
        let before64 = cache.memory_allocated();
        cache.reset_peak_memory_stats();
        let y64 = conv2d_with(&x64, &w64, None, opts).unwrap();
        let peak64 = cache.max_memory_allocated() - before64;
        assert!(
            peak64 > y64.nbytes() && peak64 <= y64.nbytes() + COLUMN_BUDGET_BYTES + (1 << 20),
            "an f64 forward peaked {peak64} bytes above its inputs (output {})",
            y64.nbytes()
        );
        drop((x64, w64, y64));
        // After forward only the output is new: the node saves x and w as they are.
        assert!(cache.memory_allocated() - before <= out_bytes + 4096);

        let g = Tensor::ones(&y.shape(), DType::F32).unwrap();
        let before = cache.memory_allocated();
        cache.reset_peak_memory_stats();
        y.backward_with(Some(&g), false).unwrap();
        let backward_peak = cache.max_memory_allocated() - before;
        // x's gradient, one column buffer, one slice of the output gradient, a few
        // weight-sized buffers; never a whole-batch column matrix.
        let slice = out_bytes / (256 / (COLUMN_BUDGET_BYTES / (32 * 9 * 196 * 4)));
        let bound = x.nbytes() + COLUMN_BUDGET_BYTES + 2 * slice + 4 * w.nbytes() + (1 << 20);
        assert!(
            backward_peak <= bound,
            "backward peaked {backward_peak} bytes above its inputs (bound {bound})"
        );
        assert!(backward_peak < whole_batch_columns);
    });
}
