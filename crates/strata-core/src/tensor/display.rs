//! Printing tensors the way PyTorch prints them.

use std::fmt;

use crate::{DType, Tensor};

/// How a set of floating values is written: as integers with a trailing dot, fixed with four
/// decimals, or scientific.
enum FloatStyle {
    Integral,
    Fixed,
    Scientific,
}

fn float_style(values: &[f64]) -> FloatStyle {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() || finite.iter().all(|v| v.fract() == 0.0) {
        let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        return if max > 1e8 {
            FloatStyle::Scientific
        } else {
            FloatStyle::Integral
        };
    }
    let nonzero: Vec<f64> = finite
        .iter()
        .map(|v| v.abs())
        .filter(|&v| v != 0.0)
        .collect();
    let max = nonzero.iter().fold(0.0f64, |m, &v| m.max(v));
    let min = nonzero.iter().fold(f64::INFINITY, |m, &v| m.min(v));
    if max / min > 1000.0 || max > 1e8 || min < 1e-4 {
        FloatStyle::Scientific
    } else {
        FloatStyle::Fixed
    }
}

fn format_float(v: f64, style: &FloatStyle) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    match style {
        FloatStyle::Integral => format!("{v:.0}."),
        FloatStyle::Fixed => format!("{v:.4}"),
        FloatStyle::Scientific => {
            let s = format!("{v:.4e}");
            // Rust writes 1.2340e5; PyTorch writes 1.2340e+05.
            match s.split_once('e') {
                Some((m, e)) => {
                    let (sign, digits) = match e.strip_prefix('-') {
                        Some(d) => ('-', d),
                        None => ('+', e),
                    };
                    format!("{m}e{sign}{digits:0>2}")
                }
                None => s,
            }
        }
    }
}

fn write_nested(
    f: &mut fmt::Formatter<'_>,
    cells: &[String],
    shape: &[usize],
    width: usize,
    indent: usize,
) -> fmt::Result {
    if shape.is_empty() {
        return write!(f, "{:>width$}", cells[0]);
    }
    f.write_str("[")?;
    let inner: usize = shape[1..].iter().product();
    for i in 0..shape[0] {
        if i > 0 {
            if shape.len() == 1 {
                f.write_str(", ")?;
            } else {
                f.write_str(",")?;
                for _ in 1..shape.len() {
                    f.write_str("\n")?;
                }
                write!(f, "{:indent$}", "", indent = indent + 1)?;
            }
        }
        write_nested(
            f,
            &cells[i * inner..(i + 1) * inner],
            &shape[1..],
            width,
            indent + 1,
        )?;
    }
    f.write_str("]")
}

impl fmt::Display for Tensor {
    /// `tensor([[0., 1.],\n        [2., 3.]])`, with `dtype=` when it is not a default
    /// (f32, i64, bool), as PyTorch prints.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = self.shape().to_vec();
        let dtype = self.dtype();
        if self.device() != crate::Device::Cpu {
            // No values to show: the shape, device and dtype, as PyTorch prints a meta tensor.
            let sizes: Vec<String> = shape.iter().map(usize::to_string).collect();
            let tuple = match sizes.len() {
                1 => format!("({},)", sizes[0]),
                _ => format!("({})", sizes.join(", ")),
            };
            write!(f, "tensor(..., device='{}', size={tuple}", self.device())?;
            if !matches!(dtype, DType::F32 | DType::I64 | DType::Bool) {
                write!(f, ", dtype={}", dtype.torch_name())?;
            }
            return f.write_str(")");
        }
        let values: Vec<f64> =
            crate::tensor::read_elements::<f64>("display", self).map_err(|_| fmt::Error)?;
        let cells: Vec<String> = if dtype.is_floating() {
            let style = float_style(&values);
            values.iter().map(|&v| format_float(v, &style)).collect()
        } else if dtype == DType::Bool {
            values
                .iter()
                .map(|&v| if v != 0.0 { "True" } else { "False" }.to_string())
                .collect()
        } else {
            crate::tensor::read_elements::<i64>("display", self)
                .map_err(|_| fmt::Error)?
                .iter()
                .map(i64::to_string)
                .collect()
        };
        let width = cells.iter().map(String::len).max().unwrap_or(0);
        f.write_str("tensor(")?;
        if values.is_empty() {
            f.write_str("[]")?;
        } else {
            write_nested(f, &cells, &shape, width, "tensor(".len())?;
        }
        if values.is_empty() && shape != [0] {
            write!(
                f,
                ", size=({})",
                shape
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )?;
        }
        if !matches!(dtype, DType::F32 | DType::I64 | DType::Bool) {
            write!(f, ", dtype={}", dtype.torch_name())?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use crate::{DType, Tensor};

    #[test]
    fn prints_like_pytorch() {
        let t = Tensor::arange(4, DType::F32)
            .unwrap()
            .view(&[2, 2])
            .unwrap();
        assert_eq!(t.to_string(), "tensor([[0., 1.],\n        [2., 3.]])");
        let t = Tensor::from_vec(vec![1.5f32, -2.25], &[2]).unwrap();
        assert_eq!(t.to_string(), "tensor([ 1.5000, -2.2500])");
        let t = Tensor::arange(3, DType::I32).unwrap();
        assert_eq!(t.to_string(), "tensor([0, 1, 2], dtype=torch.int32)");
        let t = Tensor::scalar(true, DType::Bool).unwrap();
        assert_eq!(t.to_string(), "tensor(True)");
        let t = Tensor::zeros(&[0, 3], DType::F32).unwrap();
        assert_eq!(t.to_string(), "tensor([], size=(0, 3))");
        let t = Tensor::from_vec(vec![1e-6f64, 1.0], &[2]).unwrap();
        assert_eq!(
            t.to_string(),
            "tensor([1.0000e-06, 1.0000e+00], dtype=torch.float64)"
        );
    }
}
