//! Reading a step's `args` object: typed getters whose errors name the argument.

use serde_json::{Map, Value};
use strata::prelude::*;

/// A step's arguments.
pub struct Args<'a>(pub &'a Map<String, Value>);

fn bad(name: &str, want: &str, got: &Value) -> String {
    format!("argument '{name}' must be {want}, got {got}")
}

/// A JSON number as a strata number, keeping its kind (`2` vs `2.0`).
pub fn scalar_of(v: &Value) -> Option<Scalar> {
    match v {
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(Scalar::Int(i))
            } else if n.is_u64() {
                None
            } else {
                n.as_f64().map(Scalar::Float)
            }
        }
        _ => None,
    }
}

impl Args<'_> {
    pub fn has(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(|v| !v.is_null())
    }

    fn get(&self, name: &str) -> Result<&Value, String> {
        match self.0.get(name) {
            Some(v) if !v.is_null() => Ok(v),
            _ => Err(format!("missing argument '{name}'")),
        }
    }

    pub fn int(&self, name: &str) -> Result<i64, String> {
        let v = self.get(name)?;
        v.as_i64().ok_or_else(|| bad(name, "an integer", v))
    }

    pub fn int_or(&self, name: &str, default: i64) -> Result<i64, String> {
        if self.has(name) {
            self.int(name)
        } else {
            Ok(default)
        }
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, String> {
        if self.has(name) {
            self.int(name).map(Some)
        } else {
            Ok(None)
        }
    }

    pub fn usize(&self, name: &str) -> Result<usize, String> {
        let v = self.get(name)?;
        v.as_u64()
            .and_then(|u| usize::try_from(u).ok())
            .ok_or_else(|| bad(name, "a non-negative integer", v))
    }

    pub fn usize_or(&self, name: &str, default: usize) -> Result<usize, String> {
        if self.has(name) {
            self.usize(name)
        } else {
            Ok(default)
        }
    }

    pub fn scalar(&self, name: &str) -> Result<Scalar, String> {
        let v = self.get(name)?;
        scalar_of(v).ok_or_else(|| bad(name, "a number", v))
    }

    pub fn opt_scalar(&self, name: &str) -> Result<Option<Scalar>, String> {
        if self.has(name) {
            self.scalar(name).map(Some)
        } else {
            Ok(None)
        }
    }

    pub fn scalar_or(&self, name: &str, default: Scalar) -> Result<Scalar, String> {
        Ok(self.opt_scalar(name)?.unwrap_or(default))
    }

    pub fn float_or(&self, name: &str, default: f64) -> Result<f64, String> {
        if !self.has(name) {
            return Ok(default);
        }
        let v = self.get(name)?;
        v.as_f64().ok_or_else(|| bad(name, "a number", v))
    }

    pub fn bool_or(&self, name: &str, default: bool) -> Result<bool, String> {
        if !self.has(name) {
            return Ok(default);
        }
        let v = self.get(name)?;
        v.as_bool().ok_or_else(|| bad(name, "true or false", v))
    }

    pub fn str(&self, name: &str) -> Result<&str, String> {
        let v = self.get(name)?;
        v.as_str().ok_or_else(|| bad(name, "a string", v))
    }

    pub fn str_or<'b>(&'b self, name: &str, default: &'b str) -> Result<&'b str, String> {
        if self.has(name) {
            self.str(name)
        } else {
            Ok(default)
        }
    }

    /// A list of integers (a shape with possible -1s, or dims).
    pub fn ints(&self, name: &str) -> Result<Vec<i64>, String> {
        let v = self.get(name)?;
        let list = v
            .as_array()
            .ok_or_else(|| bad(name, "a list of integers", v))?;
        list.iter()
            .map(|x| x.as_i64().ok_or_else(|| bad(name, "a list of integers", v)))
            .collect()
    }

    /// A list of non-negative integers.
    pub fn usizes(&self, name: &str) -> Result<Vec<usize>, String> {
        let v = self.get(name)?;
        let list = v
            .as_array()
            .ok_or_else(|| bad(name, "a list of non-negative integers", v))?;
        list.iter()
            .map(|x| {
                x.as_u64()
                    .and_then(|u| usize::try_from(u).ok())
                    .ok_or_else(|| bad(name, "a list of non-negative integers", v))
            })
            .collect()
    }

    /// An integer or a list of integers.
    pub fn int_or_ints(&self, name: &str) -> Result<Vec<i64>, String> {
        let v = self.get(name)?;
        if let Some(i) = v.as_i64() {
            return Ok(vec![i]);
        }
        self.ints(name)
    }

    /// True when the argument is a list rather than a single value.
    pub fn is_list(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(Value::is_array)
    }

    pub fn dtype(&self) -> Result<DType, String> {
        let name = self.str_or("dtype", "f32")?;
        DType::from_name(name).ok_or_else(|| format!("unknown dtype '{name}'"))
    }

    pub fn raw(&self, name: &str) -> Result<&Value, String> {
        self.get(name)
    }
}
