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
