//! One device for a module's parameters, buffers and inputs.

use std::collections::BTreeMap;

use strata_core::{Device, Tensor};
use strata_nn::Module;

use crate::{ProfileError, Result};

/// Checks that every parameter and buffer of `module`, and every input, is on one device:
/// the device most parameters are on. Gives one error listing every tensor elsewhere, with
/// its name and device (an op would stop at the first).
///
/// ```
/// use strata_nn::Linear;
/// use strata_profile::check_devices;
/// use strata_core::{DType, Device, Tensor};
/// let layer = Linear::new(4, 2, true)?;
/// let x = Tensor::on(Device::Meta).zeros(&[1, 4], DType::F32)?;
/// let err = check_devices(&layer, &[("x", &x)]).unwrap_err();
/// assert!(err.to_string().contains("input `x` is on meta"));
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn check_devices(module: &dyn Module, inputs: &[(&str, &Tensor)]) -> Result<()> {
    let params = module.named_parameters();
    let buffers = module.named_buffers();
    let mut votes: BTreeMap<String, (usize, Device)> = BTreeMap::new();
    for (_, p) in &params {
        let d = p.device();
        votes.entry(d.to_string()).or_insert((0, d)).0 += 1;
    }
    let (expected, expected_from) = match votes.into_values().max_by_key(|(n, _)| *n) {
        Some((_, d)) => (d, "the module's parameters".to_owned()),
        None => match (buffers.first(), inputs.first()) {
            (Some((_, b)), _) => (b.device(), "the module's buffers".to_owned()),
            (None, Some((n, t))) => (t.device(), format!("input `{n}`")),
            (None, None) => return Ok(()),
        },
    };
    let mut mismatched = Vec::new();
    for (n, p) in &params {
        if p.device() != expected {
            mismatched.push((format!("parameter `{n}`"), p.device()));
        }
    }
    for (n, b) in &buffers {
        if b.device() != expected {
            mismatched.push((format!("buffer `{n}`"), b.device()));
        }
    }
    for (n, t) in inputs {
        if t.device() != expected {
            mismatched.push((format!("input `{n}`"), t.device()));
        }
    }
    if mismatched.is_empty() {
        Ok(())
    } else {
        Err(ProfileError::DeviceMismatch {
            expected,
            expected_from,
            mismatched,
        })
    }
}
