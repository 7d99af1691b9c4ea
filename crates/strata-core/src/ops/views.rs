//! View ops: new tensors over the same storage, never a copy (except `reshape` when it must).
//!
//! Here is what each view is: its layout worked out from the input's (infer), and how a
//! view is made. The public methods are in `api/views.rs`; how a view's gradient maps back
//! to its input, and how views are recorded, in the view module of the gradient layer.

use crate::layout::int_arg::IntArg;
use crate::layout::view::{compute_stride, infer_size};
use crate::layout::{contiguous_strides, wrap_dim, Layout};
use crate::op::OpContext;
use crate::tensor::{ViewCreation, ViewInfo};
use crate::{Error, Result, Tensor};

/// How `split` divides a dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitSize {
    /// Pieces of this size, the last one possibly smaller.
    Size(usize),
    /// Pieces of exactly these sizes, which must add up to the dimension's size.
    Sizes(Vec<usize>),
}

pub(crate) fn dim_arg(op: &'static str, dim: i64, ndim: usize) -> Result<usize> {
    wrap_dim(dim, ndim).ok_or(Error::Dim { op, dim, ndim })
}

fn parse_shape<S: IntArg>(op: &'static str, shape: &[S], numel: usize) -> Result<Vec<usize>> {
    infer_size(shape, numel).map_err(|m| {
        Error::shape(op, m, vec![]).with_hint("the new shape must hold exactly as many elements")
    })
}

impl Tensor {
    /// A view of this tensor's storage with `layout`, remembering its base and how it was made.
    pub(crate) fn make_view(
        &self,
        op: &'static str,
        layout: Layout,
        creation: ViewCreation,
    ) -> Tensor {
        let base = self.base().cloned().unwrap_or_else(|| self.clone());
        let storage = self.body().storage;
        Tensor::from_parts(
            storage,
            layout,
            self.dtype(),
            Some(ViewInfo { base, op, creation }),
        )
    }
}

/// A view that reorders dimensions: its layout, and the permutation (output dim `i` is
/// input dim `perm[i]`).
pub(crate) type Permuted = (Layout, Vec<usize>);

/// `view`'s layout: `x`'s elements seen with `shape` (one dimension may be -1), when the
/// strides can express it.
pub(crate) fn view<S: IntArg>(ctx: &OpContext, x: &Tensor, shape: &[S]) -> Result<Layout> {
    let l = x.layout();
    let sizes = parse_shape(ctx.op(), shape, l.numel())?;
    let strides = compute_stride(l.sizes(), l.strides(), &sizes).ok_or_else(|| Error::View {
        op: ctx.op(),
        shape: l.sizes().to_vec(),
        strides: l.strides().to_vec(),
        target: sizes.clone(),
    })?;
    Ok(Layout::new(sizes, strides, l.offset()))
}

/// What `reshape` gives.
pub(crate) enum Reshaped {
    /// A view with this layout.
    View(Layout),
    /// A contiguous copy with the new shape (the strides could not express it).
    Copy(Tensor),
}

/// `reshape`: a view's layout when the strides allow it, else the contiguous copy.
pub(crate) fn reshape<S: IntArg>(ctx: &OpContext, x: &Tensor, shape: &[S]) -> Result<Reshaped> {
    let l = x.layout();
    let sizes = parse_shape(ctx.op(), shape, l.numel())?;
    if let Some(strides) = compute_stride(l.sizes(), l.strides(), &sizes) {
        return Ok(Reshaped::View(Layout::new(sizes, strides, l.offset())));
    }
    let copy = x.contiguous_copy(ctx)?;
    let strides = contiguous_strides(&sizes);
    Ok(Reshaped::Copy(Tensor::from_parts(
        copy.body().storage,
        Layout::new(sizes, strides, 0),
        x.dtype(),
        None,
    )))
}

/// `transpose`: dimensions `dim0` and `dim1` swapped.
pub(crate) fn transpose(ctx: &OpContext, x: &Tensor, dim0: i64, dim1: i64) -> Result<Permuted> {
    let l = x.layout();
    let n = l.ndim();
    let (d0, d1) = (dim_arg(ctx.op(), dim0, n)?, dim_arg(ctx.op(), dim1, n)?);
    let (mut sizes, mut strides) = (l.sizes().to_vec(), l.strides().to_vec());
    if n > 0 {
        sizes.swap(d0, d1);
        strides.swap(d0, d1);
    }
    let mut perm: Vec<usize> = (0..n).collect();
    if n > 0 {
        perm.swap(d0, d1);
    }
    Ok((Layout::new(sizes, strides, l.offset()), perm))
}

/// `t`: a matrix transposed; a 0-d or 1-d tensor as it is.
pub(crate) fn t(ctx: &OpContext, x: &Tensor) -> Result<Permuted> {
    let l = x.layout();
    if l.ndim() > 2 {
        return Err(Error::shape(
            ctx.op(),
            format!(
                "t() needs a tensor with at most 2 dimensions, got {}",
                l.ndim()
            ),
            vec![l.sizes().to_vec()],
        )
        .with_hint("use transpose(dim0, dim1) or permute(dims) for more dimensions"));
    }
    let (mut sizes, mut strides) = (l.sizes().to_vec(), l.strides().to_vec());
    sizes.reverse();
    strides.reverse();
    let perm: Vec<usize> = (0..l.ndim()).rev().collect();
    Ok((Layout::new(sizes, strides, l.offset()), perm))
}

/// `permute`: dimension `i` of the result is `dims[i]` of `x`.
pub(crate) fn permute(ctx: &OpContext, x: &Tensor, dims: &[i64]) -> Result<Permuted> {
    let l = x.layout();
    let n = l.ndim();
    if dims.len() != n {
        return Err(Error::argument(
            ctx.op(),
            format!("got {} dims for a tensor with {n} dimensions", dims.len()),
            Some("give every dimension exactly once"),
        ));
    }
    let mut seen = vec![false; n];
    let mut sizes = Vec::with_capacity(n);
    let mut strides = Vec::with_capacity(n);
    let mut perm = Vec::with_capacity(n);
    for &d in dims {
        let d = dim_arg(ctx.op(), d, n)?;
        if std::mem::replace(&mut seen[d], true) {
            return Err(Error::argument(
                ctx.op(),
                format!("dimension {d} appears more than once in {dims:?}"),
                Some("give every dimension exactly once"),
            ));
        }
        sizes.push(l.sizes()[d]);
        strides.push(l.strides()[d]);
        perm.push(d);
    }
    Ok((Layout::new(sizes, strides, l.offset()), perm))
}

/// A view of part of one dimension: its layout, the dimension (wrapped) and where the part
/// starts in it (wrapped, for `narrow` and `select`).
pub(crate) type Part = (Layout, usize, usize);

/// `narrow`: elements `start..start + length` of dimension `dim`.
pub(crate) fn narrow(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    start: i64,
    length: usize,
) -> Result<Part> {
    let l = x.layout();
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "narrow() cannot be applied to a 0-d tensor",
            vec![vec![]],
        ));
    }
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    let size = l.sizes()[d];
    let s = if start < 0 {
        start + size as i64
    } else {
        start
    };
    if s < 0 || s as usize > size {
        return Err(Error::Index {
            op: ctx.op(),
            index: start,
            dim: d,
            size,
        });
    }
    let s = s as usize;
    if s + length > size {
        return Err(Error::argument(
            ctx.op(),
            format!("start ({s}) + length ({length}) exceeds dimension {d} of size {size}"),
            Some("shorten the length or move the start"),
        ));
    }
    let mut sizes = l.sizes().to_vec();
    sizes[d] = length;
    let offset = l.offset() + s * l.strides()[d];
    Ok((Layout::new(sizes, l.strides().to_vec(), offset), d, s))
}

/// `slice`: its layout, the dimension (wrapped) and the clamped range `from..to` it takes
/// (every `step`-th element).
pub(crate) fn slice(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    start: Option<i64>,
    end: Option<i64>,
    step: usize,
) -> Result<(Layout, usize, i64, i64)> {
    let l = x.layout();
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "a 0-d tensor cannot be sliced",
            vec![vec![]],
        ));
    }
    if step == 0 {
        return Err(Error::argument(
            ctx.op(),
            "slice step must be positive",
            Some("negative and zero steps are not supported; use flip() for reversal"),
        ));
    }
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    let size = l.sizes()[d] as i64;
    let clamp = |v: i64| {
        let v = if v < 0 { v + size } else { v };
        v.clamp(0, size)
    };
    let s = start.map_or(0, clamp);
    let e = end.map_or(size, clamp).max(s);
    let len = ((e - s) as usize).div_ceil(step);
    let mut sizes = l.sizes().to_vec();
    let mut strides = l.strides().to_vec();
    sizes[d] = len;
    let offset = l.offset() + s as usize * strides[d];
    strides[d] *= step;
    let (from, to) = (s, s + (len * step) as i64);
    Ok((Layout::new(sizes, strides, offset), d, from, to))
}

/// `select`: the slice at `index` of dimension `dim`, which is removed.
pub(crate) fn select(ctx: &OpContext, x: &Tensor, dim: i64, index: i64) -> Result<Part> {
    let l = x.layout();
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "select() cannot be applied to a 0-d tensor",
            vec![vec![]],
        ));
    }
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    let size = l.sizes()[d];
    let i = if index < 0 {
        index + size as i64
    } else {
        index
    };
    if i < 0 || i >= size as i64 {
        return Err(Error::Index {
            op: ctx.op(),
            index,
            dim: d,
            size,
        });
    }
    let mut sizes = l.sizes().to_vec();
    let mut strides = l.strides().to_vec();
    let offset = l.offset() + i as usize * strides[d];
    sizes.remove(d);
    strides.remove(d);
    Ok((Layout::new(sizes, strides, offset), d, i as usize))
}

/// `expand` (and `broadcast_to`): size-1 dimensions repeated (stride 0), leading ones
/// added; `-1` keeps a dimension's size.
pub(crate) fn expand<S: IntArg>(ctx: &OpContext, x: &Tensor, shape: &[S]) -> Result<Layout> {
    let l = x.layout();
    let n = l.ndim();
    if shape.len() < n {
        return Err(Error::shape(
            ctx.op(),
            format!(
                "the target shape {shape:?} has fewer dimensions than the tensor's shape {:?}",
                l.sizes()
            ),
            vec![l.sizes().to_vec()],
        ));
    }
    let lead = shape.len() - n;
    let mut sizes = vec![0usize; shape.len()];
    let mut strides = vec![0usize; shape.len()];
    for i in (0..shape.len()).rev() {
        let target = shape[i].signed();
        if i < lead {
            if target < 0 {
                return Err(Error::shape(
                    ctx.op(),
                    format!("size {target} is not allowed for the new leading dimension {i} of {shape:?}"),
                    vec![l.sizes().to_vec()],
                ));
            }
            sizes[i] = target as usize;
            strides[i] = if sizes[i] == 1 && i + 1 < shape.len() {
                sizes[i + 1] * strides[i + 1]
            } else {
                0
            };
            continue;
        }
        let (cur, st) = (l.sizes()[i - lead], l.strides()[i - lead]);
        if target == -1 || target as usize == cur {
            sizes[i] = cur;
            strides[i] = st;
        } else if target < 0 {
            return Err(Error::shape(
                ctx.op(),
                format!("size {target} is not allowed at dimension {i} of {shape:?}"),
                vec![l.sizes().to_vec()],
            ));
        } else if cur == 1 {
            sizes[i] = target as usize;
            strides[i] = 0;
        } else {
            return Err(Error::shape(
                ctx.op(),
                format!(
                    "the expanded size ({target}) must match the existing size ({cur}) at \
                     non-singleton dimension {i}; target {shape:?}, tensor {:?}",
                    l.sizes()
                ),
                vec![l.sizes().to_vec()],
            )
            .with_hint("only size-1 dimensions can be expanded"));
        }
    }
    let layout = Layout::new(sizes, strides, l.offset());
    if layout.validate(x.element_size()).is_none() {
        return Err(Error::shape(
            ctx.op(),
            format!("expanding to {shape:?} gives more elements than can be addressed"),
            vec![l.sizes().to_vec()],
        ));
    }
    Ok(layout)
}

/// `squeeze`: size-1 dimensions removed, all of them (`None`) or those among `dims`.
pub(crate) fn squeeze(ctx: &OpContext, x: &Tensor, dims: Option<&[i64]>) -> Result<Layout> {
    let l = x.layout();
    let n = l.ndim();
    let mut drop = vec![false; n];
    match dims {
        None => {
            for (d, &s) in l.sizes().iter().enumerate() {
                drop[d] = s == 1;
            }
        }
        Some(ds) => {
            for &d in ds {
                let d = dim_arg(ctx.op(), d, n)?;
                if n > 0 && l.sizes()[d] == 1 {
                    drop[d] = true;
                }
            }
        }
    }
    let (sizes, strides): (Vec<usize>, Vec<usize>) = (0..n)
        .filter(|&d| !drop[d])
        .map(|d| (l.sizes()[d], l.strides()[d]))
        .unzip();
    Ok(Layout::new(sizes, strides, l.offset()))
}

/// `unsqueeze`: a size-1 dimension inserted at `dim` (which may be `dim()` to append).
pub(crate) fn unsqueeze(ctx: &OpContext, x: &Tensor, dim: i64) -> Result<Layout> {
    let l = x.layout();
    let n = l.ndim();
    let d = wrap_dim(dim, n + 1).ok_or(Error::Dim {
        op: ctx.op(),
        dim,
        ndim: n + 1,
    })?;
    let mut sizes = l.sizes().to_vec();
    let mut strides = l.strides().to_vec();
    let stride = if d >= n { 1 } else { sizes[d] * strides[d] };
    sizes.insert(d, 1);
    strides.insert(d, stride);
    Ok(Layout::new(sizes, strides, l.offset()))
}

/// `flatten`: the shape to reshape `x` to, or `None` when `x` is the result itself
/// (`start_dim == end_dim`).
pub(crate) fn flatten(
    ctx: &OpContext,
    x: &Tensor,
    start_dim: i64,
    end_dim: i64,
) -> Result<Option<Vec<usize>>> {
    let l = x.layout();
    let n = l.ndim();
    let (s, e) = (
        dim_arg(ctx.op(), start_dim, n)?,
        dim_arg(ctx.op(), end_dim, n)?,
    );
    if s > e {
        return Err(Error::argument(
            ctx.op(),
            format!("start_dim ({start_dim}) comes after end_dim ({end_dim})"),
            Some("pass start_dim <= end_dim"),
        ));
    }
    if n == 0 {
        return Ok(Some(vec![1]));
    }
    if s == e {
        return Ok(None);
    }
    let mut shape = l.sizes()[..s].to_vec();
    shape.push(l.sizes()[s..=e].iter().product());
    shape.extend_from_slice(&l.sizes()[e + 1..]);
    Ok(Some(shape))
}

/// `unflatten`: dimension `dim` split into `sizes` (one of which may be -1).
pub(crate) fn unflatten(ctx: &OpContext, x: &Tensor, dim: i64, sizes: &[i64]) -> Result<Layout> {
    let l = x.layout();
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "cannot unflatten a 0-d tensor",
            vec![vec![]],
        ));
    }
    if sizes.is_empty() {
        return Err(Error::argument(
            ctx.op(),
            "sizes must not be empty",
            Some("give at least one size"),
        ));
    }
    let inner = infer_size(sizes, l.sizes()[d]).map_err(|m| {
        Error::shape(
            ctx.op(),
            format!(
                "sizes {sizes:?} do not multiply to the size of dimension {d} ({}): {m}",
                l.sizes()[d]
            ),
            vec![l.sizes().to_vec()],
        )
    })?;
    let mut shape = l.sizes()[..d].to_vec();
    shape.extend(inner);
    shape.extend_from_slice(&l.sizes()[d + 1..]);
    view(ctx, x, &shape)
}

/// `as_strided`: arbitrary sizes, strides and storage offset (`None` keeps `x`'s), which
/// must stay inside the storage.
pub(crate) fn as_strided(
    ctx: &OpContext,
    x: &Tensor,
    shape: &[usize],
    strides: &[usize],
    offset: Option<usize>,
) -> Result<Layout> {
    if shape.len() != strides.len() {
        return Err(Error::argument(
            ctx.op(),
            format!("{} sizes but {} strides", shape.len(), strides.len()),
            Some("give one stride per dimension"),
        ));
    }
    let body = x.body();
    let offset = offset.unwrap_or(body.layout.offset());
    let layout = Layout::new(shape.to_vec(), strides.to_vec(), offset);
    let itemsize = x.element_size();
    let fits = layout
        .validate(itemsize)
        .is_some_and(|extent| layout.numel() == 0 || extent * itemsize <= body.storage.nbytes());
    if !fits {
        return Err(Error::shape(
            ctx.op(),
            format!(
                "sizes {shape:?}, strides {strides:?} and offset {offset} reach element {} \
                 but the storage holds {} elements of {itemsize} bytes",
                layout.storage_extent(),
                body.storage.nbytes() / itemsize
            ),
            vec![shape.to_vec()],
        )
        .with_hint("as_strided views must stay inside the storage"));
    }
    Ok(layout)
}

/// `diagonal`: the diagonal of dimensions `dim1` and `dim2` (shifted by `offset`), as a new
/// last dimension.
pub(crate) fn diagonal(
    ctx: &OpContext,
    x: &Tensor,
    offset: i64,
    dim1: i64,
    dim2: i64,
) -> Result<Layout> {
    let l = x.layout();
    let n = l.ndim();
    let (d1, d2) = (dim_arg(ctx.op(), dim1, n)?, dim_arg(ctx.op(), dim2, n)?);
    if n < 2 || d1 == d2 {
        return Err(Error::argument(
            ctx.op(),
            format!("needs two different dimensions, got {dim1} and {dim2} of a {n}-d tensor"),
            Some("pick two distinct dimensions"),
        ));
    }
    let (s1, s2) = (l.sizes()[d1] as i64, l.sizes()[d2] as i64);
    let diag = if offset >= 0 {
        s1.min(s2 - offset).max(0)
    } else {
        (s1 + offset).min(s2).max(0)
    } as usize;
    let mut off = l.offset();
    if diag > 0 {
        if offset >= 0 {
            off += offset as usize * l.strides()[d2];
        } else {
            off += (-offset) as usize * l.strides()[d1];
        }
    }
    let mut sizes = Vec::with_capacity(n - 1);
    let mut strides = Vec::with_capacity(n - 1);
    for d in 0..n {
        if d != d1 && d != d2 {
            sizes.push(l.sizes()[d]);
            strides.push(l.strides()[d]);
        }
    }
    sizes.push(diag);
    strides.push(l.strides()[d1] + l.strides()[d2]);
    Ok(Layout::new(sizes, strides, off))
}

/// `unfold`: windows of `size` elements, `step` apart, along `dim`, as a new last
/// dimension.
pub(crate) fn unfold(
    ctx: &OpContext,
    x: &Tensor,
    dim: i64,
    size: usize,
    step: usize,
) -> Result<Layout> {
    let l = x.layout();
    let n = l.ndim();
    let d = dim_arg(ctx.op(), dim, n)?;
    let dim_size = if n == 0 { 1 } else { l.sizes()[d] };
    if size > dim_size {
        return Err(Error::argument(
            ctx.op(),
            format!("window size {size} exceeds dimension {d} of size {dim_size}"),
            Some("use a window no larger than the dimension"),
        ));
    }
    if step == 0 {
        return Err(Error::argument(
            ctx.op(),
            "step must be positive",
            Some("pass step >= 1"),
        ));
    }
    let mut sizes = l.sizes().to_vec();
    let mut strides = l.strides().to_vec();
    let dim_stride = if n == 0 { 1 } else { strides[d] };
    if n > 0 {
        sizes[d] = (dim_size - size) / step + 1;
        strides[d] = step * dim_stride;
    }
    sizes.push(size);
    strides.push(dim_stride);
    Ok(Layout::new(sizes, strides, l.offset()))
}

/// `movedim`: dimensions `source` moved to positions `destination`, the others kept in
/// order.
pub(crate) fn movedim(
    ctx: &OpContext,
    x: &Tensor,
    source: &[i64],
    destination: &[i64],
) -> Result<Permuted> {
    let l = x.layout();
    let n = l.ndim();
    if source.len() != destination.len() {
        return Err(Error::argument(
            ctx.op(),
            format!(
                "{} source dims but {} destinations",
                source.len(),
                destination.len()
            ),
            Some("give one destination per source"),
        ));
    }
    let src: Vec<usize> = source
        .iter()
        .map(|&d| dim_arg(ctx.op(), d, n))
        .collect::<Result<_>>()?;
    let dst: Vec<usize> = destination
        .iter()
        .map(|&d| dim_arg(ctx.op(), d, n))
        .collect::<Result<_>>()?;
    let unique = |v: &[usize]| (0..v.len()).all(|i| !v[..i].contains(&v[i]));
    if !unique(&src) || !unique(&dst) {
        return Err(Error::argument(
            ctx.op(),
            "repeated dimension in source or destination",
            Some("each dimension may appear once"),
        ));
    }
    if n == 0 {
        // A 0-d tensor's only dimension (0 or -1) moves onto itself.
        return Ok((l.clone(), Vec::new()));
    }
    let mut order: Vec<Option<usize>> = vec![None; n];
    for (&s, &d) in src.iter().zip(&dst) {
        order[d] = Some(s);
    }
    let mut rest = (0..n).filter(|d| !src.contains(d));
    let perm: Vec<usize> = order
        .into_iter()
        .map(|o| o.or_else(|| rest.next()).unwrap_or(0))
        .collect();
    let sizes = perm.iter().map(|&d| l.sizes()[d]).collect();
    let strides = perm.iter().map(|&d| l.strides()[d]).collect();
    Ok((Layout::new(sizes, strides, l.offset()), perm))
}

/// The pieces of `split` (and `chunk`): each one's layout, the dimension split (wrapped),
/// and each one's start and length along it.
pub(crate) type Pieces = (usize, Vec<(Layout, usize, usize)>);

/// `split`: dimension `dim` cut into pieces.
pub(crate) fn split(ctx: &OpContext, x: &Tensor, size: SplitSize, dim: i64) -> Result<Pieces> {
    let l = x.layout();
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "cannot split a 0-d tensor",
            vec![vec![]],
        ));
    }
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    let dim_size = l.sizes()[d];
    let sizes: Vec<usize> = match size {
        SplitSize::Size(s) => {
            if s == 0 && dim_size > 0 {
                return Err(Error::argument(
                    ctx.op(),
                    format!("split size 0 cannot divide dimension {d} of size {dim_size}"),
                    Some("use a positive split size"),
                ));
            }
            let pieces = if s == 0 {
                1
            } else {
                dim_size.div_ceil(s).max(1)
            };
            (0..pieces)
                .map(|i| s.min(dim_size - (i * s).min(dim_size)))
                .collect()
        }
        SplitSize::Sizes(v) => {
            if v.iter().sum::<usize>() != dim_size {
                return Err(Error::argument(
                    ctx.op(),
                    format!("split sizes {v:?} do not add up to dimension {d} of size {dim_size}"),
                    Some("the sizes must sum to the dimension's size"),
                ));
            }
            v
        }
    };
    let mut start = 0;
    let mut out = Vec::with_capacity(sizes.len());
    for s in sizes {
        let mut sz = l.sizes().to_vec();
        sz[d] = s;
        let offset = l.offset() + start * l.strides()[d];
        out.push((Layout::new(sz, l.strides().to_vec(), offset), start, s));
        start += s;
    }
    Ok((d, out))
}

/// `chunk`: dimension `dim` cut into `chunks` nearly equal pieces (there may be fewer).
pub(crate) fn chunk(ctx: &OpContext, x: &Tensor, chunks: usize, dim: i64) -> Result<Pieces> {
    if chunks == 0 {
        return Err(Error::argument(
            ctx.op(),
            "the number of chunks must be positive",
            Some("pass chunks >= 1"),
        ));
    }
    let l = x.layout();
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "cannot chunk a 0-d tensor",
            vec![vec![]],
        ));
    }
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    let dim_size = l.sizes()[d];
    let size = dim_size.div_ceil(chunks);
    if size == 0 {
        return split(ctx, x, SplitSize::Sizes(vec![0; chunks]), dim);
    }
    split(ctx, x, SplitSize::Size(size), dim)
}

/// `unbind`: every slice along `dim`, which is removed from each.
pub(crate) fn unbind(ctx: &OpContext, x: &Tensor, dim: i64) -> Result<Vec<Part>> {
    let l = x.layout();
    if l.ndim() == 0 {
        return Err(Error::shape(
            ctx.op(),
            "cannot unbind a 0-d tensor",
            vec![vec![]],
        ));
    }
    let d = dim_arg(ctx.op(), dim, l.ndim())?;
    (0..l.sizes()[d])
        .map(|i| select(ctx, x, d as i64, i as i64))
        .collect()
}

/// `alias`: a view of the same elements with the same shape (like any `view`, the strides
/// of size-1 dimensions are recomputed).
pub(crate) fn alias(ctx: &OpContext, x: &Tensor) -> Result<Layout> {
    view(ctx, x, &x.shape()[..])
}

/// `detach`: `x`'s memory and version counter, without its gradient history. Of an
/// inference tensor outside inference mode, PyTorch's detach gets a version counter of its
/// own instead ([`Tensor::detached_inference`]).
pub(crate) fn detach(x: &Tensor) -> Tensor {
    let body = x.body();
    if x.is_inference() && !crate::mode::is_inference_mode_enabled() {
        return Tensor::detached_inference(body.storage, body.layout, x.dtype());
    }
    Tensor::from_parts(body.storage, body.layout, x.dtype(), None)
}
