//! Initialisers (`torch.nn.init`): each writes into an existing tensor in place, under
//! `no_grad`, drawing from the generator given or else the global one
//! ([`strata_core::random::global_generator`]).
//!
//! ```
//! use strata_core::{DType, Generator, Tensor};
//! use strata_nn::init;
//! let w = Tensor::zeros(&[64, 32], DType::F32)?;
//! init::kaiming_uniform_(&w, 5f64.sqrt(), init::FanMode::FanIn,
//!                        init::Nonlinearity::LeakyRelu(5f64.sqrt()), None)?;
//! let bound = 1.0 / 32f32.sqrt();
//! assert!(w.to_vec::<f32>()?.iter().all(|v| v.abs() <= bound));
//! let mut g = Generator::new(7);
//! init::orthogonal_(&w, 1.0, Some(&mut g))?;
//! # Ok::<(), strata_core::Error>(())
//! ```
//!
//! Layers initialise themselves as PyTorch's do (see each layer's constructor).

mod fan;
mod orthogonal;

use strata_core::autograd::GradModeGuard;
use strata_core::random::global_generator;
use strata_core::{DType, Device, Error, Generator, Result, Tensor};

pub use fan::{calculate_fan_in_and_fan_out, calculate_gain, FanMode, Nonlinearity};

/// Runs `f` with `g`, or with the locked global generator.
fn with_generator<R>(g: Option<&mut Generator>, f: impl FnOnce(&mut Generator) -> R) -> R {
    match g {
        Some(g) => f(g),
        None => f(&mut global_generator()),
    }
}

fn check_floating(op: &'static str, t: &Tensor) -> Result<()> {
    if t.dtype().is_floating() {
        Ok(())
    } else {
        Err(Error::dtype(
            op,
            format!("initialises floating tensors only, got {:?}", t.dtype()),
            None,
        ))
    }
}

/// Writes `src` (same shape) into `t` under `no_grad`.
fn write(t: &Tensor, src: &Tensor) -> Result<()> {
    let _g = GradModeGuard::no_grad();
    t.copy_(src)?;
    Ok(())
}

/// Writes host values (row-major, `t.numel()` of them) into `t`. On the meta device there
/// is nothing to write.
fn write_values(t: &Tensor, values: Vec<f64>) -> Result<()> {
    if t.device() == Device::Meta {
        return Ok(());
    }
    let src = Tensor::from_vec(values, t.shape().as_slice())?;
    write(t, &src.to_device_dtype(t.device(), t.dtype())?)
}

/// Fills `t` with draws from U(`low`, `high`).
pub fn uniform_(t: &Tensor, low: f64, high: f64, g: Option<&mut Generator>) -> Result<()> {
    check_floating("uniform_", t)?;
    if low > high {
        return Err(Error::argument(
            "uniform_",
            format!("the lower bound {low} is above the upper bound {high}"),
            None,
        ));
    }
    let r = with_generator(g, |g| {
        Tensor::on(t.device()).rand_with(t.shape().as_slice(), DType::F64, g)
    })?;
    // Scaled in place: the draws are the only temporary, not three of them.
    r.mul_(high - low)?.add_(low)?;
    write(t, &r)
}

/// Fills `t` with draws from N(`mean`, `std`²).
pub fn normal_(t: &Tensor, mean: f64, std: f64, g: Option<&mut Generator>) -> Result<()> {
    check_floating("normal_", t)?;
    if std < 0.0 {
        return Err(Error::argument(
            "normal_",
            format!("the standard deviation must not be negative, got {std}"),
            None,
        ));
    }
    let r = with_generator(g, |g| {
        Tensor::on(t.device()).randn_with(t.shape().as_slice(), DType::F64, g)
    })?;
    r.mul_(std)?.add_(mean)?;
    write(t, &r)
}

/// Fills `t` with `value`.
pub fn constant_(t: &Tensor, value: f64) -> Result<()> {
    let _g = GradModeGuard::no_grad();
    t.fill_(value)?;
    Ok(())
}

/// Fills `t` with zeros.
pub fn zeros_(t: &Tensor) -> Result<()> {
    constant_(t, 0.0)
}

/// Fills `t` with ones.
pub fn ones_(t: &Tensor) -> Result<()> {
    constant_(t, 1.0)
}

/// He initialisation, uniform: U(−b, b) with `b = gain · √(3 / fan)`, the gain that of
/// `nonlinearity` (PyTorch passes the slope `a` through `leaky_relu`; pass
/// `Nonlinearity::LeakyRelu(a)` for that, and `a` is used only there).
pub fn kaiming_uniform_(
    t: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: Nonlinearity,
    g: Option<&mut Generator>,
) -> Result<()> {
    let bound = 3f64.sqrt() * kaiming_std(t, a, mode, nonlinearity)?;
    uniform_(t, -bound, bound, g)
}

/// He initialisation, normal: N(0, std²) with `std = gain / √fan`.
pub fn kaiming_normal_(
    t: &Tensor,
    a: f64,
    mode: FanMode,
    nonlinearity: Nonlinearity,
    g: Option<&mut Generator>,
) -> Result<()> {
    let std = kaiming_std(t, a, mode, nonlinearity)?;
    normal_(t, 0.0, std, g)
}

fn kaiming_std(t: &Tensor, a: f64, mode: FanMode, nonlinearity: Nonlinearity) -> Result<f64> {
    let gain = match nonlinearity {
        Nonlinearity::LeakyRelu(_) => calculate_gain(Nonlinearity::LeakyRelu(a)),
        other => calculate_gain(other),
    };
    let fan = fan::fan(t, mode)?;
    if fan == 0 {
        return Ok(0.0);
    }
    Ok(gain / (fan as f64).sqrt())
}

/// Glorot initialisation, uniform: U(−b, b) with `b = gain · √(6 / (fan_in + fan_out))`.
pub fn xavier_uniform_(t: &Tensor, gain: f64, g: Option<&mut Generator>) -> Result<()> {
    let (fi, fo) = calculate_fan_in_and_fan_out(t)?;
    let bound = gain * (6.0 / (fi + fo).max(1) as f64).sqrt();
    uniform_(t, -bound, bound, g)
}

/// Glorot initialisation, normal: N(0, std²) with `std = gain · √(2 / (fan_in + fan_out))`.
pub fn xavier_normal_(t: &Tensor, gain: f64, g: Option<&mut Generator>) -> Result<()> {
    let (fi, fo) = calculate_fan_in_and_fan_out(t)?;
    let std = gain * (2.0 / (fi + fo).max(1) as f64).sqrt();
    normal_(t, 0.0, std, g)
}

/// Draws from N(`mean`, `std`²) restricted to [`a`, `b`] (redrawing values outside).
pub fn trunc_normal_(
    t: &Tensor,
    mean: f64,
    std: f64,
    a: f64,
    b: f64,
    g: Option<&mut Generator>,
) -> Result<()> {
    check_floating("trunc_normal_", t)?;
    let (lo, hi) = ((a - mean) / std, (b - mean) / std);
    // Redrawing is efficient while the interval holds a fair share of the mass.
    let mass = normal_cdf(hi) - normal_cdf(lo);
    if !(std > 0.0 && a < b && mass > 1e-3) {
        return Err(Error::argument(
            "trunc_normal_",
            format!(
                "[{a}, {b}] must be a non-empty interval holding at least 0.1% of N({mean}, {std}²)"
            ),
            Some("widen the interval or move it towards the mean"),
        ));
    }
    if t.device() == Device::Meta {
        return Ok(());
    }
    let values = with_generator(g, |g| {
        (0..t.numel())
            .map(|_| loop {
                let z = g.next_normal();
                if (lo..=hi).contains(&z) {
                    break mean + std * z;
                }
            })
            .collect::<Vec<f64>>()
    });
    write_values(t, values)
}

fn normal_cdf(x: f64) -> f64 {
    0.5 * (1.0 + libm_erf(x / 2f64.sqrt()))
}

/// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7: ample for deciding
/// whether an interval holds enough mass).
fn libm_erf(x: f64) -> f64 {
    let s = x.signum();
    let x = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let y = 1.0
        - (((((1.061_405_429 * t - 1.453_152_027) * t) + 1.421_413_741) * t - 0.284_496_736) * t
            + 0.254_829_592)
            * t
            * (-x * x).exp();
    s * y
}

/// A (semi-)orthogonal matrix: the tensor viewed as `size(0) × rest` gets orthonormal rows
/// or columns (whichever are fewer), scaled by `gain`.
pub fn orthogonal_(t: &Tensor, gain: f64, g: Option<&mut Generator>) -> Result<()> {
    check_floating("orthogonal_", t)?;
    let shape = t.shape();
    if shape.len() < 2 {
        return Err(Error::argument(
            "orthogonal_",
            format!(
                "needs a tensor of at least 2 dimensions, got shape {:?}",
                shape.as_slice()
            ),
            None,
        ));
    }
    let rows = shape[0];
    let cols = t.numel() / rows.max(1);
    if t.device() == Device::Meta || rows == 0 || cols == 0 {
        return Ok(());
    }
    // Work on the taller orientation: orthonormal columns of a (big × small) matrix.
    let (big, small) = (rows.max(cols), rows.min(cols));
    let mut a: Vec<f64> =
        with_generator(g, |g| (0..big * small).map(|_| g.next_normal()).collect());
    orthogonal::orthonormal_columns(&mut a, big, small);
    let values: Vec<f64> = if rows >= cols {
        a.iter().map(|v| v * gain).collect()
    } else {
        // Transpose the (cols × rows) result into rows × cols.
        let mut out = vec![0.0; rows * cols];
        for i in 0..rows {
            for j in 0..cols {
                out[i * cols + j] = a[j * rows + i] * gain;
            }
        }
        out
    };
    write_values(t, values)
}

#[cfg(test)]
mod tests;
