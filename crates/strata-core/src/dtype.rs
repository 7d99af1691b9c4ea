//! Element types, the one place that dispatches on them, and PyTorch's type promotion.

use std::fmt;

use half::{bf16, f16};

/// The element type of a tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// `bool`, one byte per element.
    Bool,
    /// `u8`.
    U8,
    /// `i32`.
    I32,
    /// `i64`, the default integer type.
    I64,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    BF16,
    /// `f32`, the default floating type.
    F32,
    /// `f64`.
    F64,
}

/// Every dtype, in a fixed order.
pub const ALL_DTYPES: [DType; 8] = [
    DType::Bool,
    DType::U8,
    DType::I32,
    DType::I64,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::U8 => 1,
            DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::F32 => 4,
            DType::I64 | DType::F64 => 8,
        }
    }

    /// True for f16, bf16, f32, f64.
    pub fn is_floating(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// True for u8, i32, i64 (not bool).
    pub fn is_integral(self) -> bool {
        matches!(self, DType::U8 | DType::I32 | DType::I64)
    }

    /// The short name used by strata and its conformance protocol (`f32`, `i64`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "u8",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
        }
    }

    /// Parses a short name (`"f32"`, `"bf16"`, ...).
    pub fn from_name(name: &str) -> Option<DType> {
        ALL_DTYPES.into_iter().find(|d| d.name() == name)
    }

    /// PyTorch's name for the dtype, as printed in `dtype=torch.int32`.
    pub fn torch_name(self) -> &'static str {
        match self {
            DType::Bool => "torch.bool",
            DType::U8 => "torch.uint8",
            DType::I32 => "torch.int32",
            DType::I64 => "torch.int64",
            DType::F16 => "torch.float16",
            DType::BF16 => "torch.bfloat16",
            DType::F32 => "torch.float32",
            DType::F64 => "torch.float64",
        }
    }

    /// The type two tensors of these dtypes promote to (PyTorch's `promote_types`).
    pub fn promote(self, other: DType) -> DType {
        use DType::*;
        if self == other {
            return self;
        }
        match (self, other) {
            (Bool, x) | (x, Bool) => x,
            (F16, BF16) | (BF16, F16) => F32,
            (a, b) if a.is_floating() && b.is_floating() => a.max(b),
            (a, _) if a.is_floating() => a,
            (_, b) if b.is_floating() => b,
            // both integral: u8 < i32 < i64
            (a, b) => a.max(b),
        }
    }

    /// Whether a result of dtype `self` may be written into a tensor of dtype `to`
    /// (PyTorch's `canCast`): no floating to integral, no non-bool to bool.
    pub fn can_cast_to(self, to: DType) -> bool {
        if self.is_floating() && !to.is_floating() {
            return false;
        }
        !(self != DType::Bool && to == DType::Bool)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value wide enough to carry any element exactly: what casts go through.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wide {
    /// A floating value.
    Float(f64),
    /// An integral value.
    Int(i64),
    /// A boolean.
    Bool(bool),
}

/// A Rust type that can be a tensor element, with the arithmetic strata's kernels use.
///
/// Arithmetic follows PyTorch: integers wrap, `bool` adds as logical or and multiplies as
/// logical and, `maximum`/`minimum` propagate NaN. f16 and bf16 are computed in f32 by the
/// kernels (they convert blockwise), so their methods here are only a fallback.
pub trait Element: Copy + Send + Sync + PartialEq + PartialOrd + fmt::Debug + 'static {
    /// The dtype this type stores.
    const DTYPE: DType;
    /// Zero of this type.
    const ZERO: Self;
    /// One of this type.
    const ONE: Self;
    /// This value, widened exactly.
    fn to_wide(self) -> Wide;
    /// Converts a wide value with C++ cast semantics as PyTorch does (float to integer
    /// truncates, integers wrap, anything non-zero is `true`).
    fn from_wide(w: Wide) -> Self;
    /// This value as `f64` (booleans are 0 or 1).
    fn to_f64(self) -> f64 {
        match self.to_wide() {
            Wide::Float(v) => v,
            Wide::Int(v) => v as f64,
            Wide::Bool(b) => b as u8 as f64,
        }
    }
    /// `a + b`.
    fn add(self, other: Self) -> Self;
    /// `a - b`.
    fn sub(self, other: Self) -> Self;
    /// `a * b`.
    fn mul(self, other: Self) -> Self;
    /// `a / b` (floating types; integers divide truncating, zero divisor gives zero).
    fn div(self, other: Self) -> Self;
    /// `a ** b`.
    fn pow(self, other: Self) -> Self;
    /// `-a`.
    fn neg(self) -> Self;
    /// `|a|`.
    fn abs(self) -> Self;
    /// NaN test (false for non-floating types).
    fn is_nan(self) -> bool {
        false
    }
    /// The larger value, NaN if either is NaN.
    fn maximum_nan(self, other: Self) -> Self {
        if self.is_nan() || other.is_nan() {
            return if self.is_nan() { self } else { other };
        }
        if other > self {
            other
        } else {
            self
        }
    }
    /// The smaller value, NaN if either is NaN.
    fn minimum_nan(self, other: Self) -> Self {
        if self.is_nan() || other.is_nan() {
            return if self.is_nan() { self } else { other };
        }
        if other < self {
            other
        } else {
            self
        }
    }
}

/// Converts one element to another type with PyTorch's cast semantics.
#[inline(always)]
pub fn cast<S: Element, D: Element>(s: S) -> D {
    D::from_wide(s.to_wide())
}

macro_rules! float_element {
    ($t:ty, $d:expr, $zero:expr, $one:expr, $to:expr, $from:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            const ZERO: Self = $zero;
            const ONE: Self = $one;
            #[inline(always)]
            fn to_wide(self) -> Wide {
                Wide::Float($to(self))
            }
            #[inline(always)]
            fn from_wide(w: Wide) -> Self {
                match w {
                    Wide::Float(v) => $from(v),
                    Wide::Int(v) => $from(v as f64),
                    Wide::Bool(b) => $from(b as u8 as f64),
                }
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                self / o
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                $from($to(self).powf($to(o)))
            }
            #[inline(always)]
            fn neg(self) -> Self {
                -self
            }
            #[inline(always)]
            fn abs(self) -> Self {
                if self < Self::ZERO {
                    -self
                } else if self == Self::ZERO {
                    Self::ZERO
                } else {
                    self
                }
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                self != self
            }
        }
    };
}

/// `v` truncated toward zero as x86's `cvttsd2si` does into a register of 64 bits (when
/// `bits` is 64) or 32 bits (otherwise): NaN and values outside the register's range give
/// its minimum.
#[inline(always)]
fn x86_truncate(v: f64, bits: u32) -> i64 {
    // 2^63 and 2^31, exactly representable.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    const TWO_31: f64 = 2_147_483_648.0;
    if bits == 64 {
        if (-TWO_63..TWO_63).contains(&v) {
            v as i64
        } else {
            i64::MIN
        }
    } else if v > -TWO_31 - 1.0 && v < TWO_31 {
        v as i64
    } else {
        i32::MIN as i64
    }
}

macro_rules! int_element {
    ($t:ty, $d:expr) => {
        impl Element for $t {
            const DTYPE: DType = $d;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            #[inline(always)]
            fn to_wide(self) -> Wide {
                Wide::Int(self as i64)
            }
            #[inline(always)]
            fn from_wide(w: Wide) -> Self {
                match w {
                    // As x86 C++ casts do in practice: truncate toward zero in a 32-bit
                    // (64-bit for i64) register, where NaN and out-of-range values give the
                    // register's minimum, then keep the low bits.
                    Wide::Float(v) => x86_truncate(v, <$t>::BITS) as $t,
                    Wide::Int(v) => v as $t,
                    Wide::Bool(b) => b as $t,
                }
            }
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            #[inline(always)]
            fn pow(self, o: Self) -> Self {
                let e = o as i64;
                if e < 0 {
                    // Integer powers with negative exponents: only 1 and -1 survive.
                    return match self as i64 {
                        1 => 1,
                        -1 => {
                            if e % 2 == 0 {
                                1
                            } else {
                                self
                            }
                        }
                        _ => 0,
                    };
                }
                let mut acc: Self = 1;
                let mut base = self;
                let mut e = e as u64;
                while e > 0 {
                    if e & 1 == 1 {
                        acc = acc.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                acc
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn neg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            #[inline(always)]
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 {
                    (0 as $t).wrapping_sub(self)
                } else {
                    self
                }
            }
        }
    };
}

float_element!(f32, DType::F32, 0.0, 1.0, |v: f32| v as f64, |v: f64| v
    as f32);
float_element!(f64, DType::F64, 0.0, 1.0, |v: f64| v, |v: f64| v);
float_element!(
    f16,
    DType::F16,
    f16::ZERO,
    f16::ONE,
    f16::to_f64,
    f16::from_f64
);
float_element!(
    bf16,
    DType::BF16,
    bf16::ZERO,
    bf16::ONE,
    bf16::to_f64,
    bf16::from_f64
);
int_element!(u8, DType::U8);
int_element!(i32, DType::I32);
int_element!(i64, DType::I64);

impl Element for bool {
    const DTYPE: DType = DType::Bool;
    const ZERO: Self = false;
    const ONE: Self = true;
    #[inline(always)]
    fn to_wide(self) -> Wide {
        Wide::Bool(self)
    }
    #[inline(always)]
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::Float(v) => v != 0.0,
            Wide::Int(v) => v != 0,
            Wide::Bool(b) => b,
        }
    }
    fn add(self, o: Self) -> Self {
        self | o
    }
    fn sub(self, o: Self) -> Self {
        self ^ o
    }
    fn mul(self, o: Self) -> Self {
        self & o
    }
    fn div(self, o: Self) -> Self {
        self & o
    }
    fn pow(self, o: Self) -> Self {
        self | !o
    }
    fn neg(self) -> Self {
        self
    }
    fn abs(self) -> Self {
        self
    }
}

/// A computation generic over the element type, run for a dtype chosen at run time by
/// [`dispatch`]. This is the one place strata turns a `DType` into a Rust type.
pub trait DTypeFn {
    /// What the computation returns.
    type Output;
    /// Runs the computation for element type `T`.
    fn call<T: Element>(self) -> Self::Output;
}

/// Runs `f` with the Rust type behind `dtype`.
pub fn dispatch<F: DTypeFn>(dtype: DType, f: F) -> F::Output {
    match dtype {
        DType::Bool => f.call::<bool>(),
        DType::U8 => f.call::<u8>(),
        DType::I32 => f.call::<i32>(),
        DType::I64 => f.call::<i64>(),
        DType::F16 => f.call::<f16>(),
        DType::BF16 => f.call::<bf16>(),
        DType::F32 => f.call::<f32>(),
        DType::F64 => f.call::<f64>(),
    }
}

/// The type kernels compute a dtype in: f16 and bf16 widen to f32, others are themselves.
pub fn compute_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DType::*;

    #[test]
    fn promotion_table() {
        assert_eq!(Bool.promote(U8), U8);
        assert_eq!(U8.promote(I32), I32);
        assert_eq!(I32.promote(I64), I64);
        assert_eq!(I64.promote(F16), F16);
        assert_eq!(F16.promote(BF16), F32);
        assert_eq!(BF16.promote(F32), F32);
        assert_eq!(F32.promote(F64), F64);
        assert_eq!(U8.promote(Bool), U8);
        for a in ALL_DTYPES {
            for b in ALL_DTYPES {
                assert_eq!(a.promote(b), b.promote(a), "{a} {b}");
            }
        }
    }

    #[test]
    fn can_cast_rules() {
        assert!(!F32.can_cast_to(I64));
        assert!(I64.can_cast_to(F32));
        assert!(!I64.can_cast_to(Bool));
        assert!(Bool.can_cast_to(U8));
        assert!(F64.can_cast_to(F16));
    }

    #[test]
    fn casts_follow_cpp() {
        assert_eq!(cast::<f32, i64>(-2.7), -2);
        assert_eq!(cast::<i64, u8>(257), 1);
        assert_eq!(cast::<f32, u8>(-1.0), 255);
        assert!(cast::<f32, bool>(0.5));
        assert_eq!(cast::<bool, f32>(true), 1.0);
        let v = 1.0 + 2f32.powi(-10);
        assert_eq!(cast::<f32, f16>(v).to_f32(), v);
    }
}
