//! Tests of `index_select`, `gather` and `scatter_add` and of their `out=` forms.

use crate::{DType, Error, Tensor};

fn arange_f64(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    let shape: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
    Tensor::arange(n, DType::F64).unwrap().view(&shape).unwrap()
}

fn ids(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// Row-major multi-index of position `k` in `shape`.
fn unravel(mut k: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = k % shape[d];
        k /= shape[d];
    }
    c
}

fn ravel(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
}

/// A [2, 3, 4] tensor seen through a permutation: strided, not contiguous.
fn permuted() -> Tensor {
    Tensor::arange(24, DType::F64)
        .unwrap()
        .mul(1.5)
        .unwrap()
        .view(&[4, 3, 2])
        .unwrap()
        .permute(&[2, 1, 0])
        .unwrap()
}

#[test]
fn index_select_matches_brute_force_on_strided_inputs() {
    let x = permuted();
    assert!(!x.is_contiguous());
    let (shape, xv) = (x.shape(), x.to_vec::<f64>().unwrap());
    // A strided i32 index: every other element of a longer vector.
    let long = Tensor::from_vec(vec![2i32, 9, 0, 9, 2, 9, 1], &[7]).unwrap();
    let index = long.slice(0, None, None, 2).unwrap();
    let iv = [2usize, 0, 2, 1];
    for dim in 0..3 {
        let idx: Vec<usize> = iv.iter().map(|&i| i.min(shape[dim] - 1)).collect();
        let index = if dim == 0 {
            ids(&idx.iter().map(|&i| i as i64).collect::<Vec<_>>())
        } else {
            index.clone()
        };
        let r = x.index_select(dim as i64 - 3, &index).unwrap();
        let mut rs = shape.clone();
        rs[dim] = 4;
        assert_eq!(r.shape(), rs);
        assert!(r.is_contiguous());
        let got = r.to_vec::<f64>().unwrap();
        for (k, g) in got.iter().enumerate() {
            let mut c = unravel(k, &rs);
            c[dim] = idx[c[dim]];
            assert_eq!(*g, xv[ravel(&c, &shape)], "dim {dim} element {k}");
        }
    }
}

#[test]
fn index_select_copies_contiguous_rows_as_blocks() {
    // Contiguous after `dim` (the block-copy path) for dims 0 and 1, element-wise for 2.
    let x = arange_f64(&[6, 3, 4]).narrow(0, 1, 5).unwrap();
    let (shape, xv) = (x.shape(), x.to_vec::<f64>().unwrap());
    let idx = [2usize, 0, 2];
    for dim in 0..3 {
        let index = ids(&idx.iter().map(|&i| i as i64).collect::<Vec<_>>());
        let r = x.index_select(dim as i64, &index).unwrap();
        let mut rs = shape.clone();
        rs[dim] = 3;
        for (k, g) in r.to_vec::<f64>().unwrap().iter().enumerate() {
            let mut c = unravel(k, &rs);
            c[dim] = idx[c[dim]];
            assert_eq!(*g, xv[ravel(&c, &shape)], "dim {dim} element {k}");
        }
    }
    // Large enough to run in parallel.
    let table = Tensor::arange(1000 * 64, DType::F32)
        .unwrap()
        .view(&[1000, 64])
        .unwrap();
    let rows: Vec<i64> = (0..5000).map(|i| (i * 7) % 1000).collect();
    let r = table.index_select(0, &ids(&rows)).unwrap();
    let got = r.to_vec::<f32>().unwrap();
    for (k, g) in got.iter().enumerate() {
        assert_eq!(*g, (rows[k / 64] * 64 + (k % 64) as i64) as f32);
    }
}

#[test]
fn index_select_zero_d_and_empty() {
    let s = Tensor::scalar(7.0, DType::F32).unwrap();
    let r = s
        .index_select(0, &Tensor::scalar(0, DType::I64).unwrap())
        .unwrap();
    assert_eq!(
        (r.shape().to_vec(), r.to_vec::<f32>().unwrap()),
        (vec![], vec![7.0])
    );
    assert!(s.index_select(-1, &ids(&[0])).is_ok());
    assert!(matches!(
        s.index_select(0, &ids(&[0, 0])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        s.index_select(1, &ids(&[0])),
        Err(Error::Dim { .. })
    ));
    let x = arange_f64(&[3, 4]);
    let r = x
        .index_select(1, &Tensor::scalar(2, DType::I32).unwrap())
        .unwrap();
    assert_eq!(r.shape().as_slice(), vec![3, 1]);
    assert_eq!(r.to_vec::<f64>().unwrap(), vec![2., 6., 10.]);
    let r = x
        .index_select(1, &Tensor::zeros(&[0], DType::I64).unwrap())
        .unwrap();
    assert_eq!(r.shape().as_slice(), vec![3, 0]);
}

#[test]
fn index_select_errors() {
    let x = arange_f64(&[3, 4]);
    for bad in [3i64, -1, 100] {
        match x.index_select(0, &ids(&[0, bad])) {
            Err(Error::Index {
                index, dim, size, ..
            }) => {
                assert_eq!((index, dim, size), (bad, 0, 3))
            }
            other => panic!("expected an index error, got {other:?}"),
        }
    }
    let f = Tensor::zeros(&[1], DType::F32).unwrap();
    assert!(matches!(x.index_select(0, &f), Err(Error::DType { .. })));
    let u = Tensor::zeros(&[1], DType::U8).unwrap();
    assert!(matches!(x.index_select(0, &u), Err(Error::DType { .. })));
    let m = Tensor::zeros(&[1, 1], DType::I64).unwrap();
    assert!(matches!(x.index_select(0, &m), Err(Error::Shape { .. })));
    assert!(matches!(
        x.index_select(2, &ids(&[0])),
        Err(Error::Dim { .. })
    ));
}

#[test]
fn index_select_out_reuses_a_right_sized_output() {
    let x = permuted();
    let out = Tensor::full(&[2, 3, 2], -1.0, DType::F64).unwrap();
    let (id, v0) = (out.storage_id(), out.version());
    let r = x.index_select_out(2, &ids(&[3, 0]), &out).unwrap();
    assert!(r.is_same(&out));
    assert_eq!(out.storage_id(), id);
    assert_eq!(out.version(), v0 + 1);
    assert_eq!(
        out.to_vec::<f64>().unwrap(),
        x.index_select(2, &ids(&[3, 0]))
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    );
    // A transposed output of the right shape keeps its strides.
    let t = Tensor::zeros(&[2, 4], DType::F64).unwrap().t().unwrap();
    let y = arange_f64(&[5, 2]);
    y.index_select_out(0, &ids(&[4, 0, 1, 4]), &t).unwrap();
    assert_eq!(t.stride(), vec![1, 4]);
    assert_eq!(
        t.to_vec::<f64>().unwrap(),
        vec![8., 9., 0., 1., 2., 3., 8., 9.]
    );
    assert_eq!(t.version(), 1);
}

#[test]
fn index_select_out_resizes_and_refuses_bad_outputs() {
    let x = arange_f64(&[3, 4]);
    let out = Tensor::zeros(&[0], DType::F64).unwrap();
    let id = out.storage_id();
    x.index_select_out(0, &ids(&[2, 1]), &out).unwrap();
    assert_eq!(
        (out.shape().to_vec(), out.stride(), out.storage_id()),
        (vec![2, 4], vec![4, 1], id)
    );
    assert_eq!(
        out.to_vec::<f64>().unwrap(),
        vec![8., 9., 10., 11., 4., 5., 6., 7.]
    );
    assert_eq!(out.version(), 1);

    let out = Tensor::full(&[5], 3.0, DType::F64).unwrap();
    let check_untouched = |out: &Tensor| {
        assert_eq!(out.shape().as_slice(), vec![5]);
        assert_eq!(out.version(), 0);
        assert_eq!(out.to_vec::<f64>().unwrap(), vec![3.0; 5]);
    };
    assert!(matches!(
        x.index_select_out(0, &ids(&[0, 3]), &out),
        Err(Error::Index { .. })
    ));
    check_untouched(&out);
    let f32_out = Tensor::zeros(&[2, 4], DType::F32).unwrap();
    assert!(matches!(
        x.index_select_out(0, &ids(&[0]), &f32_out),
        Err(Error::DType { .. })
    ));
    assert_eq!(f32_out.version(), 0);
    // Outputs aliasing self, or overlapping themselves.
    let row = x.select(0, 2).unwrap().unsqueeze(0).unwrap();
    assert!(matches!(
        x.index_select_out(0, &ids(&[0]), &row),
        Err(Error::Overlap { .. })
    ));
    let expanded = Tensor::zeros(&[4], DType::F64)
        .unwrap()
        .expand(&[2, 4])
        .unwrap();
    assert!(matches!(
        x.index_select_out(0, &ids(&[0, 1]), &expanded),
        Err(Error::Overlap { .. })
    ));
    assert_eq!(x.version(), 0);
}

#[test]
fn gather_matches_brute_force() {
    let x = permuted(); // [2, 3, 4]
    let (xs, xv) = (x.shape(), x.to_vec::<f64>().unwrap());
    for dim in 0..3usize {
        // An index of shape [2, 2, 3] (smaller than x outside dim), transposed.
        let ishape = [3usize, 2, 2];
        let n: usize = ishape.iter().product();
        let vals: Vec<i64> = (0..n).map(|k| ((k * 7 + 3) % xs[dim]) as i64).collect();
        let index = Tensor::from_vec(vals, &ishape)
            .unwrap()
            .transpose(0, 2)
            .unwrap();
        let (is, iv) = (index.shape(), index.to_vec::<i64>().unwrap());
        let r = x.gather(dim as i64, &index).unwrap();
        assert_eq!(r.shape(), is);
        assert!(r.is_contiguous());
        for (k, g) in r.to_vec::<f64>().unwrap().iter().enumerate() {
            let mut c = unravel(k, &is);
            c[dim] = iv[k] as usize;
            assert_eq!(*g, xv[ravel(&c, &xs)], "dim {dim} element {k}");
        }
    }
    // 0-d with 1-d, and an index larger than self along dim.
    let s = Tensor::scalar(3.0, DType::F32).unwrap();
    assert_eq!(
        s.gather(0, &ids(&[0, 0])).unwrap().to_vec::<f32>().unwrap(),
        vec![3.0, 3.0]
    );
    let v = Tensor::from_vec(vec![1i32, 2], &[1, 2]).unwrap();
    let i = Tensor::from_vec(vec![1i64, 0, 1], &[1, 3]).unwrap();
    assert_eq!(
        v.gather(1, &i).unwrap().to_vec::<i32>().unwrap(),
        vec![2, 1, 2]
    );
}

#[test]
fn gather_errors() {
    let x = arange_f64(&[3, 4]);
    let i = Tensor::from_vec(vec![0i64, 4], &[1, 2]).unwrap();
    assert!(matches!(
        x.gather(1, &i),
        Err(Error::Index {
            index: 4,
            dim: 1,
            size: 4,
            ..
        })
    ));
    let i = Tensor::from_vec(vec![-1i64], &[1, 1]).unwrap();
    assert!(matches!(
        x.gather(0, &i),
        Err(Error::Index { index: -1, .. })
    ));
    assert!(matches!(x.gather(1, &ids(&[0])), Err(Error::Shape { .. })));
    let tall = Tensor::zeros(&[4, 1], DType::I64).unwrap();
    assert!(matches!(x.gather(1, &tall), Err(Error::Shape { .. })));
    let f = Tensor::zeros(&[1, 1], DType::F32).unwrap();
    assert!(matches!(x.gather(1, &f), Err(Error::DType { .. })));
    // An empty index is not checked: the result is empty.
    let e = Tensor::zeros(&[0], DType::F32).unwrap();
    assert_eq!(x.gather(1, &e).unwrap().shape().as_slice(), vec![0]);
}

#[test]
fn scatter_add_matches_brute_force_and_leaves_self_alone() {
    let x = permuted(); // [2, 3, 4]
    let (xs, xv) = (x.shape(), x.to_vec::<f64>().unwrap());
    let src = Tensor::arange(60, DType::F64)
        .unwrap()
        .view(&[5, 4, 3])
        .unwrap()
        .permute(&[2, 1, 0])
        .unwrap(); // [3, 4, 5]
    let (ss, sv) = (src.shape(), src.to_vec::<f64>().unwrap());
    for dim in 0..3usize {
        let ishape = [2usize, 3, 3];
        let n: usize = ishape.iter().product();
        let iv: Vec<i64> = (0..n).map(|k| ((k * 5) % xs[dim]) as i64).collect();
        let index = Tensor::from_vec(iv.clone(), &ishape).unwrap();
        let r = x.scatter_add(dim as i64, &index, &src).unwrap();
        assert!(r.is_contiguous());
        assert_eq!(r.shape(), xs);
        let mut want = xv.clone();
        for (k, &i) in iv.iter().enumerate() {
            let c = unravel(k, &ishape);
            let mut dc = c.clone();
            dc[dim] = i as usize;
            want[ravel(&dc, &xs)] += sv[ravel(&c, &ss)];
        }
        assert_eq!(r.to_vec::<f64>().unwrap(), want, "dim {dim}");
    }
    assert_eq!(x.to_vec::<f64>().unwrap(), xv);
    assert_eq!(x.version(), 0);
    // Repeated indices accumulate, per dtype.
    let z = Tensor::zeros(&[3], DType::I32).unwrap();
    let r = z
        .scatter_add(
            0,
            &ids(&[2, 0, 2]),
            &Tensor::from_vec(vec![1i32, 2, 3], &[3]).unwrap(),
        )
        .unwrap();
    assert_eq!(r.to_vec::<i32>().unwrap(), vec![2, 0, 4]);
    let s = Tensor::scalar(1.0, DType::F32).unwrap();
    let r = s
        .scatter_add(
            0,
            &ids(&[0, 0]),
            &Tensor::from_vec(vec![5.0f32, 6.0], &[2]).unwrap(),
        )
        .unwrap();
    assert_eq!(
        (r.shape().to_vec(), r.to_vec::<f32>().unwrap()),
        (vec![], vec![12.0])
    );
}

/// The kernels read the index where it lies: an i32 index at an offset in its storage, seen
/// transposed, and one broadcast with a zero stride.
#[test]
fn indexed_ops_read_strided_and_broadcast_indices_in_place() {
    let x = arange_f64(&[3, 4]);
    let xv = x.to_vec::<f64>().unwrap();
    // Storage [9, 9, 2, 0, 1, 3, 3, 1]: from offset 2, a [2, 3] view transposed to [3, 2].
    let base = Tensor::from_vec(vec![9i32, 9, 2, 0, 1, 3, 3, 1], &[8]).unwrap();
    let index = base
        .narrow(0, 2, 6)
        .unwrap()
        .view(&[2, 3])
        .unwrap()
        .t()
        .unwrap();
    assert!(!index.is_contiguous());
    let iv = index.to_vec::<i32>().unwrap();
    assert_eq!(iv, vec![2, 3, 0, 3, 1, 1]);
    let g = x.gather(1, &index).unwrap();
    let want: Vec<f64> = (0..6).map(|k| xv[(k / 2) * 4 + iv[k] as usize]).collect();
    assert_eq!(g.to_vec::<f64>().unwrap(), want);
    let src = Tensor::ones(&[3, 2], DType::F64).unwrap();
    let r = x.scatter_add(1, &index, &src).unwrap();
    let mut want = xv.clone();
    for (k, &i) in iv.iter().enumerate() {
        want[(k / 2) * 4 + i as usize] += 1.0;
    }
    assert_eq!(r.to_vec::<f64>().unwrap(), want);
    // One row of indices broadcast over three rows (stride 0 along dim 0).
    let row = Tensor::from_vec(vec![3i64, 3, 0], &[1, 3]).unwrap();
    let wide = row.expand(&[3, 3]).unwrap();
    let r = x
        .scatter_add(1, &wide, &Tensor::ones(&[3, 3], DType::F64).unwrap())
        .unwrap();
    let mut want = xv.clone();
    for r0 in 0..3 {
        want[r0 * 4 + 3] += 2.0;
        want[r0 * 4] += 1.0;
    }
    assert_eq!(r.to_vec::<f64>().unwrap(), want);
    assert_eq!(
        x.gather(1, &wide).unwrap().to_vec::<f64>().unwrap(),
        vec![3.0, 3.0, 0.0, 7.0, 7.0, 4.0, 11.0, 11.0, 8.0]
    );
}

#[test]
fn scatter_add_errors() {
    let x = arange_f64(&[3, 4]);
    let i = Tensor::from_vec(vec![0i64, 4], &[1, 2]).unwrap();
    let src = Tensor::ones(&[2, 2], DType::F64).unwrap();
    assert!(matches!(
        x.scatter_add(1, &i, &src),
        Err(Error::Index {
            index: 4,
            dim: 1,
            size: 4,
            ..
        })
    ));
    let i = Tensor::from_vec(vec![0i64, 1], &[2, 1]).unwrap();
    let small = Tensor::ones(&[1, 2], DType::F64).unwrap();
    assert!(matches!(
        x.scatter_add(1, &i, &small),
        Err(Error::Shape { .. })
    ));
    let flat = Tensor::ones(&[7], DType::F64).unwrap();
    assert!(matches!(
        x.scatter_add(1, &i, &flat),
        Err(Error::Shape { .. })
    ));
    let f32_src = Tensor::ones(&[2, 2], DType::F32).unwrap();
    assert!(matches!(
        x.scatter_add(1, &i, &f32_src),
        Err(Error::DType { .. })
    ));
    assert!(matches!(x.scatter_add(2, &i, &src), Err(Error::Dim { .. })));
    let wide = Tensor::zeros(&[1, 7], DType::I64).unwrap();
    let big_src = Tensor::ones(&[4, 7], DType::F64).unwrap();
    let r = x.scatter_add(1, &wide, &big_src).unwrap();
    assert_eq!(r.to_vec::<f64>().unwrap()[0], 7.0);
}

#[test]
fn large_parallel_gather_and_index_select() {
    let n = 1 << 17;
    let x = Tensor::arange(n, DType::I64).unwrap();
    let rev: Vec<i64> = (0..n as i64).rev().collect();
    let index = Tensor::from_vec(rev.clone(), &[n]).unwrap();
    assert_eq!(x.gather(0, &index).unwrap().to_vec::<i64>().unwrap(), rev);
    assert_eq!(
        x.index_select(0, &index).unwrap().to_vec::<i64>().unwrap(),
        rev
    );
}

/// The `out=` forms.
mod out_forms {
    use crate::ops::out::testing::{check_dtype_refused, check_out_form};
    use crate::{DType, Error, Tensor};

    /// A `[2, 3]` f32 tensor seen transposed from `[3, 2]` storage.
    fn strided() -> Tensor {
        Tensor::arange(6, DType::F32)
            .unwrap()
            .mul(1.5)
            .unwrap()
            .view(&[3, 2])
            .unwrap()
            .t()
            .unwrap()
    }

    fn ids(v: &[i64], shape: &[usize]) -> Tensor {
        Tensor::from_vec(v.to_vec(), shape).unwrap()
    }

    #[test]
    fn gathering_out_forms_match_their_ops() {
        let x = strided();
        let i = ids(&[1, 0, 1, 0, 0, 1], &[2, 3]);
        let i32s = i.to(DType::I32).unwrap();
        check_out_form(&x.gather(0, &i).unwrap(), 0.0, |o| x.gather_out(0, &i, o));
        check_out_form(&x.gather(0, &i32s).unwrap(), 0.0, |o| {
            x.gather_out(0, &i32s, o)
        });
        let j = ids(&[2, 0, 1, 1], &[2, 2]);
        check_out_form(&x.gather(1, &j).unwrap(), 0.0, |o| x.gather_out(1, &j, o));
        let src = Tensor::ones(&[2, 3], DType::F32).unwrap();
        check_out_form(&x.scatter_add(0, &i, &src).unwrap(), 0.0, |o| {
            x.scatter_add_out(0, &i, &src, o)
        });
        check_out_form(&x.scatter_add(1, &j, &src).unwrap(), 0.0, |o| {
            x.scatter_add_out(1, &j, &src, o)
        });
        let k = ids(&[2, 0], &[2]);
        check_out_form(&x.index_select(1, &k).unwrap(), 0.0, |o| {
            x.index_select_out(1, &k, o)
        });
        // The indexed ops take self's dtype exactly.
        check_dtype_refused(&[2, 3], DType::F64, |o| x.gather_out(0, &i, o));
        check_dtype_refused(&[2, 3], DType::F64, |o| x.scatter_add_out(0, &i, &src, o));
        // Bad indices are refused before anything is written.
        let out = Tensor::full(&[2, 3], 4.0, DType::F32).unwrap();
        let bad = ids(&[0, 2, 0, 0, 0, 0], &[2, 3]);
        assert!(matches!(
            x.gather_out(0, &bad, &out),
            Err(Error::Index { .. })
        ));
        assert!(matches!(
            x.scatter_add_out(0, &bad, &src, &out),
            Err(Error::Index { .. })
        ));
        assert_eq!(
            (out.version(), out.to_vec::<f32>().unwrap()),
            (0, vec![4.0; 6])
        );
    }

    #[test]
    fn scatter_add_out_may_write_into_self_but_not_into_its_other_inputs() {
        let x = strided().contiguous().unwrap().deep_clone().unwrap();
        let i = ids(&[1, 0, 1, 0, 0, 1], &[2, 3]);
        let src = Tensor::ones(&[2, 3], DType::F32).unwrap();
        let want = x.scatter_add(0, &i, &src).unwrap();
        x.scatter_add_out(0, &i, &src, &x).unwrap();
        assert_eq!(x.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
        assert_eq!(x.version(), 1);
        // As PyTorch: gather into its input, or scatter_add into src, is refused.
        let y = strided().contiguous().unwrap().deep_clone().unwrap();
        assert!(matches!(
            y.gather_out(0, &i, &y),
            Err(Error::Overlap { .. })
        ));
        assert!(matches!(
            x.scatter_add_out(0, &i, &y, &y),
            Err(Error::Overlap { .. })
        ));
        assert_eq!(y.version(), 0);
    }
}
