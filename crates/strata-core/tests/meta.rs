//! The meta device: tensors without data whose allocations are exactly a CPU run's.

use std::sync::Arc;

use strata_alloc::{
    AllocatorConfig, CachingAllocator, DeviceAllocator, HostBacking, VirtualBacking,
};
use strata_core::autograd::{checkpoint, no_grad};
use strata_core::nn::functional::{cross_entropy, linear, Reduction};
use strata_core::{
    memory, with_device_allocator, DType, DefaultDevice, Device, Error, Result, Tensor,
};

/// Peak allocated and peak reserved bytes of one training step.
#[derive(Debug, PartialEq, Eq)]
struct Peaks {
    allocated: usize,
    reserved: usize,
}

/// A fresh caching allocator with default settings for `device`, with a handle that reads
/// its peaks.
fn fresh(device: Device) -> (Arc<dyn DeviceAllocator>, Box<dyn Fn() -> Peaks>) {
    fn peaks<B: strata_alloc::Backing + 'static>(
        a: Arc<CachingAllocator<B>>,
    ) -> Box<dyn Fn() -> Peaks> {
        Box::new(move || Peaks {
            allocated: a.max_memory_allocated(),
            reserved: a.max_memory_reserved(),
        })
    }
    let config = AllocatorConfig::default();
    match device {
        Device::Meta => {
            let a = Arc::new(CachingAllocator::with_config(
                VirtualBacking::new(1 << 40),
                config,
            ));
            (a.clone(), peaks(a))
        }
        _ => {
            let a = Arc::new(CachingAllocator::with_config(HostBacking::new(), config));
            (a.clone(), peaks(a))
        }
    }
}

/// One step of a 3-layer MLP classifier on `device`: forward (the first two layers under
/// activation checkpointing when asked), cross-entropy, backward, and an SGD update.
fn mlp_step(device: Device, batch: usize, checkpointing: bool) -> Result<Peaks> {
    let (allocator, peaks) = fresh(device);
    with_device_allocator(device, &allocator, || -> Result<()> {
        let _device = DefaultDevice::set(device);
        let (input, hidden, classes) = (784, 256, 10);
        let param = |shape: &[usize]| -> Result<Tensor> {
            Tensor::randn(shape, DType::F32)?
                .mul(0.05)?
                .requires_grad_(true)
        };
        let params = [
            param(&[hidden, input])?,
            param(&[hidden])?,
            param(&[hidden, hidden])?,
            param(&[hidden])?,
            param(&[classes, hidden])?,
            param(&[classes])?,
        ];
        let x = Tensor::randn(&[batch, input], DType::F32)?;
        let labels: Vec<i64> = (0..batch as i64).map(|i| i % classes as i64).collect();
        let y = Tensor::from_vec(labels, &[batch])?;
        let body = |t: &[Tensor]| -> Result<Vec<Tensor>> {
            let h = linear(&t[0], &t[1], Some(&t[2]))?.relu()?;
            Ok(vec![linear(&h, &t[3], Some(&t[4]))?.relu()?])
        };
        let inputs = [
            x.clone(),
            params[0].clone(),
            params[1].clone(),
            params[2].clone(),
            params[3].clone(),
        ];
        let h = if checkpointing {
            checkpoint(body, &inputs)?.remove(0)
        } else {
            body(&inputs)?.remove(0)
        };
        let logits = linear(&h, &params[4], Some(&params[5]))?;
        let loss = cross_entropy(&logits, &y, Reduction::Mean)?;
        drop((h, logits));
        loss.backward()?;
        no_grad(|| -> Result<()> {
            for p in &params {
                let g = p.grad().ok_or_else(|| Error::Autograd {
                    message: "a parameter got no gradient".into(),
                })?;
                p.sub_(&g.mul(0.1)?)?;
            }
            Ok(())
        })
    })?;
    Ok(peaks())
}

#[test]
fn a_training_step_on_meta_predicts_the_cpu_peaks_to_the_byte() -> Result<()> {
    for checkpointing in [false, true] {
        let mut seen = Vec::new();
        for batch in [16, 128, 512] {
            let cpu = mlp_step(Device::Cpu, batch, checkpointing)?;
            let meta = mlp_step(Device::Meta, batch, checkpointing)?;
            assert_eq!(meta, cpu, "batch {batch}, checkpointing {checkpointing}");
            println!("batch {batch:>3}, checkpointing {checkpointing:<5}: peak allocated {} B, peak reserved {} B (meta and cpu)", cpu.allocated, cpu.reserved);
            seen.push(cpu.allocated);
        }
        // The peaks grow with the batch: the prediction is not a constant.
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    }
    Ok(())
}

#[test]
fn meta_tensors_have_layouts_and_autograd_but_no_values() -> Result<()> {
    let on = Tensor::on(Device::Meta);
    let w = on.randn(&[3, 4], DType::F32)?.requires_grad_(true)?;
    let x = on.from_vec(vec![1.0f32; 8], &[2, 4])?;
    let y = x.matmul(&w.t()?)?.relu()?;
    assert_eq!((y.device(), y.shape().to_vec()), (Device::Meta, vec![2, 3]));
    assert_eq!(y.grad_fn_name(), Some("ReluBackward0"));
    // Hooks run on meta gradients and may replace them.
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    y.register_hook(move |g: &Tensor| {
        assert_eq!(g.device(), Device::Meta);
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(g.mul(2.0)?))
    })?;
    y.sum(None, false)?.backward()?;
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 1);
    let g = w.grad().expect("backward runs on meta");
    assert_eq!((g.device(), g.shape().to_vec()), (Device::Meta, vec![3, 4]));
    // Views share storage and bump versions as on the CPU.
    let v = w.detach()?.view(&[12])?;
    assert!(v.shares_storage(&w));
    v.add_(1.0)?;
    assert_eq!(w.version(), 1);
    // Values cannot be read, printed as numbers, or copied out.
    for e in [
        y.to_vec::<f32>().err(),
        y.sum(None, false)?.item::<f32>().err(),
    ] {
        let message = e.expect("reading a meta tensor is an error").to_string();
        assert!(message.contains("meta"), "{message}");
    }
    assert!(y.to_device(Device::Cpu).is_err());
    assert_eq!(format!("{y}"), "tensor(..., device='meta', size=(2, 3))");
    let h = on.zeros(&[5], DType::F16)?;
    assert_eq!(
        format!("{h}"),
        "tensor(..., device='meta', size=(5,), dtype=torch.float16)"
    );
    // Index bounds are not checked: there are no indices to check.
    let idx = on.from_vec(vec![99i64, -7], &[2])?;
    assert_eq!(w.index_select(0, &idx)?.shape().to_vec(), vec![2, 4]);
    Ok(())
}

#[test]
fn meta_memory_has_its_own_statistics() -> Result<()> {
    let before = memory::memory_allocated(Device::Meta)?;
    let cpu_before = memory::memory_allocated(Device::Cpu)?;
    let big = Tensor::on(Device::Meta).zeros(&[1 << 28], DType::F32)?; // 1 GiB, never touched
    assert_eq!(memory::memory_allocated(Device::Meta)?, before + (1 << 30));
    assert!(memory::memory_reserved(Device::Meta)? >= 1 << 30);
    assert!(memory::memory_summary(Device::Meta, true)?.contains("Allocated memory"));
    drop(big);
    assert_eq!(memory::memory_allocated(Device::Meta)?, before);
    // Other threads' CPU tensors may come and go, but a meta gigabyte never lands there.
    assert!(memory::memory_allocated(Device::Cpu)? < cpu_before + (1 << 29));
    Ok(())
}

#[test]
fn an_out_of_memory_on_meta_names_meta() {
    // 2 PiB on a device of 1 PiB: the error names the device the user asked about.
    let e = Tensor::on(Device::Meta)
        .zeros(&[1usize << 49], DType::F32)
        .expect_err("more than meta's capacity");
    let text = e.to_string();
    assert!(text.contains("on meta"), "{text}");
    assert!(!text.contains("virtual"), "{text}");
}
