//! Creating tensors: filled, ranges, identity, from Rust data, random.

use std::sync::Arc;

use crate::backend::{for_device, Plan};
use crate::device::default_device;
use crate::dtype::{cast, dispatch, DTypeFn, Element};
use crate::layout::shape_arg::{new_sizes, IntoShape};
use crate::layout::{checked_numel, Layout};
use crate::op::OpContext;
use crate::random::{global_generator, Generator};
use crate::storage::{lock_storages, Access, Storage};
use crate::tensor::arange::ArangeRange;
use crate::{DType, Device, Error, Result, Scalar, Tensor};

/// Allocates storage for a layout of `dtype`; the bytes are not initialised, so the caller
/// must write every element of the storage before anything reads it.
pub(crate) fn alloc_for(
    ctx: &OpContext,
    layout: &Layout,
    dtype: DType,
    device: Device,
) -> Result<Arc<Storage>> {
    let extent = layout.validate(dtype.size()).ok_or_else(|| {
        Error::shape(
            ctx.op(),
            format!(
                "a tensor of shape {:?} with elements of {} bytes is too large to address",
                layout.sizes(),
                dtype.size()
            ),
            vec![layout.sizes().to_vec()],
        )
    })?;
    ctx.allocate(extent * dtype.size(), device)
}

/// A new contiguous tensor on `device` whose elements are produced by `f(i)` in row-major
/// order (on meta, where there are none, `f` is never called).
pub(crate) fn from_fn<T: Element>(
    ctx: &OpContext,
    device: Device,
    shape: &[usize],
    f: impl Fn(usize) -> T,
) -> Result<Tensor> {
    let layout = Layout::contiguous(shape, 0);
    crate::backend::check_device(device, ctx.op())?;
    let storage = alloc_for(ctx, &layout, T::DTYPE, device)?;
    let n = layout.numel();
    // A meta tensor has no elements to write (and a random one draws nothing).
    match device {
        Device::Cpu => {
            let guards = lock_storages(&[(&storage, Access::Write)]);
            let p = guards.write_ptr(&storage) as *mut T;
            for i in 0..n {
                // SAFETY: the storage holds `n` elements of T (allocated for this layout) and
                // is write-locked.
                unsafe { p.add(i).write(f(i)) };
            }
        }
        Device::Cuda(_) => {
            // Made on the host, then copied over (PyTorch's `torch.tensor(data, device=...)`).
            let values: Vec<T> = (0..n).map(f).collect();
            // SAFETY: every element type is a plain number (or a one-byte bool) without
            // padding, so its `n · size` bytes are initialised and may be read as bytes.
            let bytes = unsafe {
                std::slice::from_raw_parts(
                    values.as_ptr().cast::<u8>(),
                    std::mem::size_of_val(&values[..]),
                )
            };
            let backend = for_device(device)?;
            let guards = lock_storages(&[(&storage, Access::Write)]);
            // SAFETY: the storage holds `n` elements of T on the device, write-locked, and
            // `bytes` is their `n · size` bytes on the host.
            unsafe { backend.copy_from_host(guards.write_ptr(&storage), bytes) };
            drop(guards);
            crate::kernel_error::take()?;
        }
        Device::Meta => {}
    }
    Ok(Tensor::from_parts(storage, layout, T::DTYPE, None))
}

/// A new contiguous tensor of `shape` on a device whose memory the host cannot write (a
/// CUDA device), every element `value`: one fill on the device (`cuMemsetD8` for zeros).
fn filled_on_device(
    ctx: &OpContext,
    device: Device,
    shape: &[usize],
    value: Scalar,
    dtype: DType,
) -> Result<Tensor> {
    let layout = Layout::contiguous(shape, 0);
    crate::backend::check_device(device, ctx.op())?;
    let storage = alloc_for(ctx, &layout, dtype, device)?;
    let backend = for_device(device)?;
    {
        let guards = lock_storages(&[(&storage, Access::Write)]);
        let ptr = guards.write_ptr(&storage);
        let plan = Plan::linear(layout.numel(), &[(ptr, dtype)], false);
        // SAFETY: the plan covers the storage's `numel` elements of `dtype`, write-locked.
        unsafe { backend.fill(&plan, value) };
    }
    crate::kernel_error::take()?;
    Ok(Tensor::from_parts(storage, layout, dtype, None))
}

struct Fill<'a> {
    ctx: &'a OpContext,
    shape: &'a [usize],
    value: Scalar,
}

impl DTypeFn for Fill<'_> {
    type Output = Result<Tensor>;
    fn call<T: Element>(self) -> Result<Tensor> {
        let device = default_device();
        if let Device::Cuda(_) = device {
            return filled_on_device(self.ctx, device, self.shape, self.value, T::DTYPE);
        }
        let v: T = self.value.to();
        from_fn(self.ctx, device, self.shape, |_| v)
    }
}

struct Arange<'a> {
    ctx: &'a OpContext,
    n: usize,
    range: ArangeRange,
}

impl DTypeFn for Arange<'_> {
    type Output = Result<Tensor>;
    fn call<T: Element>(self) -> Result<Tensor> {
        match self.range {
            ArangeRange::Int { start, step, .. } => {
                from_fn(self.ctx, default_device(), &[self.n], |i| {
                    cast::<i64, T>(start + i as i64 * step)
                })
            }
            ArangeRange::Float { start, step, .. } => {
                from_fn(self.ctx, default_device(), &[self.n], |i| {
                    cast::<f64, T>(start + i as f64 * step)
                })
            }
        }
    }
}

struct Eye<'a> {
    ctx: &'a OpContext,
    n: usize,
}

impl DTypeFn for Eye<'_> {
    type Output = Result<Tensor>;
    fn call<T: Element>(self) -> Result<Tensor> {
        let n = self.n;
        from_fn(self.ctx, default_device(), &[n, n], |i| {
            if i / n == i % n {
                T::ONE
            } else {
                T::ZERO
            }
        })
    }
}

enum Distribution {
    Uniform,
    Normal,
    /// Integers `low + k` for `k` uniform in `0..span` (`span > 0`).
    Integers {
        low: i64,
        span: u64,
    },
}

struct Random<'a> {
    ctx: &'a OpContext,
    shape: &'a [usize],
    generator: &'a mut Generator,
    distribution: Distribution,
}

impl DTypeFn for Random<'_> {
    type Output = Result<Tensor>;
    fn call<T: Element>(self) -> Result<Tensor> {
        let g = std::cell::RefCell::new(self.generator);
        let f = |_| {
            let mut g = g.borrow_mut();
            let v = match self.distribution {
                Distribution::Uniform if T::DTYPE == DType::F64 => g.next_f64(),
                Distribution::Uniform => g.next_f32() as f64,
                Distribution::Normal => g.next_normal(),
                Distribution::Integers { low, span } => {
                    // Wrapping: `low + k` lies in `low..high`, which fits i64.
                    return cast::<i64, T>(low.wrapping_add(g.next_below(span) as i64));
                }
            };
            cast::<f64, T>(v)
        };
        from_fn(self.ctx, default_device(), self.shape, f)
    }
}

/// A new tensor of `shape` and `dtype` holding samples of `distribution` from `generator`
/// (on meta: the shape, nothing drawn).
fn sample(
    ctx: &OpContext,
    shape: &(impl IntoShape + ?Sized),
    dtype: DType,
    generator: &mut Generator,
    distribution: Distribution,
) -> Result<Tensor> {
    let shape = &new_sizes(ctx.op(), shape)?[..];
    check_shape(ctx.op(), shape)?;
    dispatch(
        dtype,
        Random {
            ctx,
            shape,
            generator,
            distribution,
        },
    )
}

fn check_shape(op: &'static str, shape: &[usize]) -> Result<()> {
    match checked_numel(shape) {
        Some(_) => Ok(()),
        None => Err(Error::shape(
            op,
            format!("shape {shape:?} has more elements than can be addressed"),
            vec![shape.to_vec()],
        )),
    }
}

fn check_floating(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_floating() {
        Ok(())
    } else {
        Err(Error::dtype(
            op,
            format!("random values need a floating dtype, got {dtype}"),
            Some("use DType::F32 or DType::F64"),
        ))
    }
}

/// A tensor of `shape` with every element `value` converted to `dtype` (refused when it
/// overflows it): the one constructor behind `zeros`, `empty`, `ones` and `full`, recorded as
/// the op `op` at its caller's site.
#[track_caller]
fn filled(op: &'static str, shape: &[usize], value: Scalar, dtype: DType) -> Result<Tensor> {
    let ctx = OpContext::enter(op);
    check_shape(ctx.op(), shape)?;
    value.check_fill(ctx.op(), dtype, shape.iter().product())?;
    dispatch(
        dtype,
        Fill {
            ctx: &ctx,
            shape,
            value,
        },
    )
}

impl Tensor {
    /// A tensor of `shape` filled with zeros. (strata never hands out uninitialised memory:
    /// reading it would be undefined behaviour, so there is no separate `empty`.)
    #[track_caller]
    pub fn zeros(shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        filled("zeros", &new_sizes("zeros", shape)?, Scalar::Int(0), dtype)
    }

    /// A new tensor of `shape`, contents zero; PyTorch's `empty` with defined contents.
    #[track_caller]
    pub fn empty(shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        filled("empty", &new_sizes("empty", shape)?, Scalar::Int(0), dtype)
    }

    /// A tensor of `shape` filled with ones.
    #[track_caller]
    pub fn ones(shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        filled("ones", &new_sizes("ones", shape)?, Scalar::Int(1), dtype)
    }

    /// A tensor of `shape` filled with `value` (converted to `dtype`; refused when it
    /// overflows it, as [`Tensor::fill_`]).
    #[track_caller]
    pub fn full(
        shape: &(impl IntoShape + ?Sized),
        value: impl Into<Scalar>,
        dtype: DType,
    ) -> Result<Tensor> {
        filled("full", &new_sizes("full", shape)?, value.into(), dtype)
    }

    /// A 1-d tensor counting over `range`: `arange(n, ..)` is `[0, 1, ..., n-1]`,
    /// `arange(2..5, ..)` is `[2, 3, 4]`, `arange((0.0, 1.0, 0.25), ..)` steps by 0.25
    /// (PyTorch's three forms; see [`ArangeRange`]).
    #[track_caller]
    pub fn arange(range: impl Into<ArangeRange>, dtype: DType) -> Result<Tensor> {
        let ctx = OpContext::enter("arange");
        let range = range.into();
        let n = range.len(ctx.op())?;
        dispatch(
            dtype,
            Arange {
                ctx: &ctx,
                n,
                range,
            },
        )
    }

    /// The `n`×`n` identity matrix.
    #[track_caller]
    pub fn eye(n: usize, dtype: DType) -> Result<Tensor> {
        let ctx = OpContext::enter("eye");
        check_shape(ctx.op(), &[n, n])?;
        dispatch(dtype, Eye { ctx: &ctx, n })
    }

    /// A tensor of `shape` holding `data` in row-major order (copied into strata's memory).
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let t = Tensor::from_vec(vec![1i64, 2, 3, 4], &[2, 2])?;
    /// assert_eq!(t.shape().as_slice(), [2, 2]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn from_vec<T: Element>(data: Vec<T>, shape: &(impl IntoShape + ?Sized)) -> Result<Tensor> {
        let ctx = OpContext::enter("from_vec");
        Self::from_slice_in(&ctx, &data, &new_sizes(ctx.op(), shape)?)
    }

    /// A tensor of `shape` holding a copy of `data` in row-major order.
    #[track_caller]
    pub fn from_slice<T: Element>(data: &[T], shape: &(impl IntoShape + ?Sized)) -> Result<Tensor> {
        let ctx = OpContext::enter("from_slice");
        Self::from_slice_in(&ctx, data, &new_sizes(ctx.op(), shape)?)
    }

    fn from_slice_in<T: Element>(ctx: &OpContext, data: &[T], shape: &[usize]) -> Result<Tensor> {
        if checked_numel(shape) != Some(data.len()) {
            return Err(Error::shape(
                ctx.op(),
                format!(
                    "{} values cannot fill a tensor of shape {shape:?}",
                    data.len()
                ),
                vec![shape.to_vec()],
            )
            .with_hint("the product of the shape must equal the number of values"));
        }
        from_fn(ctx, default_device(), shape, |i| data[i])
    }

    /// A 0-d tensor holding one number.
    #[track_caller]
    pub fn scalar(value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        let ctx = OpContext::enter("scalar_tensor");
        dispatch(
            dtype,
            Fill {
                ctx: &ctx,
                shape: &[],
                value: value.into(),
            },
        )
    }

    /// Uniform samples in `[0, 1)` drawn from `generator`.
    #[track_caller]
    pub fn rand_with(
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("rand");
        check_floating(ctx.op(), dtype)?;
        sample(&ctx, shape, dtype, generator, Distribution::Uniform)
    }

    /// Standard normal samples drawn from `generator`.
    #[track_caller]
    pub fn randn_with(
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("randn");
        check_floating(ctx.op(), dtype)?;
        sample(&ctx, shape, dtype, generator, Distribution::Normal)
    }

    /// Integers drawn uniformly from `low..high` (`high` excluded) by `generator`, as
    /// `torch.randint(low, high, size, dtype=dtype)` (PyTorch's default dtype is
    /// `DType::I64`). Every value must fit `dtype`. The stream is strata's own, not
    /// PyTorch's: the same seed gives the same values in strata, not the same as PyTorch's.
    #[track_caller]
    pub fn randint_with(
        low: i64,
        high: i64,
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
        generator: &mut Generator,
    ) -> Result<Tensor> {
        let ctx = OpContext::enter("randint");
        if low >= high {
            return Err(Error::argument(
                ctx.op(),
                format!("randint needs low < high, got low={low}, high={high}"),
                Some("high is excluded: randint(0, n, ..) draws from 0 to n - 1"),
            ));
        }
        for (what, bound) in [("low", low), ("high - 1", high - 1)] {
            let fits = match dtype {
                DType::Bool => (0..=1).contains(&bound),
                _ => !Scalar::Int(bound).overflows(dtype),
            };
            if !fits {
                return Err(Error::argument(
                    ctx.op(),
                    format!("{what} = {bound} is out of bounds for {dtype}"),
                    Some("draw within the dtype's range, or draw in DType::I64 and convert"),
                ));
            }
        }
        let span = high.abs_diff(low);
        sample(
            &ctx,
            shape,
            dtype,
            generator,
            Distribution::Integers { low, span },
        )
    }

    /// [`Tensor::randint_with`] from the global generator (see [`crate::manual_seed`]).
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// strata_core::manual_seed(0);
    /// let tokens = Tensor::randint(0, 65, &[4, 8], DType::I64)?;
    /// assert!(tokens.to_vec::<i64>()?.iter().all(|t| (0..65).contains(t)));
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    #[track_caller]
    pub fn randint(
        low: i64,
        high: i64,
        shape: &(impl IntoShape + ?Sized),
        dtype: DType,
    ) -> Result<Tensor> {
        let mut g = global_generator();
        Tensor::randint_with(low, high, shape, dtype, &mut g)
    }

    /// Uniform samples in `[0, 1)` from the global generator (see [`crate::manual_seed`]).
    #[track_caller]
    pub fn rand(shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        let mut g = global_generator();
        Tensor::rand_with(shape, dtype, &mut g)
    }

    /// Standard normal samples from the global generator.
    #[track_caller]
    pub fn randn(shape: &(impl IntoShape + ?Sized), dtype: DType) -> Result<Tensor> {
        let mut g = global_generator();
        Tensor::randn_with(shape, dtype, &mut g)
    }

    /// A fresh tensor with `layout` (offset 0, dense), for ops that write every element.
    pub(crate) fn uninit_with_layout(
        ctx: &OpContext,
        layout: Layout,
        dtype: DType,
        device: Device,
    ) -> Result<Tensor> {
        let storage = alloc_for(ctx, &layout, dtype, device)?;
        Ok(Tensor::from_parts(storage, layout, dtype, None))
    }
}
