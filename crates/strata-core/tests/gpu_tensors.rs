//! Tensors on a real CUDA device: factories, views, copies, fills, transfers (blocking and
//! non-blocking through pinned memory), `record_stream`, the refusal of ops without a CUDA
//! kernel, and the device's memory statistics counting it all.
//!
//! Every test needs a CUDA device: they are ignored by `cargo test` and run by
//! `scripts/gpu-check`'s runner with `--ignored`, where they fail if no device is found.

#![cfg(feature = "cuda")]

use strata_core::{cuda, memory, DType, Device, Error, Tensor};

fn device() -> Device {
    let n = cuda::device_count().unwrap_or_else(|e| panic!("no CUDA device to test on: {e}"));
    assert!(n > 0, "no CUDA device to test on: the driver sees none");
    cuda::check(0).expect("tensors can live on cuda:0");
    Device::Cuda(0)
}

/// Queues tens of milliseconds of work on the current stream of `gpu` (64 copies of 1 GiB,
/// about 45 ms on an H100), returning at once: what the host does meanwhile sees it still
/// running.
fn keep_busy(gpu: Device) {
    let big = Tensor::on(gpu)
        .zeros(&[1 << 28], DType::F32)
        .expect("1 GiB");
    for _ in 0..64 {
        drop(big.deep_clone().expect("a device copy"));
    }
}

fn values(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 3.0).collect()
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn factories_make_device_tensors_counted_by_the_device_allocator() {
    let gpu = device();
    memory::empty_cache(gpu).expect("empty_cache");
    let before = memory::memory_allocated(gpu).expect("allocated");
    let z = Tensor::on(gpu).zeros(&[1000], DType::F32).expect("zeros");
    let o = Tensor::on(gpu).ones(&[3, 5], DType::F64).expect("ones");
    let f = Tensor::on(gpu).full(&[7], -2.5, DType::BF16).expect("full");
    let e = Tensor::on(gpu).empty(&[9], DType::I64).expect("empty");
    let a = Tensor::on(gpu).arange(6, DType::I32).expect("arange");
    let v = Tensor::on(gpu)
        .from_vec(values(12), &[3, 4])
        .expect("from_vec");
    for t in [&z, &o, &f, &e, &a, &v] {
        assert_eq!(t.device(), gpu);
    }
    // Each block is rounded to 512 bytes, as in PyTorch.
    let expected = 4096 + 512 * 5;
    assert_eq!(
        memory::memory_allocated(gpu).expect("allocated") - before,
        expected
    );
    assert_eq!(z.to_vec::<f32>().expect("read"), vec![0.0; 1000]);
    assert_eq!(o.to_vec::<f64>().expect("read"), vec![1.0; 15]);
    assert_eq!(f.to_vec::<f32>().expect("read"), vec![-2.5; 7]);
    assert_eq!(e.to_vec::<i64>().expect("read"), vec![0; 9]);
    assert_eq!(a.to_vec::<i32>().expect("read"), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(v.to_vec::<f32>().expect("read"), values(12));
    let one = Tensor::on(gpu).full(&[1], 4.0, DType::F32).expect("full");
    assert_eq!(one.item::<f32>().expect("item"), 4.0);
    drop((z, o, f, e, a, v, one));
    assert_eq!(memory::memory_allocated(gpu).expect("allocated"), before);
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn views_share_device_memory_and_strided_copies_keep_their_values() {
    let gpu = device();
    let host = Tensor::from_vec(values(24), &[2, 3, 4]).expect("host");
    let x = host.to_device(gpu).expect("to cuda");
    let t = x.transpose(0, 2).expect("view");
    assert!(t.shares_storage(&x));
    assert_eq!(t.stride(), vec![1, 4, 12]);
    let c = t.contiguous().expect("contiguous");
    assert!(!c.shares_storage(&x) && c.is_contiguous());
    let expected = host.transpose(0, 2).unwrap().contiguous().unwrap();
    assert_eq!(
        c.to_vec::<f32>().expect("read"),
        expected.to_vec::<f32>().unwrap()
    );
    // A strided view read straight back, a narrowed column written in place.
    assert_eq!(
        t.to_vec::<f32>().expect("read"),
        expected.to_vec::<f32>().unwrap()
    );
    let col = x.select(2, 1).expect("column");
    col.fill_(7.0).expect("fill a strided view");
    let host_col = host.select(2, 1).unwrap();
    host_col.fill_(7.0).unwrap();
    assert_eq!(
        x.to_vec::<f32>().expect("read"),
        host.to_vec::<f32>().unwrap()
    );
    assert_eq!(x.version(), 1);
    // Conversions on the device, and a zero fill of a whole tensor.
    let h = x.to(DType::F16).expect("to f16");
    assert_eq!(h.device(), gpu);
    assert_eq!(
        h.to_vec::<f32>().expect("read"),
        host.to(DType::F16).unwrap().to_vec::<f32>().unwrap()
    );
    let y = x.deep_clone().expect("clone");
    y.zero_().expect("zero_");
    assert_eq!(y.to_vec::<f32>().expect("read"), vec![0.0; 24]);
    // copy_ from the host into a device view, and from the device into a host tensor.
    let dst = Tensor::on(gpu).zeros(&[4, 3], DType::F64).expect("zeros");
    dst.t()
        .expect("view")
        .copy_(&host.select(0, 0).unwrap())
        .expect("copy_ from the host");
    let back = Tensor::zeros(&[4, 3], DType::F64).unwrap();
    back.copy_(&dst).expect("copy_ to the host");
    let want = host
        .select(0, 0)
        .unwrap()
        .t()
        .unwrap()
        .to(DType::F64)
        .unwrap();
    assert_eq!(
        back.to_vec::<f64>().unwrap(),
        want.contiguous().unwrap().to_vec::<f64>().unwrap()
    );
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn transfers_round_trip_and_gradients_come_back_to_the_host() {
    let gpu = device();
    let x = Tensor::from_vec(values(8), &[2, 4])
        .expect("host")
        .requires_grad_(true)
        .expect("leaf");
    let on_gpu = x.to_device(gpu).expect("to cuda");
    assert_eq!(on_gpu.grad_fn_name(), Some("ToCopyBackward0"));
    let back = on_gpu.cpu().expect("cpu");
    assert_eq!(back.device(), Device::Cpu);
    assert_eq!(back.to_vec::<f32>().unwrap(), values(8));
    back.mul(&back)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .expect("backward");
    let g = x.grad().expect("the gradient flows through both moves");
    let want: Vec<f32> = values(8).iter().map(|v| 2.0 * v).collect();
    assert_eq!(g.to_vec::<f32>().unwrap(), want);
    // A move and a conversion in one copy, both ways.
    let d = x
        .detach()
        .unwrap()
        .to_device_dtype(gpu, DType::F64)
        .expect("to cuda as f64");
    assert_eq!(d.dtype(), DType::F64);
    let i = d
        .to_device_dtype(Device::Cpu, DType::I32)
        .expect("to cpu as i32");
    assert_eq!(
        i.to_vec::<i32>().unwrap(),
        vec![-3, -2, -2, -1, -1, 0, 0, 0]
    );
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn non_blocking_copies_hold_the_pinned_block_and_reads_wait_for_them() {
    let gpu = device();
    let n = 1 << 22;
    let pinned = Tensor::from_vec(values(n), &[n])
        .expect("host")
        .pin_memory()
        .expect("pinned");
    assert!(pinned.is_pinned());
    let addr = pinned.data_ptr();
    let side = cuda::Stream::new(0).expect("a stream");
    // The copy waits behind long work on its stream, so it is still queued below.
    let on_gpu = cuda::with_stream(&side, || {
        keep_busy(gpu);
        pinned.to_device_non_blocking(gpu)
    })
    .expect("queued copy");
    // The pinned block is held until the copy has read it, even with the tensor dropped:
    // a new pinned tensor of the same size does not get it while the copy is queued.
    drop(pinned);
    let again = Tensor::zeros(&[n], DType::F32)
        .unwrap()
        .pin_memory()
        .expect("pinned");
    let queued = !side.query().expect("queried");
    assert!(
        queued,
        "the side stream's work ended too soon to test anything"
    );
    assert_ne!(
        again.data_ptr(),
        addr,
        "a pinned block was reused while a copy read it"
    );
    side.synchronize().expect("synchronized");
    assert_eq!(on_gpu.to_vec::<f32>().expect("read"), values(n));
    // Device to host, non-blocking: a pinned result that any read waits for.
    let host = cuda::with_stream(&side, || on_gpu.to_device_non_blocking(Device::Cpu))
        .expect("queued copy back");
    assert!(host.is_pinned());
    assert_eq!(host.to_vec::<f32>().expect("the read waits"), values(n));
    // From pageable memory the copy is synchronous, and the result right at once.
    let pageable = Tensor::from_vec(values(16), &[16]).unwrap();
    let d = pageable.to_device_non_blocking(gpu).expect("copy");
    assert_eq!(d.cpu().unwrap().to_vec::<f32>().unwrap(), values(16));
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn record_stream_keeps_a_freed_block_from_its_stream_until_the_other_stream_is_done() {
    let gpu = device();
    memory::empty_cache(gpu).expect("empty_cache");
    let side = cuda::Stream::new(0).expect("a stream");
    let a = Tensor::on(gpu)
        .zeros(&[1 << 20], DType::F32)
        .expect("zeros");
    let addr = a.data_ptr();
    a.record_stream(&side).expect("record_stream");
    // Work on the side stream that the block's stream knows nothing about.
    cuda::with_stream(&side, || keep_busy(gpu));
    drop(a);
    let b = Tensor::on(gpu)
        .zeros(&[1 << 20], DType::F32)
        .expect("zeros");
    let side_busy = !side.query().expect("queried");
    assert!(
        side_busy,
        "the side stream's work ended too soon to test anything"
    );
    assert_ne!(
        b.data_ptr(),
        addr,
        "the block was handed out while the side stream could still use it"
    );
    side.synchronize().expect("synchronized");
    drop(b);
    let c = Tensor::on(gpu)
        .zeros(&[1 << 20], DType::F32)
        .expect("zeros");
    // Once the side stream is done, the block is free for its own stream again.
    assert_eq!(c.data_ptr(), addr);
    // A tensor cannot record a stream of another device or a host tensor.
    let host = Tensor::zeros(&[4], DType::F32).unwrap();
    assert!(host.record_stream(&side).is_err());
}

#[test]
#[ignore = "needs a CUDA device: run by scripts/gpu-check"]
fn ops_without_a_cuda_kernel_say_which_and_what_to_do() {
    let gpu = device();
    let x = Tensor::on(gpu).ones(&[4], DType::F32).expect("ones");
    for (name, r) in [
        ("add", x.add(&x)),
        ("mul", x.mul(2.0)),
        ("relu", x.relu()),
        (
            "matmul",
            x.reshape(&[2, 2])
                .unwrap()
                .matmul(&x.reshape(&[2, 2]).unwrap()),
        ),
    ] {
        match r {
            Err(Error::Unsupported { op, message }) => {
                assert_eq!(op, name);
                assert!(message.contains("has no CUDA kernel yet"), "{message}");
            }
            other => panic!("{name}: expected Unsupported, got {other:?}"),
        }
    }
    // Nothing was written, and nothing is left to report later.
    assert_eq!(x.version(), 0);
    assert_eq!(x.to_vec::<f32>().expect("read"), vec![1.0; 4]);
}
