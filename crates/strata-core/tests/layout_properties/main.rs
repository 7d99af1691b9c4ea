//! Property tests for layouts and views, checked against brute-force models written here.
//!
//! The base tensors are `Tensor::arange(n, DType::I64)` (possibly narrowed), so every value
//! equals its storage position: reading a view back tells exactly which storage elements it
//! sees. Two oracles are used:
//!
//! * an *index oracle*: `offset + Σ i_k * stride_k` over every multi-index in row-major
//!   order, computed by a loop in this file (never `Layout::element_offsets`);
//! * a *value model*: an explicit row-major array of storage positions that every view op
//!   transforms by gathering, with PyTorch's semantics written out independently of strides.

mod oracle;

use proptest::prelude::*;
use proptest::test_runner::Config;
use strata_core::layout::view::compute_stride;
use strata_core::layout::Layout;
use strata_core::{DType, Tensor};

use oracle::*;

fn op_chain() -> impl Strategy<Value = Vec<(u8, [u16; 6])>> {
    prop::collection::vec((any::<u8>(), prop::array::uniform6(any::<u16>())), 0..6)
}

fn base_shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0usize..5, 0..4)
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Builds a view by running a chain of ops on the base; returns it with its model.
fn build_view(
    base: &Tensor,
    model: &Model,
    storage_len: usize,
    ops: &[(u8, [u16; 6])],
    check: bool,
) -> (Tensor, Model, Vec<String>) {
    let (mut t, mut m) = (base.clone(), model.clone());
    let mut trace = Vec::new();
    for (kind, p) in ops {
        if let Some((nt, nm, desc)) = apply_op(&t, &m, *kind, p, storage_len) {
            trace.push(desc);
            t = nt;
            m = nm;
            if check {
                check_view(&t, &m, base, &trace);
            }
        }
    }
    (t, m, trace)
}

proptest! {
    #![proptest_config(config(256))]

    /// (a) Any chain of view ops reads exactly the storage elements that
    /// `offset + Σ i_k * stride_k` names, and the elements PyTorch's semantics of each op say.
    #[test]
    fn views_read_what_their_strides_say(
        shape in base_shape(),
        front in 0usize..4,
        back in 0usize..4,
        ops in op_chain(),
    ) {
        let (base, model, storage_len) = make_base(&shape, front, back);
        check_view(&base, &model, &base, &[]);
        let (t, m, trace) = build_view(&base, &model, storage_len, &ops, true);
        // A copy holds the same values in its own memory, densely.
        let c = t.deep_clone().unwrap();
        prop_assert!(!c.shares_storage(&base));
        prop_assert_eq!(c.to_vec::<i64>().unwrap(), m.data.clone(), "deep_clone after {:?}", trace);
        prop_assert!(brute_is_dense(&c.layout()), "deep_clone layout {:?}", c.layout());
        let k = t.contiguous().unwrap();
        prop_assert!(k.is_contiguous());
        prop_assert_eq!(k.to_vec::<i64>().unwrap(), m.data, "contiguous after {:?}", trace);
    }

    /// (b) `reshape` gives the values and shape of contiguous-then-view, is a view (shares
    /// storage) exactly when `view` succeeds, and is otherwise an independent copy.
    #[test]
    fn reshape_equals_contiguous_then_view(
        shape in prop::collection::vec(0usize..5, 0..5),
        perm_seed in any::<u64>(),
        narrow_seed in any::<u16>(),
        split in prop::collection::vec(any::<u16>(), 0..5),
        infer in any::<u8>(),
    ) {
        let n = numel(&shape);
        let nd = shape.len();
        let mut t = Tensor::arange(n, DType::I64).unwrap().view(&shape_i64(&shape)).unwrap();
        // Random permutation.
        let mut perm: Vec<i64> = (0..nd as i64).collect();
        let mut s = perm_seed;
        for i in (1..nd).rev() {
            perm.swap(i, (s % (i as u64 + 1)) as usize);
            s /= 7;
        }
        t = t.permute(&perm).unwrap();
        // Sometimes drop the first element of one dim, leaving a gap.
        if nd > 0 && narrow_seed % 3 == 0 {
            let d = (narrow_seed as usize / 3) % nd;
            let size = t.shape()[d];
            if size > 1 {
                t = t.narrow(d as i64, 1, size - 1).unwrap();
            }
        }
        let cur = t.shape();
        let n = numel(&cur);
        // A random new shape with n elements.
        let mut new_shape: Vec<usize> = Vec::new();
        if n == 0 {
            new_shape = split.iter().map(|&r| (r % 4) as usize).collect();
            if !new_shape.contains(&0) {
                new_shape.push(0);
            }
        } else {
            let mut rem = n;
            for &r in &split {
                let divisors: Vec<usize> = (1..=rem).filter(|d| rem.is_multiple_of(*d)).collect();
                let d = divisors[r as usize % divisors.len()];
                new_shape.push(d);
                rem /= d;
            }
            if rem != 1 {
                new_shape.push(rem);
            }
        }
        prop_assert_eq!(numel(&new_shape), n);
        let mut req = shape_i64(&new_shape);
        // Sometimes ask for one dim to be inferred.
        if !req.is_empty() && infer % 2 == 0 {
            let k = infer as usize / 2 % req.len();
            let others: usize = new_shape.iter().enumerate().filter(|(j, _)| *j != k).map(|(_, &v)| v).product();
            if others != 0 {
                req[k] = -1;
            }
        }
        let expected = t.contiguous().unwrap().view(&req).unwrap();
        let r = t.reshape(&req).unwrap();
        prop_assert_eq!(r.shape().to_vec(), new_shape.clone());
        prop_assert_eq!(expected.shape().to_vec(), new_shape);
        let want = expected.to_vec::<i64>().unwrap();
        prop_assert_eq!(r.to_vec::<i64>().unwrap(), want.clone());
        prop_assert_eq!(&want, &t.to_vec::<i64>().unwrap(), "row-major order is kept");
        let as_view = t.view(&req);
        prop_assert_eq!(
            r.shares_storage(&t),
            as_view.is_ok(),
            "reshape must be a view exactly when view works (layout {:?}, target {:?})",
            t.layout(),
            req
        );
        if !r.shares_storage(&t) && n > 0 {
            // The copy is independent: writing it leaves the source alone.
            let before = t.to_vec::<i64>().unwrap();
            r.fill_(-1i64).unwrap();
            prop_assert_eq!(t.to_vec::<i64>().unwrap(), before);
            prop_assert!(r.is_contiguous());
        }
    }

    /// (c) `is_contiguous` agrees with "offsets are offset, offset+1, ..." and
    /// `is_non_overlapping_and_dense` with "offsets are a permutation of one block";
    /// `storage_extent` and `offset_of` agree with the brute-force offsets.
    #[test]
    fn contiguity_matches_brute_force(
        dims in prop::collection::vec((0usize..5, 0usize..25), 0..5),
        offset in 0usize..10,
        make_row_major in any::<bool>(),
    ) {
        let sizes: Vec<usize> = dims.iter().map(|d| d.0).collect();
        let mut strides: Vec<usize> = dims.iter().map(|d| d.1).collect();
        if make_row_major {
            // Bias towards (nearly) contiguous strides so both answers are common.
            let mut acc = 1;
            for k in (0..sizes.len()).rev() {
                if dims[k].1 % 5 != 0 {
                    strides[k] = acc;
                }
                acc *= sizes[k].max(1);
            }
        }
        let l = Layout::new(sizes.clone(), strides.clone(), offset);
        let offs = brute_offsets(&sizes, &strides, offset);
        prop_assert_eq!(l.is_contiguous(), brute_is_contiguous(&l), "{:?}", l);
        prop_assert_eq!(l.is_non_overlapping_and_dense(), brute_is_dense(&l), "{:?}", l);
        prop_assert_eq!(l.numel(), offs.len());
        let extent = offs.iter().max().map_or(offset, |m| m + 1);
        prop_assert_eq!(l.storage_extent(), extent, "{:?}", l);
        let mut k = 0;
        for_each_index(&sizes, |idx| {
            assert_eq!(l.offset_of(idx), offs[k], "{l:?} at {idx:?}");
            k += 1;
        });
        // Contiguous layouts made by the library are contiguous by the definition.
        let c = Layout::contiguous(&sizes, offset);
        prop_assert!(brute_is_contiguous(&c));
        prop_assert!(c.is_contiguous());
    }

    /// (d) A write through one view is seen through every other view of the storage and the
    /// base, exactly at the written offsets; versions are shared and count each write.
    #[test]
    fn writes_are_seen_through_every_view(
        shape in base_shape(),
        front in 0usize..3,
        back in 0usize..3,
        ops1 in op_chain(),
        ops2 in op_chain(),
        writes in prop::collection::vec((any::<bool>(), any::<bool>(), -50i64..50), 1..4),
    ) {
        let (base, model, storage_len) = make_base(&shape, front, back);
        let (v1, _, t1) = build_view(&base, &model, storage_len, &ops1, false);
        let (v2, _, t2) = build_view(&base, &model, storage_len, &ops2, false);
        let root = base.base().cloned().unwrap_or_else(|| base.clone());
        let snapshot = root.deep_clone().unwrap();
        let mut storage: Vec<i64> = (0..storage_len as i64).collect();
        prop_assert_eq!(root.to_vec::<i64>().unwrap(), storage.clone());
        let mut version = base.version();
        prop_assert_eq!(v1.version(), version);
        prop_assert_eq!(v2.version(), version);
        for (through_first, fill, value) in writes {
            let (w, r, tw) = if through_first { (&v1, &v2, &t1) } else { (&v2, &v1, &t2) };
            let offs = layout_offsets(&w.layout());
            let zero_stride = w.numel() > 0
                && w.shape().iter().zip(w.stride()).any(|(&s, st)| s > 1 && st == 0);
            if fill {
                w.fill_(value).unwrap_or_else(|e| panic!("fill_ through {tw:?}: {e}"));
                for &o in &offs {
                    storage[o] = value;
                }
            } else if zero_stride {
                // Adding to an expanded view would add twice to one location: refused, and
                // the refusal changes nothing.
                let res = w.add_scalar_(value);
                prop_assert!(res.is_err(), "add_scalar_ through expanded {:?}", tw);
                prop_assert_eq!(root.to_vec::<i64>().unwrap(), storage.clone());
                prop_assert_eq!(root.version(), version);
                continue;
            } else if has_duplicates(&offs) {
                // Self-overlapping without a zero stride: results are unspecified.
                continue;
            } else {
                w.add_scalar_(value).unwrap_or_else(|e| panic!("add_scalar_ through {tw:?}: {e}"));
                for &o in &offs {
                    storage[o] += value;
                }
            }
            version += 1;
            prop_assert_eq!(root.to_vec::<i64>().unwrap(), storage.clone(), "root after writing {:?}", tw);
            let gather = |t: &Tensor| -> Vec<i64> {
                layout_offsets(&t.layout()).iter().map(|&o| storage[o]).collect()
            };
            prop_assert_eq!(base.to_vec::<i64>().unwrap(), gather(&base));
            prop_assert_eq!(w.to_vec::<i64>().unwrap(), gather(w), "written view {:?}", tw);
            prop_assert_eq!(r.to_vec::<i64>().unwrap(), gather(r), "other view {:?}", t2);
            for t in [&root, &base, &v1, &v2] {
                prop_assert_eq!(t.version(), version, "version shared by every view");
            }
        }
        // A deep copy taken before the writes is untouched by them.
        prop_assert_eq!(snapshot.to_vec::<i64>().unwrap(), (0..storage_len as i64).collect::<Vec<_>>());
        prop_assert_eq!(snapshot.version(), 0);
    }

    /// (e) When `compute_stride` finds strides for a new shape, the layout with them visits
    /// the same storage elements in row-major order as the old one, and `view` uses them.
    #[test]
    fn compute_stride_success_preserves_row_major_values(
        shape in base_shape(),
        front in 0usize..3,
        back in 0usize..3,
        ops in op_chain(),
        split in prop::collection::vec(any::<u16>(), 0..5),
        ones in any::<u16>(),
    ) {
        let (base, model, storage_len) = make_base(&shape, front, back);
        let (t, _, trace) = build_view(&base, &model, storage_len, &ops, false);
        let l = t.layout();
        let n = l.numel();
        let mut new_shape: Vec<usize> = Vec::new();
        if n == 0 {
            new_shape = split.iter().map(|&r| (r % 4) as usize).collect();
            if !new_shape.contains(&0) {
                new_shape.push(0);
            }
        } else {
            let mut rem = n;
            for &r in &split {
                let divisors: Vec<usize> = (1..=rem).filter(|d| rem % d == 0).collect();
                let d = divisors[r as usize % divisors.len()];
                new_shape.push(d);
                rem /= d;
            }
            if rem != 1 {
                new_shape.push(rem);
            }
        }
        // Sprinkle size-1 dims.
        for k in 0..3 {
            if (ones >> (4 * k)) & 3 == 0 {
                let at = ((ones >> (4 * k + 2)) as usize) % (new_shape.len() + 1);
                new_shape.insert(at, 1);
            }
        }
        prop_assert_eq!(numel(&new_shape), n);
        let old_values = t.to_vec::<i64>().unwrap();
        let cs = compute_stride(l.sizes(), l.strides(), &new_shape);
        let v = t.view(&shape_i64(&new_shape));
        prop_assert_eq!(v.is_ok(), cs.is_some(), "view and compute_stride disagree on {:?} -> {:?}", l, new_shape);
        if l.is_contiguous() {
            prop_assert!(cs.is_some(), "a contiguous layout {:?} can be viewed as {:?}", l, new_shape);
        }
        if let Some(st) = cs {
            prop_assert_eq!(st.len(), new_shape.len());
            let before = layout_offsets(&l);
            let after = brute_offsets(&new_shape, &st, l.offset());
            prop_assert_eq!(&after, &before, "compute_stride({:?}, {:?}, {:?}) = {:?} after {:?}", l.sizes(), l.strides(), new_shape, st, trace);
            let v = v.unwrap();
            prop_assert_eq!(v.stride(), st);
            prop_assert_eq!(v.shape().to_vec(), new_shape);
            prop_assert_eq!(v.storage_offset(), l.offset());
            prop_assert_eq!(v.to_vec::<i64>().unwrap(), old_values);
        }
    }

    /// (e') The same on arbitrary layouts, as pure arithmetic.
    #[test]
    fn compute_stride_on_arbitrary_layouts(
        dims in prop::collection::vec((0usize..5, 0usize..13), 0..5),
        split in prop::collection::vec(any::<u16>(), 0..5),
    ) {
        let sizes: Vec<usize> = dims.iter().map(|d| d.0).collect();
        let strides: Vec<usize> = dims.iter().map(|d| d.1).collect();
        let n = numel(&sizes);
        let mut new_shape: Vec<usize> = Vec::new();
        if n == 0 {
            new_shape = split.iter().map(|&r| (r % 4) as usize).collect();
            if !new_shape.contains(&0) {
                new_shape.push(0);
            }
        } else {
            let mut rem = n;
            for &r in &split {
                let divisors: Vec<usize> = (1..=rem).filter(|d| rem.is_multiple_of(*d)).collect();
                let d = divisors[r as usize % divisors.len()];
                new_shape.push(d);
                rem /= d;
            }
            if rem != 1 {
                new_shape.push(rem);
            }
        }
        if let Some(st) = compute_stride(&sizes, &strides, &new_shape) {
            prop_assert_eq!(
                brute_offsets(&new_shape, &st, 0),
                brute_offsets(&sizes, &strides, 0),
                "compute_stride({:?}, {:?}, {:?}) = {:?}", sizes, strides, new_shape, st
            );
        }
        // Viewing a shape as itself always works.
        prop_assert!(compute_stride(&sizes, &strides, &sizes).is_some(), "{:?} {:?}", sizes, strides);
    }
}

// ---------------------------------------------------------------------------------------
// A few fixed cases that pin down semantics the properties rely on
// ---------------------------------------------------------------------------------------

#[test]
fn brute_force_oracle_sanity() {
    // The oracle itself: a transposed 2x3.
    assert_eq!(brute_offsets(&[3, 2], &[1, 3], 0), vec![0, 3, 1, 4, 2, 5]);
    assert_eq!(brute_offsets(&[], &[], 7), vec![7]);
    assert!(brute_offsets(&[2, 0], &[1, 1], 0).is_empty());
    let t = Tensor::arange(6, DType::I64)
        .unwrap()
        .view(&[2, 3])
        .unwrap();
    let tt = t.t().unwrap();
    assert_eq!(tt.to_vec::<i64>().unwrap(), vec![0, 3, 1, 4, 2, 5]);
    assert_eq!(
        as_i64(&layout_offsets(&tt.layout())),
        vec![0, 3, 1, 4, 2, 5]
    );
}

#[test]
fn slice_step_and_negative_bounds() {
    let t = Tensor::arange(10, DType::I64).unwrap();
    let s = t.slice(0, Some(-7), Some(100), 3).unwrap();
    assert_eq!(s.to_vec::<i64>().unwrap(), vec![3, 6, 9]);
    assert_eq!(s.stride(), vec![3]);
    assert_eq!(s.storage_offset(), 3);
    let e = t.slice(0, Some(8), Some(2), 1).unwrap();
    assert_eq!(e.numel(), 0);
}

#[test]
fn unfold_and_diagonal_fixed() {
    let t = Tensor::arange(12, DType::I64)
        .unwrap()
        .view(&[3, 4])
        .unwrap();
    assert_eq!(
        t.diagonal(1, 0, 1).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 6, 11]
    );
    assert_eq!(
        t.diagonal(-1, 0, 1).unwrap().to_vec::<i64>().unwrap(),
        vec![4, 9]
    );
    assert_eq!(t.diagonal(-3, 0, 1).unwrap().numel(), 0);
    let u = t.unfold(1, 2, 2).unwrap();
    assert_eq!(u.shape().as_slice(), vec![3, 2, 2]);
    assert_eq!(
        u.to_vec::<i64>().unwrap(),
        vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    );
    let u = Tensor::arange(5, DType::I64)
        .unwrap()
        .unfold(0, 3, 1)
        .unwrap();
    assert_eq!(u.to_vec::<i64>().unwrap(), vec![0, 1, 2, 1, 2, 3, 2, 3, 4]);
}

#[test]
fn as_strided_is_bounded_by_the_storage_not_the_view() {
    let base = Tensor::arange(10, DType::I64).unwrap();
    let small = base.narrow(0, 2, 3).unwrap();
    // Reaches past the narrowed view but stays inside the storage: allowed.
    let w = small.as_strided(&[4], &[2], Some(1)).unwrap();
    assert_eq!(w.to_vec::<i64>().unwrap(), vec![1, 3, 5, 7]);
    // One past the storage: refused.
    assert!(small.as_strided(&[4], &[3], Some(1)).is_err());
    assert!(small.as_strided(&[2], &[1], Some(9)).is_err());
    assert!(small.as_strided(&[1], &[1], Some(9)).is_ok());
}
