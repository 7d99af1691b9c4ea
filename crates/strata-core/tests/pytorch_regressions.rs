//! Regression tests for behaviour differences from PyTorch found by the conformance
//! programs: each test pins PyTorch's observed behaviour for one cause.

/// Forward behaviour: reductions, dtype checks, value ranges and layouts.
mod forward {
    use strata_core::nn::functional as F;
    use strata_core::{DType, Scalar, Tensor};

    fn t32(v: &[f32], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape).unwrap()
    }

    #[test]
    fn zero_dim_reductions_accept_dim_0_and_minus_1() {
        let x = Tensor::scalar(1.5f64, DType::F32)
            .unwrap()
            .requires_grad_(true)
            .unwrap();
        for d in [0i64, -1] {
            let dims = [d];
            let outs = [
                x.sum(Some(&dims), false).unwrap(),
                x.mean(Some(&dims), false).unwrap(),
                x.prod(Some(&dims), false).unwrap(),
                x.amax(Some(&dims), false).unwrap(),
                x.amin(Some(&dims), false).unwrap(),
                x.logsumexp(Some(&dims), false).unwrap(),
                x.norm(2.0, Some(&dims), false).unwrap(),
                x.var(Some(&dims), 0.0, false).unwrap(),
                x.std(Some(&dims), 0.0, false).unwrap(),
            ];
            for o in outs {
                assert_eq!(o.dim(), 0);
            }
        }
        assert!(x.sum(Some(&[0, -1]), false).is_err());
        assert_eq!(x.movedim(&[0], &[0]).unwrap().dim(), 0);
        assert_eq!(x.movedim(&[-1], &[0]).unwrap().dim(), 0);
    }

    #[test]
    fn vector_times_matrix_starts_at_version_1() {
        let v = t32(&[1.0, 2.0], &[2]);
        let m = t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        assert_eq!(v.matmul(&m).unwrap().version(), 1);
        assert_eq!(m.matmul(&v).unwrap().version(), 0);
        assert_eq!(F::linear(&v, &m, None).unwrap().version(), 1);
        let b = t32(&[1.0, 1.0], &[2]);
        assert_eq!(F::linear(&v, &m, Some(&b)).unwrap().version(), 0);
    }

    #[test]
    fn layer_norm_output_is_contiguous() {
        let x = t32(&[1.0, 2.0, 3.0, 4.0, 5.0, 7.0], &[3, 2]).t().unwrap();
        let y = F::layer_norm(&x, &[3], None, None, 1e-5).unwrap();
        assert!(y.is_contiguous());
    }

    #[test]
    fn logsumexp_takes_an_empty_dim_list_only_with_keepdim() {
        let x = t32(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
        assert!(x.logsumexp(Some(&[]), false).is_err());
        let all = x.logsumexp(Some(&[]), true).unwrap();
        assert_eq!(all.shape().as_slice(), vec![1, 1]);
        let want = (1f32.exp() + 2f32.exp() + 3f32.exp() + 4f32.exp()).ln();
        assert!((all.to_vec::<f32>().unwrap()[0] - want).abs() < 1e-5);
        let z = Tensor::scalar(1.5f64, DType::F32).unwrap();
        assert!(z.logsumexp(Some(&[]), false).is_ok());
    }

    #[test]
    fn class_losses_ignore_target_minus_100() {
        let x = t32(&[-1.0, -2.0, -0.5, -0.3], &[2, 2])
            .requires_grad_(true)
            .unwrap();
        let t = Tensor::from_vec(vec![-100i64, 1], &[2]).unwrap();
        let y = F::nll_loss(&x, &t, F::Reduction::Mean).unwrap();
        assert_eq!(y.item::<f32>().unwrap(), 0.3);
        y.backward().unwrap();
        assert_eq!(
            x.grad().unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, 0.0, 0.0, -1.0]
        );
        let all = Tensor::from_vec(vec![-100i64, -100], &[2]).unwrap();
        let ce = F::cross_entropy(&x.detach().unwrap(), &all, F::Reduction::Mean).unwrap();
        assert!(ce.item::<f32>().unwrap().is_nan());
        let sum = F::cross_entropy(&x.detach().unwrap(), &all, F::Reduction::Sum).unwrap();
        assert_eq!(sum.item::<f32>().unwrap(), 0.0);
    }

    #[test]
    fn fill_values_that_overflow_the_dtype_are_refused() {
        let u = Tensor::from_vec(vec![1i64, 2], &[2])
            .unwrap()
            .to(DType::U8)
            .unwrap();
        assert!(u.fill_(300i64).is_err());
        assert_eq!(u.to_vec::<u8>().unwrap(), vec![1, 2]);
        u.fill_(-1i64).unwrap();
        assert_eq!(u.to_vec::<u8>().unwrap(), vec![255, 255]);
        assert!(u.fill_(-0.5f64).is_err());
        assert!(Tensor::full(&[2], 300i64, DType::U8).is_err());
        let i = Tensor::zeros(&[2], DType::I32).unwrap();
        assert!(i.fill_(3_000_000_000i64).is_err());
        let m = Tensor::from_vec(vec![true, false], &[2]).unwrap();
        assert!(i.masked_fill(&m, 3e9f64).is_err());
        assert!(Tensor::zeros(&[2], DType::F16)
            .unwrap()
            .fill_(1e6f64)
            .is_err());
        assert!(Tensor::zeros(&[1], DType::F16)
            .unwrap()
            .fill_(1e6f64)
            .is_ok());
    }

    #[test]
    fn clamp_compares_integer_bounds_unwrapped() {
        let u = Tensor::from_vec(vec![5i64, 0], &[2])
            .unwrap()
            .to(DType::U8)
            .unwrap();
        let y = u.clamp(Some(Scalar::Int(-1)), None).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), vec![5, 0]);
        assert!(u.clamp(None, Some(Scalar::Int(-1))).is_err());
        assert!(u.clamp(Some(Scalar::Int(300)), None).is_err());
        let y = u
            .clamp(Some(Scalar::Int(-1)), Some(Scalar::Int(300)))
            .unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), vec![5, 0]);
        u.clamp_(Some(Scalar::Int(-1)), None).unwrap();
        assert_eq!(u.to_vec::<u8>().unwrap(), vec![5, 0]);
    }

    #[test]
    fn dtype_errors_match_pytorch() {
        let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
        assert!(b.argmax(None, false).is_err());
        assert!(b.argmin(Some(0), false).is_err());
        assert!(b.abs().is_err());
        assert!(b.pow(-2i64).is_err());
        let i = Tensor::from_vec(vec![1i64, 2, 3], &[3]).unwrap();
        assert!(i.pow(-1i64).is_err());
        assert!(i.pow(2i64).is_ok());
        assert!(i.pow(-1.0f64).is_ok());
        let f = t32(&[1.0, 2.0], &[2]);
        assert!(f.add_scaled(&f, true).is_err());
        assert!(b.add_scaled(&b, true).is_ok());
    }

    #[test]
    fn to_keeps_the_memory_order_of_a_non_dense_input() {
        let base = Tensor::arange(9, DType::F32).unwrap();
        let x = base.as_strided(&[2, 3], &[1, 3], Some(1)).unwrap();
        let y = x.to(DType::F64).unwrap();
        assert_eq!(y.stride(), vec![1, 2]);
        assert_eq!(
            y.to_vec::<f64>().unwrap(),
            x.to(DType::F64)
                .unwrap()
                .contiguous()
                .unwrap()
                .to_vec::<f64>()
                .unwrap()
        );
    }

    #[test]
    fn half_precision_accumulates_like_pytorch() {
        let h = t32(&[300.0, 300.0], &[1, 2]).to(DType::F16).unwrap();
        let k = t32(&[300.0, -300.0], &[2, 1]).to(DType::F16).unwrap();
        let y = h.matmul(&k).unwrap().to(DType::F32).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap(), vec![0.0]);
        let p = t32(&[300.0, 300.0, 0.001], &[3]).to(DType::F16).unwrap();
        let y = p.prod(None, false).unwrap().to(DType::F32).unwrap();
        assert_eq!(y.item::<f32>().unwrap(), f32::INFINITY);
    }

    #[test]
    fn float_to_int_conversion_follows_x86() {
        let x = t32(&[3e9, -2.7, f32::NAN], &[3]);
        assert_eq!(
            x.to(DType::I32).unwrap().to_vec::<i32>().unwrap(),
            vec![i32::MIN, -2, i32::MIN]
        );
        assert_eq!(
            x.to(DType::I64).unwrap().to_vec::<i64>().unwrap()[2],
            i64::MIN
        );
        let y = t32(&[300.0, -1.0], &[2]).to(DType::U8).unwrap();
        assert_eq!(y.to_vec::<u8>().unwrap(), vec![44, 255]);
    }

    #[test]
    fn log_softmax_subtracts_the_max_first() {
        let x = t32(&[1e20, 1e20], &[2]);
        let y = x.log_softmax(0).unwrap().to_vec::<f32>().unwrap();
        assert!((y[0] + std::f32::consts::LN_2).abs() < 1e-6, "{y:?}");
    }

    #[test]
    fn std_and_norm_do_not_overflow_in_the_narrow_dtype() {
        let x = t32(&[1e30, 1.0, 2.0], &[3]);
        let s = x
            .std(Some(&[0]), 1.0, false)
            .unwrap()
            .item::<f32>()
            .unwrap();
        assert!((s / 5.773_503e29 - 1.0).abs() < 1e-5, "{s}");
        let h = t32(&[300.0, 300.0], &[2]).to(DType::F16).unwrap();
        let n = h
            .norm(2.0, None, false)
            .unwrap()
            .to(DType::F32)
            .unwrap()
            .item::<f32>()
            .unwrap();
        assert!((n - 424.26).abs() < 0.5, "{n}");
    }

    #[test]
    fn a_number_operand_keeps_a_size_one_dimension_stride() {
        let x = t32(&[1.0, 2.0, 3.0], &[1, 3]).t().unwrap();
        assert_eq!(x.lt(1.65f64).unwrap().stride(), vec![1, 3]);
        let c = t32(&[1.0, 2.0, 3.0], &[3, 1]);
        assert_eq!(c.lt(1.65f64).unwrap().stride(), vec![1, 1]);
    }
}

/// Backward behaviour: overwritten values, saved numbers, masks selected rather than
/// multiplied.
mod backward {
    use strata_core::{Scalar, Tensor};

    fn leaf(v: &[f32]) -> Tensor {
        Tensor::from_vec(v.to_vec(), &[v.len()])
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    }

    #[test]
    fn overwriting_writes_keep_the_graph_with_a_zero_gradient() {
        for which in 0..3 {
            let x = leaf(&[1.0, 2.0]);
            let y = x.mul(2i64).unwrap();
            match which {
                0 => y.zero_().unwrap(),
                1 => y.fill_(3i64).unwrap(),
                _ => y
                    .copy_(&Tensor::from_vec(vec![5.0f32, 6.0], &[2]).unwrap())
                    .unwrap(),
            };
            let s = y.sum(None, false).unwrap();
            s.backward_with(None, true).unwrap();
            assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
        }
        // The node that made the overwritten values is visited, so its saved output is checked.
        let x = leaf(&[1.0, 2.0]);
        let y = x.exp().unwrap();
        y.zero_().unwrap();
        assert!(y.sum(None, false).unwrap().backward().is_err());
    }

    #[test]
    fn multiplying_by_a_number_saves_it() {
        for div in [false, true] {
            let x = leaf(&[1.0, 2.0]);
            let y = if div { x.div(2i64) } else { x.mul(2.5f64) }.unwrap();
            let s = y.sum(None, false).unwrap();
            s.backward().unwrap();
            assert!(s.backward().is_err());
        }
        let x = leaf(&[1.0, 2.0]);
        let s = x.add(2i64).unwrap().sum(None, false).unwrap();
        s.backward().unwrap();
        assert!(s.backward().is_ok());
    }

    #[test]
    fn relu_and_clamp_select_the_gradient() {
        let x = leaf(&[0.0, -1.0, 4.0]);
        let s = x.relu().unwrap().sqrt().unwrap().sum(None, false).unwrap();
        s.backward().unwrap();
        assert_eq!(
            x.grad().unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, 0.0, 0.25]
        );
        let x = leaf(&[0.0, 1.0, 0.5, -1.0, 2.0]);
        let y = x.clamp(Some(Scalar::Int(0)), Some(Scalar::Int(1))).unwrap();
        y.sum(None, false).unwrap().backward().unwrap();
        assert_eq!(
            x.grad().unwrap().to_vec::<f32>().unwrap(),
            vec![0.0, 0.0, 1.0, 0.0, 0.0]
        );
        // A NaN output passes its gradient (PyTorch zeroes only where the output is <= 0).
        let x = leaf(&[f32::NAN, 1.0]);
        x.relu()
            .unwrap()
            .sum(None, false)
            .unwrap()
            .backward()
            .unwrap();
        let g = x.grad().unwrap().to_vec::<f32>().unwrap();
        assert_eq!(g[0], 1.0);
        assert_eq!(g[1], 1.0);
    }
}
