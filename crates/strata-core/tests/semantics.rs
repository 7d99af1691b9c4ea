//! PyTorch semantics a user relies on: versions, overlap rules, promotion, errors that change
//! nothing, memory returned on drop.

use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostAllocator};
use strata_core::{with_allocator, DType, Error, Scalar, Tensor};

fn own_allocator() -> Arc<dyn DeviceAllocator> {
    Arc::new(HostAllocator::new())
}

#[test]
fn copy_onto_itself_is_a_no_op_that_counts_as_a_write() {
    let x = Tensor::arange(4, DType::F32).unwrap();
    x.copy_(&x).unwrap();
    assert_eq!(x.version(), 1);
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![0., 1., 2., 3.]);
}

#[test]
fn full_overlap_is_allowed_partial_is_refused() {
    let x = Tensor::arange(9, DType::F32)
        .unwrap()
        .view(&[3, 3])
        .unwrap();
    x.add_(&x).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap()[8], 16.0);
    let before = x.to_vec::<f32>().unwrap();
    let err = x.add_(&x.t().unwrap()).unwrap_err();
    assert!(matches!(err, Error::Overlap { .. }), "{err}");
    assert_eq!(
        x.to_vec::<f32>().unwrap(),
        before,
        "nothing written after the error"
    );
    assert_eq!(x.version(), 1, "a refused op does not count as a write");
}

#[test]
fn writing_into_an_expanded_tensor_is_refused_but_fill_is_not() {
    let x = Tensor::arange(3, DType::F32).unwrap();
    let e = x.expand(&[4, 3]).unwrap();
    assert!(matches!(
        e.add_scalar_(1.0).unwrap_err(),
        Error::Overlap { .. }
    ));
    e.fill_(7.0).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![7., 7., 7.]);
}

#[test]
fn type_promotion_follows_pytorch_priorities() {
    let i = Tensor::arange(3, DType::I32).unwrap();
    assert_eq!(i.add(2i64).unwrap().dtype(), DType::I32);
    assert_eq!(i.add(2.0).unwrap().dtype(), DType::F32);
    assert_eq!(
        i.div(&i).unwrap().dtype(),
        DType::F32,
        "int / int is true division"
    );
    let h = Tensor::ones(&[2], DType::F16).unwrap();
    let d0 = Tensor::scalar(1.0, DType::F64).unwrap();
    assert_eq!(
        h.add(&d0).unwrap().dtype(),
        DType::F16,
        "0-d tensors rank below dimensioned"
    );
    assert_eq!(
        i.add(&d0).unwrap().dtype(),
        DType::F64,
        "but win on category"
    );
}

#[test]
fn in_place_result_that_does_not_fit_is_refused() {
    let i = Tensor::arange(3, DType::I64).unwrap();
    let err = i.add_(Scalar::Float(0.5)).unwrap_err();
    assert!(matches!(err, Error::DType { .. }), "{err}");
    assert!(err.to_string().contains("cannot be stored"));
    assert_eq!(i.to_vec::<i64>().unwrap(), vec![0, 1, 2]);
    assert!(i.div_(2i64).is_err(), "true division gives floats");
}

#[test]
fn to_same_dtype_is_the_same_tensor() {
    let x = Tensor::arange(3, DType::F32).unwrap();
    assert!(x.to(DType::F32).unwrap().is_same(&x));
    assert!(!x.to(DType::F64).unwrap().shares_storage(&x));
    let c = x.contiguous().unwrap();
    assert!(
        c.is_same(&x),
        "contiguous() of a contiguous tensor is itself"
    );
}

#[test]
fn views_record_their_base() {
    let x = Tensor::arange(6, DType::F32).unwrap();
    let v = x.view(&[2, 3]).unwrap();
    let t = v.t().unwrap();
    assert!(
        t.base().unwrap().is_same(&x),
        "a view of a view points at the root"
    );
    assert_eq!(t.view_info().unwrap().op, "t");
    assert!(x.base().is_none());
    let parts = x.split(strata_core::SplitSize::Size(2), 0).unwrap();
    assert_eq!(
        parts[0].view_info().unwrap().creation,
        strata_core::ViewCreation::MultiOutput
    );
}

#[test]
fn memory_returns_the_moment_the_last_view_drops() {
    let a = own_allocator();
    let (x, v) = with_allocator(&a, || {
        let x = Tensor::zeros(&[256], DType::F32).unwrap();
        let v = x.narrow(0, 10, 5).unwrap();
        (x, v)
    });
    assert_eq!(a.memory_allocated(), 1024);
    drop(x);
    assert_eq!(
        a.memory_allocated(),
        1024,
        "the view keeps the storage alive"
    );
    drop(v);
    assert_eq!(a.memory_allocated(), 0);
}

#[test]
fn failed_ops_allocate_nothing() {
    let a = own_allocator();
    with_allocator(&a, || {
        let x = Tensor::zeros(&[4, 3], DType::F32).unwrap();
        let y = Tensor::zeros(&[5], DType::F32).unwrap();
        let before = a.memory_allocated();
        assert!(x.add(&y).is_err());
        assert!(x.view(&[5]).is_err());
        assert!(x.select(0, 4).is_err());
        assert_eq!(a.memory_allocated(), before);
    });
}

#[test]
fn allocation_sites_name_the_user_line() {
    #[derive(Debug, Default)]
    struct Recorder {
        inner: HostAllocator,
        sites: std::sync::Mutex<Vec<strata_alloc::Site>>,
    }
    impl DeviceAllocator for Recorder {
        fn allocate(
            &self,
            size: usize,
            site: &strata_alloc::Site,
        ) -> Result<strata_alloc::Block, strata_alloc::AllocError> {
            self.sites.lock().unwrap().push(*site);
            self.inner.allocate(size, site)
        }
        unsafe fn deallocate(&self, block: strata_alloc::Block) {
            // SAFETY: every block this allocator hands out came from `inner`.
            unsafe { self.inner.deallocate(block) }
        }
        fn memory_allocated(&self) -> usize {
            self.inner.memory_allocated()
        }
        fn max_memory_allocated(&self) -> usize {
            self.inner.max_memory_allocated()
        }
        fn reset_peak_memory_stats(&self) {
            self.inner.reset_peak_memory_stats()
        }
        fn name(&self) -> &str {
            "recorder"
        }
    }
    let rec = Arc::new(Recorder::default());
    let a: Arc<dyn DeviceAllocator> = rec.clone();
    let line = line!() + 1;
    let _t = with_allocator(&a, || Tensor::ones(&[8], DType::F32)).unwrap();
    let sites = rec.sites.lock().unwrap();
    assert_eq!(sites[0].op, "ones");
    assert!(sites[0].file.ends_with("semantics.rs"));
    assert_eq!(sites[0].line, line);
}

#[test]
fn display_prints_like_pytorch() {
    let x = Tensor::arange(6, DType::I64)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    assert_eq!(x.to_string(), "tensor([[0, 1, 2],\n        [3, 4, 5]])");
}

#[test]
fn generator_state_round_trips() {
    let mut g = strata_core::Generator::new(3);
    let state = g.get_state();
    let a = Tensor::randn_with(&[5], DType::F32, &mut g).unwrap();
    g.set_state(&state).unwrap();
    let b = Tensor::randn_with(&[5], DType::F32, &mut g).unwrap();
    assert_eq!(a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
}

#[test]
fn out_forms_write_in_place_and_resize_like_pytorch() {
    let a = Tensor::arange(6, DType::F32)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    let b = Tensor::full(&[3], 2.0, DType::F32).unwrap();
    let out = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let ptr = out.data_ptr();
    a.mul_out(&b, &out).unwrap();
    assert_eq!(out.data_ptr(), ptr, "right shape: written where it is");
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![0., 2., 4., 6., 8., 10.]);
    a.sub_out(&b, 1i64, &out).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![-2., -1., 0., 1., 2., 3.]);
    let empty = Tensor::zeros(&[0], DType::F32).unwrap();
    a.div_out(&b, &empty).unwrap();
    assert_eq!(
        empty.shape().as_slice(),
        vec![2, 3],
        "an empty out is resized"
    );
    assert_eq!(
        empty.to_vec::<f32>().unwrap(),
        vec![0., 0.5, 1., 1.5, 2., 2.5]
    );
    let ints = Tensor::zeros(&[2, 3], DType::I64).unwrap();
    let err = a.div_out(&b, &ints).unwrap_err();
    assert!(err.to_string().contains("i64"), "{err}");
    assert_eq!(
        ints.to_vec::<i64>().unwrap(),
        vec![0; 6],
        "nothing written on error"
    );
}
