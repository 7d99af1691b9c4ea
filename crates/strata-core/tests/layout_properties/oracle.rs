//! The oracles of the layout property tests: brute-force offsets, contiguity and density,
//! and the value model that every view op transforms by gathering, with `apply_op`, which
//! runs one op on a tensor and on its model.

use strata_core::layout::Layout;
use strata_core::{DType, Tensor};

// ---------------------------------------------------------------------------------------
// Brute-force helpers
// ---------------------------------------------------------------------------------------

/// Calls `f` with every multi-index of `shape` in row-major order (nothing if any size is 0;
/// once with `[]` for a 0-d shape).
pub fn for_each_index(shape: &[usize], mut f: impl FnMut(&[usize])) {
    if shape.contains(&0) {
        return;
    }
    let mut idx = vec![0usize; shape.len()];
    loop {
        f(&idx);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// Storage offsets of every element of a layout in row-major logical order, by brute force.
pub fn brute_offsets(sizes: &[usize], strides: &[usize], offset: usize) -> Vec<usize> {
    let mut out = Vec::new();
    for_each_index(sizes, |idx| {
        let mut o = offset;
        for (i, s) in idx.iter().zip(strides) {
            o += i * s;
        }
        out.push(o);
    });
    out
}

pub fn layout_offsets(l: &Layout) -> Vec<usize> {
    brute_offsets(l.sizes(), l.strides(), l.offset())
}

pub fn as_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

pub fn shape_i64(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&s| s as i64).collect()
}

/// Row-major flat position of `idx` in `shape`.
pub fn flat(shape: &[usize], idx: &[usize]) -> usize {
    let mut f = 0;
    for (i, s) in idx.iter().zip(shape) {
        f = f * s + i;
    }
    f
}

/// Brute-force contiguity: no elements, or offsets exactly `offset, offset+1, ...`.
pub fn brute_is_contiguous(l: &Layout) -> bool {
    let offs = layout_offsets(l);
    offs.iter().enumerate().all(|(k, &o)| o == l.offset() + k)
}

/// Brute-force density: the offsets are a permutation of one block `min..min+numel`.
pub fn brute_is_dense(l: &Layout) -> bool {
    let mut offs = layout_offsets(l);
    if offs.is_empty() {
        return true;
    }
    offs.sort_unstable();
    let lo = offs[0];
    offs.iter().enumerate().all(|(k, &o)| o == lo + k)
}

pub fn has_duplicates(offs: &[usize]) -> bool {
    let mut v = offs.to_vec();
    v.sort_unstable();
    v.windows(2).any(|w| w[0] == w[1])
}

// ---------------------------------------------------------------------------------------
// The value model: an explicit array of storage positions
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Model {
    pub shape: Vec<usize>,
    pub data: Vec<i64>,
}

impl Model {
    /// The model of the tensor whose element `new_idx` is this one's element `map(new_idx)`.
    pub fn gather(&self, new_shape: Vec<usize>, map: impl Fn(&[usize]) -> Vec<usize>) -> Model {
        let mut data = Vec::with_capacity(numel(&new_shape));
        for_each_index(&new_shape, |idx| {
            let old = map(idx);
            assert_eq!(old.len(), self.shape.len());
            for (i, s) in old.iter().zip(&self.shape) {
                assert!(i < s, "model bug: index {old:?} out of {:?}", self.shape);
            }
            data.push(self.data[flat(&self.shape, &old)]);
        });
        Model {
            shape: new_shape,
            data,
        }
    }
}

/// `v` drawn from `lo..=hi` by a random number.
pub fn pick(r: u16, lo: i64, hi: i64) -> i64 {
    assert!(lo <= hi);
    lo + (r as i64) % (hi - lo + 1)
}

/// Wraps a possibly negative dim as PyTorch does (0-d accepts 0 and -1).
pub fn wrap(dim: i64, ndim: usize) -> Option<usize> {
    let n = ndim.max(1) as i64;
    let d = if dim < 0 { dim + n } else { dim };
    if (0..n).contains(&d) {
        Some(d as usize)
    } else {
        None
    }
}

/// A random dim of an `n`-d tensor, sometimes given as a negative number.
pub fn any_dim(r: u16, n: usize) -> i64 {
    let n = n.max(1) as i64;
    pick(r, -n, n - 1)
}

/// One view op, parameters drawn from random numbers and interpreted against the current
/// shape. Returns the new tensor and model when the op succeeded; checks that the op fails
/// exactly when the model says its arguments are invalid.
pub fn apply_op(
    t: &Tensor,
    m: &Model,
    kind: u8,
    p: &[u16; 6],
    storage_len: usize,
) -> Option<(Tensor, Model, String)> {
    let shape = m.shape.clone();
    let n = shape.len();
    match kind % 12 {
        0 => {
            // transpose
            let (a, b) = (any_dim(p[0], n), any_dim(p[1], n));
            let desc = format!("transpose({a}, {b})");
            let r = t.transpose(a, b);
            let (da, db) = (wrap(a, n).unwrap(), wrap(b, n).unwrap());
            let r = r.unwrap_or_else(|e| panic!("{desc}: {e}"));
            if n == 0 {
                return Some((r, m.clone(), desc));
            }
            let mut ns = shape.clone();
            ns.swap(da, db);
            let nm = m.gather(ns, |idx| {
                let mut o = idx.to_vec();
                o.swap(da, db);
                o
            });
            Some((r, nm, desc))
        }
        1 => {
            // permute: a random permutation (Fisher-Yates), some dims negative
            let mut perm: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                let j = p[i % 6] as usize % (i + 1);
                perm.swap(i, j);
            }
            let dims: Vec<i64> = perm
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    if (p[5] >> (k % 16)) & 1 == 1 {
                        d as i64 - n as i64
                    } else {
                        d as i64
                    }
                })
                .collect();
            let desc = format!("permute({dims:?})");
            let r = t.permute(&dims).unwrap_or_else(|e| panic!("{desc}: {e}"));
            let ns: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
            let nm = m.gather(ns, |idx| {
                let mut o = vec![0; n];
                for (k, &d) in perm.iter().enumerate() {
                    o[d] = idx[k];
                }
                o
            });
            Some((r, nm, desc))
        }
        2 => {
            // narrow, sometimes out of range
            if n == 0 {
                assert!(
                    t.narrow(0, 0, 0).is_err(),
                    "narrow of a 0-d tensor must fail"
                );
                return None;
            }
            let dim = any_dim(p[0], n);
            let d = wrap(dim, n).unwrap();
            let size = shape[d] as i64;
            let start = pick(p[1], -size - 1, size + 1);
            let len = pick(p[2], 0, size + 1) as usize;
            let desc = format!("narrow({dim}, {start}, {len})");
            let s = if start < 0 { start + size } else { start };
            let valid = s >= 0 && s <= size && s + len as i64 <= size;
            let r = t.narrow(dim, start, len);
            assert_eq!(r.is_ok(), valid, "{desc} on {shape:?}: {r:?}");
            let r = r.ok()?;
            let s = s as usize;
            let mut ns = shape.clone();
            ns[d] = len;
            let nm = m.gather(ns, |idx| {
                let mut o = idx.to_vec();
                o[d] += s;
                o
            });
            Some((r, nm, desc))
        }
        3 => {
            // slice with Python semantics and a positive step
            if n == 0 {
                assert!(t.slice(0, None, None, 1).is_err(), "slicing 0-d must fail");
                return None;
            }
            let dim = any_dim(p[0], n);
            let d = wrap(dim, n).unwrap();
            let size = shape[d] as i64;
            let start = (p[3] & 1 == 0).then(|| pick(p[1], -size - 2, size + 2));
            let end = (p[3] & 2 == 0).then(|| pick(p[2], -size - 2, size + 2));
            let step = pick(p[4], 0, 3) as usize;
            let desc = format!("slice({dim}, {start:?}, {end:?}, {step})");
            let r = t.slice(dim, start, end, step);
            if step == 0 {
                assert!(r.is_err(), "{desc} must fail");
                return None;
            }
            let r = r.unwrap_or_else(|e| panic!("{desc}: {e}"));
            let norm = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size);
            let s = start.map_or(0, norm);
            let e = end.map_or(size, norm);
            let mut picked = Vec::new();
            let mut i = s;
            while i < e {
                picked.push(i as usize);
                i += step as i64;
            }
            let mut ns = shape.clone();
            ns[d] = picked.len();
            let nm = m.gather(ns, |idx| {
                let mut o = idx.to_vec();
                o[d] = picked[idx[d]];
                o
            });
            Some((r, nm, desc))
        }
        4 => {
            // select, sometimes out of range
            if n == 0 {
                assert!(t.select(0, 0).is_err(), "select on 0-d must fail");
                return None;
            }
            let dim = any_dim(p[0], n);
            let d = wrap(dim, n).unwrap();
            let size = shape[d] as i64;
            let index = pick(p[1], -size - 1, size);
            let desc = format!("select({dim}, {index})");
            let valid = -size <= index && index < size;
            let r = t.select(dim, index);
            assert_eq!(r.is_ok(), valid, "{desc} on {shape:?}: {r:?}");
            let r = r.ok()?;
            let i = if index < 0 { index + size } else { index } as usize;
            let mut ns = shape.clone();
            ns.remove(d);
            let nm = m.gather(ns, |idx| {
                let mut o = idx.to_vec();
                o.insert(d, i);
                o
            });
            Some((r, nm, desc))
        }
        5 => {
            // expand: new leading dims, size-1 dims stretched, -1 keeps a size
            let lead = if n >= 5 { 0 } else { (p[0] % 3) as usize };
            let mut target: Vec<i64> = (0..lead).map(|k| pick(p[1] >> (k * 2), 0, 3)).collect();
            let mut valid = true;
            for (k, &s) in shape.iter().enumerate() {
                let r = p[2].rotate_right(3 * k as u32);
                let tgt = if s == 1 {
                    [-1, 1, 0, 2, 3][(r % 5) as usize]
                } else if r.is_multiple_of(7) {
                    valid = false;
                    s as i64 + 1
                } else if r.is_multiple_of(2) {
                    -1
                } else {
                    s as i64
                };
                target.push(tgt);
            }
            let ns: Vec<usize> = target
                .iter()
                .enumerate()
                .map(|(k, &v)| if v == -1 { shape[k - lead] } else { v as usize })
                .collect();
            if numel(&ns) > 4096 {
                return None;
            }
            let desc = format!("expand({target:?})");
            let r = t.expand(&target);
            assert_eq!(r.is_ok(), valid, "{desc} on {shape:?}: {r:?}");
            let r = r.ok()?;
            let nm = m.gather(ns, |idx| {
                (0..n)
                    .map(|k| if shape[k] == 1 { 0 } else { idx[k + lead] })
                    .collect()
            });
            Some((r, nm, desc))
        }
        6 => {
            // unsqueeze at any position, including the end
            if n >= 6 {
                return None;
            }
            let dim = pick(p[0], -(n as i64) - 1, n as i64);
            let d = wrap(dim, n + 1).unwrap();
            let desc = format!("unsqueeze({dim})");
            let r = t.unsqueeze(dim).unwrap_or_else(|e| panic!("{desc}: {e}"));
            let mut ns = shape.clone();
            ns.insert(d, 1);
            let nm = m.gather(ns, |idx| {
                let mut o = idx.to_vec();
                o.remove(d);
                o
            });
            Some((r, nm, desc))
        }
        7 => {
            // diagonal
            let (a, b) = (any_dim(p[0], n), any_dim(p[1], n));
            let off = pick(p[2], -4, 4);
            let desc = format!("diagonal({off}, {a}, {b})");
            let r = t.diagonal(off, a, b);
            let (da, db) = (wrap(a, n).unwrap(), wrap(b, n).unwrap());
            if n < 2 || da == db {
                assert!(r.is_err(), "{desc} on {shape:?} must fail");
                return None;
            }
            let r = r.unwrap_or_else(|e| panic!("{desc}: {e}"));
            let (s1, s2) = (shape[da] as i64, shape[db] as i64);
            let (o1, o2) = if off >= 0 { (0, off) } else { (-off, 0) };
            // Diagonal elements: (k + o1, k + o2) while both are in range.
            let mut len = 0i64;
            while len + o1 < s1 && len + o2 < s2 {
                len += 1;
            }
            let mut ns: Vec<usize> = (0..n)
                .filter(|&k| k != da && k != db)
                .map(|k| shape[k])
                .collect();
            ns.push(len as usize);
            let nm = m.gather(ns, |idx| {
                let k = idx[idx.len() - 1];
                let mut o = vec![0; n];
                let mut j = 0;
                for (dd, slot) in o.iter_mut().enumerate() {
                    if dd == da {
                        *slot = k + o1 as usize;
                    } else if dd == db {
                        *slot = k + o2 as usize;
                    } else {
                        *slot = idx[j];
                        j += 1;
                    }
                }
                o
            });
            Some((r, nm, desc))
        }
        8 => {
            // unfold: windows of `size`, `step` apart, as a new last dim
            let dim = any_dim(p[0], n);
            let d = wrap(dim, n).unwrap();
            let dim_size = if n == 0 { 1 } else { shape[d] };
            let size = pick(p[1], 0, dim_size as i64 + 1) as usize;
            let step = pick(p[2], 0, 3) as usize;
            let desc = format!("unfold({dim}, {size}, {step})");
            let r = t.unfold(dim, size, step);
            let valid = size <= dim_size && step > 0;
            assert_eq!(r.is_ok(), valid, "{desc} on {shape:?}: {r:?}");
            let r = r.ok()?;
            if n == 0 {
                let nm = m.gather(vec![size], |_| vec![]);
                return Some((r, nm, desc));
            }
            let mut ns = shape.clone();
            ns[d] = (dim_size - size) / step + 1;
            ns.push(size);
            let nm = m.gather(ns, |idx| {
                let mut o = idx[..n].to_vec();
                o[d] = idx[d] * step + idx[n];
                o
            });
            Some((r, nm, desc))
        }
        9 => {
            // as_strided anywhere in the storage, sometimes out of bounds
            let nd = (p[0] % 4) as usize;
            let sizes: Vec<usize> = (0..nd)
                .map(|k| pick(p[1] >> (3 * k), 0, 4) as usize)
                .collect();
            let strides: Vec<usize> = (0..nd)
                .map(|k| pick(p[2] >> (3 * k), 0, 6) as usize)
                .collect();
            let offset = (p[3] & 1 == 0).then(|| pick(p[4], 0, storage_len as i64 + 1) as usize);
            let desc = format!("as_strided({sizes:?}, {strides:?}, {offset:?})");
            let off = offset.unwrap_or_else(|| t.storage_offset());
            let offs = brute_offsets(&sizes, &strides, off);
            let valid = offs.iter().all(|&o| o < storage_len);
            let r = t.as_strided(&sizes, &strides, offset);
            assert_eq!(
                r.is_ok(),
                valid,
                "{desc} with {storage_len} elements: {r:?}"
            );
            let r = r.ok()?;
            // The base is arange over the whole storage: values are the storage positions.
            let nm = Model {
                shape: sizes,
                data: as_i64(&offs),
            };
            Some((r, nm, desc))
        }
        10 => {
            // squeeze: all size-1 dims, or one given dim
            if p[0] & 1 == 0 {
                let desc = "squeeze(None)".to_string();
                let r = t.squeeze(None).unwrap_or_else(|e| panic!("{desc}: {e}"));
                let keep: Vec<usize> = (0..n).filter(|&k| shape[k] != 1).collect();
                let ns = keep.iter().map(|&k| shape[k]).collect();
                let nm = m.gather(ns, |idx| {
                    let mut o = vec![0; n];
                    for (j, &k) in keep.iter().enumerate() {
                        o[k] = idx[j];
                    }
                    o
                });
                Some((r, nm, desc))
            } else {
                let dim = any_dim(p[1], n);
                let d = wrap(dim, n).unwrap();
                let desc = format!("squeeze(Some([{dim}]))");
                let r = t
                    .squeeze(Some(&[dim]))
                    .unwrap_or_else(|e| panic!("{desc}: {e}"));
                if n == 0 || shape[d] != 1 {
                    return Some((r, m.clone(), desc));
                }
                let mut ns = shape.clone();
                ns.remove(d);
                let nm = m.gather(ns, |idx| {
                    let mut o = idx.to_vec();
                    o.insert(d, 0);
                    o
                });
                Some((r, nm, desc))
            }
        }
        _ => {
            // movedim of one dimension
            if n == 0 {
                return None;
            }
            let (a, b) = (any_dim(p[0], n), any_dim(p[1], n));
            let (src, dst) = (wrap(a, n).unwrap(), wrap(b, n).unwrap());
            let desc = format!("movedim([{a}], [{b}])");
            let r = t
                .movedim(&[a], &[b])
                .unwrap_or_else(|e| panic!("{desc}: {e}"));
            let mut order: Vec<usize> = (0..n).filter(|&k| k != src).collect();
            order.insert(dst, src);
            let ns = order.iter().map(|&k| shape[k]).collect();
            let nm = m.gather(ns, |idx| {
                let mut o = vec![0; n];
                for (j, &k) in order.iter().enumerate() {
                    o[k] = idx[j];
                }
                o
            });
            Some((r, nm, desc))
        }
    }
}

/// A base tensor: arange over `storage_len = front + numel(shape) + back` elements, narrowed
/// and viewed as `shape` (so it starts at offset `front`). Values are storage positions.
pub fn make_base(shape: &[usize], front: usize, back: usize) -> (Tensor, Model, usize) {
    let n = numel(shape);
    let storage_len = front + n + back;
    let base = Tensor::arange(storage_len, DType::I64)
        .unwrap()
        .narrow(0, front as i64, n)
        .unwrap()
        .view(&shape_i64(shape))
        .unwrap();
    let model = Model {
        shape: shape.to_vec(),
        data: (front..front + n).map(|v| v as i64).collect(),
    };
    (base, model, storage_len)
}

/// Checks a view against both oracles.
pub fn check_view(t: &Tensor, m: &Model, base: &Tensor, trace: &[String]) {
    let got = t.to_vec::<i64>().unwrap();
    let l = t.layout();
    assert_eq!(t.shape().as_slice(), m.shape, "shape after {trace:?}");
    assert_eq!(got, m.data, "values after {trace:?} (layout {l:?})");
    assert_eq!(
        got,
        as_i64(&layout_offsets(&l)),
        "to_vec disagrees with offset + Σ i*stride after {trace:?} (layout {l:?})"
    );
    assert_eq!(t.numel(), m.data.len(), "numel after {trace:?}");
    assert_eq!(t.stride(), l.strides());
    assert_eq!(t.storage_offset(), l.offset());
    assert!(
        t.shares_storage(base),
        "a view must share its base's storage"
    );
    assert_eq!(
        t.is_contiguous(),
        brute_is_contiguous(&l),
        "is_contiguous after {trace:?} (layout {l:?})"
    );
}
