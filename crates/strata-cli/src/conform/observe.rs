//! Turning a tensor into the protocol's observation record.

use std::collections::HashMap;

use serde_json::{json, Value};

use strata::prelude::*;

/// Numbers storages in the order a program first observes them. Storage identities are
/// never reused, so nothing is kept alive for the numbering (which would change what the
/// program's allocator sees).
#[derive(Default)]
pub struct StorageNumbers {
    seen: HashMap<u64, usize>,
}

impl StorageNumbers {
    fn number(&mut self, t: &Tensor) -> usize {
        let next = self.seen.len();
        *self.seen.entry(t.storage_id()).or_insert(next)
    }
}

fn float_value(v: f64) -> Value {
    if v.is_nan() {
        json!("nan")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(v)
    }
}

/// The values of `t` as protocol JSON: numbers in row-major order, bool as 0/1, NaN and
/// infinities as strings; null on the meta device, which has none.
pub fn values(t: &Tensor) -> Result<Value, String> {
    if t.device() == Device::Meta {
        return Ok(Value::Null);
    }
    let dtype = t.dtype();
    let vals: Vec<Value> = if dtype.is_floating() {
        t.to_vec::<f64>()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(float_value)
            .collect()
    } else {
        t.to_vec::<i64>()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|v| json!(v))
            .collect()
    };
    Ok(Value::Array(vals))
}

/// Most elements the runner will print for one observation.
pub const MAX_OBSERVED: usize = 1 << 24;

/// The short form of an observation (`values_only`): no layout, storage or version, which
/// may differ between correct implementations; the storage is not numbered.
pub fn observe_values(name: &str, t: &Tensor) -> Result<Value, String> {
    Ok(json!({
        "var": name,
        "dtype": t.dtype().name(),
        "shape": t.shape().as_slice(),
        "values": values(t)?,
        "grad": match t.grad() {
            Some(g) => values(&g)?,
            None => Value::Null,
        },
    }))
}

/// One observation record.
pub fn observe(name: &str, t: &Tensor, storages: &mut StorageNumbers) -> Result<Value, String> {
    if t.numel() > MAX_OBSERVED {
        return Err(format!(
            "cannot observe {name}: {} elements is more than the runner prints ({MAX_OBSERVED})",
            t.numel()
        ));
    }
    Ok(json!({
        "var": name,
        "dtype": t.dtype().name(),
        "shape": t.shape().as_slice(),
        "strides": t.stride(),
        "offset": t.storage_offset(),
        "contiguous": t.is_contiguous(),
        "values": values(t)?,
        "storage": storages.number(t),
        "version": t.version(),
        "requires_grad": t.requires_grad(),
        "is_leaf": t.is_leaf(),
        "grad": match t.grad() {
            Some(g) if t.is_leaf() => values(&g)?,
            _ => Value::Null,
        },
    }))
}
