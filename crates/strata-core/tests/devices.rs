//! Devices as a user meets them: factories on a device, `to_device`, per-device allocator
//! routing, and `set_data` (PyTorch's `t.data = other`) as modules and optimizers use it.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostAllocator};
use strata_core::autograd::no_grad;
use strata_core::{
    with_allocator, with_device_allocator, DType, Device, Error, Generator, Result, Tensor,
};

fn host() -> Arc<dyn DeviceAllocator> {
    Arc::new(HostAllocator::new())
}

/// `t.set_data(new)`, with nothing else using `t` (these tests are single-threaded).
fn set_data(t: &Tensor, new: &Tensor) -> Result<()> {
    // SAFETY: no op is running on `t` while its data is swapped.
    unsafe { t.set_data(new) }
}

#[test]
fn factories_on_the_cpu_make_cpu_tensors() -> Result<()> {
    let cpu = Tensor::on(Device::Cpu);
    assert_eq!(cpu.device(), Device::Cpu);
    let mut g = Generator::new(0);
    let made = [
        cpu.zeros(&[2, 3], DType::F32)?,
        cpu.empty(&[4], DType::I32)?,
        cpu.ones(&[1], DType::F16)?,
        cpu.full(&[2], 1.5, DType::F64)?,
        cpu.arange(3, DType::I64)?,
        cpu.eye(2, DType::Bool)?,
        cpu.from_vec(vec![1u8, 2], &[2])?,
        cpu.from_slice(&[1.0f32; 6], &[3, 2])?,
        cpu.scalar(3, DType::I64)?,
        cpu.rand(&[5], DType::F32)?,
        cpu.randn(&[5], DType::BF16)?,
        cpu.rand_with(&[5], DType::F64, &mut g)?,
        cpu.randn_with(&[5], DType::F32, &mut g)?,
    ];
    for t in &made {
        assert_eq!(t.device(), Device::Cpu);
    }
    assert_eq!(made[0].to_vec::<f32>()?, vec![0.0; 6]);
    assert_eq!(made[3].to_vec::<f64>()?, vec![1.5, 1.5]);
    assert_eq!(made[8].item::<i64>()?, 3);
    // The plain factories are the CPU ones.
    assert_eq!(Tensor::zeros(&[1], DType::F32)?.device(), Device::Cpu);
    Ok(())
}

#[test]
fn cuda_is_a_clear_error_even_with_an_allocator_routed_to_it() {
    let routed = host();
    let err = with_device_allocator(Device::Cuda(0), &routed, || {
        Tensor::on(Device::Cuda(0)).zeros(&[1024], DType::F32)
    })
    .unwrap_err();
    match &err {
        Error::Unsupported { op, message } => {
            assert_eq!(*op, "zeros");
            assert!(
                message.contains("CUDA") && message.contains("cuda:0"),
                "{message}"
            );
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    // What stands in the way, in the driver's words: on a machine without one (every CI
    // machine), that there is none.
    let message = err.to_string();
    assert!(
        message.contains("cannot place a tensor on cuda:0"),
        "{message}"
    );
    if strata_core::cuda::device_count().is_err() {
        assert!(message.contains("no CUDA driver found"), "{message}");
    }
    assert_eq!(routed.memory_allocated(), 0);
    let moved = Tensor::ones(&[2], DType::F32)
        .unwrap()
        .to_device(Device::Cuda(1));
    assert!(moved.unwrap_err().to_string().contains("CUDA"));
}

#[test]
fn to_device_on_the_same_device_is_the_same_tensor() -> Result<()> {
    let w = Tensor::randn(&[3, 3], DType::F32)?.requires_grad_(true)?;
    let same = w.to_device(Device::Cpu)?;
    assert!(same.is_same(&w));
    assert!(same.is_leaf() && same.requires_grad());
    assert!(w.to_device_dtype(Device::Cpu, DType::F32)?.is_same(&w));
    let half = w.to_device_dtype(Device::Cpu, DType::F16)?;
    assert!(!half.shares_storage(&w));
    assert_eq!((half.device(), half.dtype()), (Device::Cpu, DType::F16));
    // `to(dtype)` keeps its meaning.
    assert!(w.to(DType::F32)?.is_same(&w));
    Ok(())
}

#[test]
fn a_device_allocator_override_routes_bytes_to_that_allocator_only() -> Result<()> {
    let (cpu, meta) = (host(), host());
    let t = with_device_allocator(Device::Meta, &meta, || {
        with_device_allocator(Device::Cpu, &cpu, || Tensor::zeros(&[256], DType::F32))
    })?;
    assert_eq!(cpu.memory_allocated(), 1024);
    assert_eq!(meta.memory_allocated(), 0);
    // Only the CPU was routed here: the tensor comes from the default allocator.
    let elsewhere =
        with_device_allocator(Device::Meta, &meta, || Tensor::zeros(&[256], DType::F32))?;
    assert_eq!((cpu.memory_allocated(), meta.memory_allocated()), (1024, 0));
    drop((t, elsewhere));
    assert_eq!(cpu.memory_allocated(), 0);
    // `with_allocator` is the CPU override.
    let u = with_allocator(&cpu, || Tensor::ones(&[32], DType::F64))?;
    assert_eq!(cpu.memory_allocated(), 256);
    drop(u);
    assert_eq!(cpu.memory_allocated(), 0);
    Ok(())
}

#[test]
fn set_data_keeps_the_tensor_and_its_autograd_state() -> Result<()> {
    let p = Tensor::ones(&[2, 3], DType::F32)?.requires_grad_(true)?;
    p.mul(2.0)?.sum(None, false)?.backward()?;
    let grad = p.grad().expect("a gradient");
    let handle = p.clone();
    let new = Tensor::arange(6, DType::F64)?.view(&[3, 2])?;

    set_data(&p, &new)?;

    assert!(handle.is_same(&p));
    assert!(p.requires_grad() && p.is_leaf());
    assert!(p.grad().expect("still there").is_same(&grad));
    assert_eq!((p.dtype(), p.shape().to_vec()), (DType::F64, vec![3, 2]));
    assert!(p.shares_storage(&new));
    assert_eq!(handle.to_vec::<f64>()?, vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    Ok(())
}

/// A minimal SGD that holds its parameters' handles, as an optimizer does.
struct Sgd {
    params: Vec<Tensor>,
    lr: f64,
}

impl Sgd {
    fn step(&self) -> Result<()> {
        no_grad(|| {
            for p in &self.params {
                if let Some(g) = p.grad() {
                    p.sub_(&g.mul(self.lr)?)?;
                }
            }
            Ok(())
        })
    }
}

#[test]
fn an_optimizer_holding_a_parameter_trains_its_converted_data() -> Result<()> {
    let w = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?.requires_grad_(true)?;
    let opt = Sgd {
        params: vec![w.clone()],
        lr: 0.5,
    };
    // A module converts its parameter to f64 after the optimizer was built.
    let converted = w.to(DType::F64)?.detach()?;
    set_data(&w, &converted)?;
    assert_eq!(opt.params[0].dtype(), DType::F64);

    let x = Tensor::from_vec(vec![3.0f64, 4.0], &[2])?;
    w.mul(&x)?.sum(None, false)?.backward()?;
    assert_eq!(w.grad().unwrap().dtype(), DType::F64);
    opt.step()?;
    assert_eq!(w.to_vec::<f64>()?, vec![1.0 - 1.5, 2.0 - 2.0]);
    // The converted tensor shares the memory the optimizer updated.
    assert_eq!(converted.to_vec::<f64>()?, vec![-0.5, 0.0]);
    Ok(())
}

#[test]
fn the_old_data_goes_back_to_its_allocator_once_nothing_holds_it() -> Result<()> {
    let a = host();
    with_allocator(&a, || -> Result<()> {
        let p = Tensor::zeros(&[256], DType::F32)?.requires_grad_(true)?;
        let new = p.to(DType::F64)?.detach()?;
        assert_eq!(a.memory_allocated(), 1024 + 2048);
        set_data(&p, &new)?;
        drop(new);
        assert_eq!(a.memory_allocated(), 2048);
        drop(p);
        assert_eq!(a.memory_allocated(), 0);
        Ok(())
    })
}

#[test]
fn set_data_refuses_integer_data_for_a_tensor_that_requires_grad() -> Result<()> {
    let p = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
    let err = set_data(&p, &Tensor::ones(&[2], DType::I64)?).unwrap_err();
    assert!(err.to_string().contains("floating"), "{err}");
    assert_eq!(
        (p.dtype(), p.to_vec::<f32>()?),
        (DType::F32, vec![1.0, 1.0])
    );
    Ok(())
}
