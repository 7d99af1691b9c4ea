//! A reduction's working values: one accumulator per result (f64 or i64), in the input's
//! device memory, taken from its allocator like any tensor so they are counted, attributed
//! and predicted on meta. Only the backend's kernels read or write them: the folds fill them,
//! the maps here finish them in place (a mean's division, a norm's root), and a copy converts
//! them into the result.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::backend::kernel::{BinaryOp, FloatOp, SameOp};
use crate::backend::{Backend, Operand, Plan};
use crate::dtype::{Element, Wide};
use crate::op::OpContext;
use crate::storage::Storage;
use crate::{DType, Device, Error, Result, Scalar};

/// `len` values of `A` in device memory that only this op reaches.
pub(crate) struct Accumulators<A: Element> {
    /// The backend of the device they live on.
    backend: &'static dyn Backend,
    /// Their address (never dereferenced here).
    ptr: *mut u8,
    len: usize,
    _storage: Arc<Storage>,
    _values: PhantomData<A>,
}

impl<A: Element> Accumulators<A> {
    /// `len` accumulators set to `init`: a temporary of `ctx`'s op on `device`.
    pub(crate) fn new(
        ctx: &OpContext,
        backend: &'static dyn Backend,
        device: Device,
        len: usize,
        init: A,
    ) -> Result<Self> {
        let bytes = len.checked_mul(A::DTYPE.size()).ok_or_else(|| {
            Error::shape(
                ctx.op(),
                format!("{len} accumulators are too many to address"),
                vec![],
            )
        })?;
        let mut storage = ctx.allocate(bytes, device)?;
        let ptr = Storage::unshared_write_ptr(&mut storage).ok_or_else(|| Error::Unsupported {
            op: ctx.op(),
            message: "internal: a new working buffer was shared".into(),
        })?;
        let acc = Accumulators {
            backend,
            ptr,
            len,
            _storage: storage,
            _values: PhantomData,
        };
        let plan = acc.linear(&[], true);
        // SAFETY: the plan covers our own `len` elements of A, which only this op reaches.
        unsafe { backend.fill(&plan, scalar_of(init)) };
        Ok(acc)
    }

    /// Their address, for a plan's operand.
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// An operand over them with `strides` (in elements).
    pub(crate) fn operand(&self, strides: Vec<usize>) -> Operand {
        Operand {
            ptr: self.ptr,
            strides,
            dtype: A::DTYPE,
        }
    }

    /// A one-dimensional loop over them (operand 0) and `others` of the same length.
    fn linear(&self, others: &[&Accumulators<A>], parallel: bool) -> Plan {
        let operands: smallvec::SmallVec<[_; 4]> = std::iter::once(self)
            .chain(others.iter().copied())
            .map(|a| (a.ptr, A::DTYPE))
            .collect();
        Plan::linear(self.len, &operands, parallel)
    }
}

impl Accumulators<f64> {
    /// `a = f(a)` for each accumulator.
    pub(crate) fn map(&self, f: FloatOp) {
        let plan = self.linear(&[self], true);
        // SAFETY: our own elements, read and written in place one by one.
        unsafe { self.backend.float_unary(&plan, f, DType::F64) };
    }

    /// `a = a op value` for each accumulator.
    pub(crate) fn map_scalar(&self, op: BinaryOp, value: f64) {
        let plan = self.linear(&[self], true);
        // SAFETY: as for `map`.
        unsafe {
            self.backend
                .binary(&plan, op, DType::F64, Some(Scalar::Float(value)))
        };
    }

    /// `a = 0` where `a` is infinite.
    pub(crate) fn zero_infinities(&self) {
        let plan = self.linear(&[self], true);
        // SAFETY: as for `map`.
        unsafe {
            self.backend
                .same_unary(&plan, SameOp::ZeroInfinities, DType::F64)
        };
    }

    /// `a = a + b` for each pair.
    pub(crate) fn add(&self, b: &Accumulators<f64>) {
        let plan = self.linear(&[self, b], true);
        // SAFETY: our own elements and `b`'s (of the same length), `a` written in place.
        unsafe {
            self.backend
                .binary(&plan, BinaryOp::Add(Scalar::Int(1)), DType::F64, None)
        };
    }
}

/// `value` as the number a fill writes.
fn scalar_of<A: Element>(value: A) -> Scalar {
    match value.to_wide() {
        Wide::Float(v) => Scalar::Float(v),
        Wide::Int(v) => Scalar::Int(v),
        Wide::Bool(b) => Scalar::Bool(b),
    }
}
