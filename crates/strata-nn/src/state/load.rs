//! Taking a module's state dict and loading one into it.

use std::path::Path;

use strata_core::autograd::GradModeGuard;
use strata_core::{Category, DType, Tensor};

use super::error::{LoadProblems, Mismatch, StateError};
use super::StateDict;
use crate::module::{Module, TensorSlot};

/// How [`StateDictExt::load_state_dict`] loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadOptions {
    /// Missing and unexpected keys are errors (PyTorch's `strict=True`, the default).
    pub strict: bool,
    /// The module takes the dict's tensors themselves instead of copying their values into
    /// its own (PyTorch's `assign=True`): with a dict read by [`StateDict::load`], parameters
    /// then view the mapped file without a copy. The module's tensors are replaced, so an
    /// optimizer built before holds the old ones. A tensor whose dtype differs from the
    /// module's is copied (converted) instead.
    pub assign: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            strict: true,
            assign: false,
        }
    }
}

/// What a non-strict load skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Keys the module has and the dict lacked (left as they were).
    pub missing: Vec<String>,
    /// Keys the dict had and the module lacks (ignored).
    pub unexpected: Vec<String>,
}

/// A module tensor a state-dict key names.
struct Target {
    key: String,
    slot: TensorSlot,
    parameter: bool,
}

fn targets(module: &(impl Module + ?Sized)) -> Vec<Target> {
    let mut out = Vec::new();
    module.core().visit(&mut |prefix, core| {
        let join = |n: &str| crate::module::join_path(prefix, n);
        for (n, _) in core.own_parameters() {
            if let Some(slot) = core.parameter_slot(&n) {
                out.push(Target {
                    key: join(&n),
                    slot,
                    parameter: true,
                });
            }
        }
        for (n, _, persistent) in core.own_buffers() {
            if let (true, Some(slot)) = (persistent, core.buffer_slot(&n)) {
                out.push(Target {
                    key: join(&n),
                    slot,
                    parameter: false,
                });
            }
        }
    });
    out
}

fn describe(t: &Tensor) -> String {
    format!("{:?} {}", t.shape().as_slice(), t.dtype().name())
}

/// The dtype families that convert into each other on load: floating, integer, bool.
fn family(d: DType) -> u8 {
    if d.is_floating() {
        0
    } else if d == DType::Bool {
        2
    } else {
        1
    }
}

/// State dicts for every module: taking, loading, saving, reading.
pub trait StateDictExt: Module {
    /// The parameters and persistent buffers under PyTorch's keys, module by module (each
    /// module's parameters, then its buffers, then its children's). The tensors are detached
    /// handles sharing the module's memory.
    fn state_dict(&self) -> StateDict {
        targets(self)
            .into_iter()
            .map(|t| {
                let v = t.slot.get();
                let v = v.detach().unwrap_or(v);
                (t.key, v)
            })
            .collect()
    }

    /// Loads `dict` into the module. Every problem is found before anything is written:
    /// shapes or dtype kinds (floating, integer, bool) that do not fit are always errors,
    /// missing and unexpected keys are errors when `strict` (a tied parameter, registered
    /// under several names, needs only one of them; given under several, the last in the
    /// module's order is the one kept); the error lists them all and
    /// the module is unchanged. Values are copied into the module's tensors under
    /// `no_grad` (converting dtype within a kind), or with `assign` the tensors themselves
    /// are taken.
    fn load_state_dict(
        &self,
        dict: &StateDict,
        options: LoadOptions,
    ) -> Result<LoadReport, StateError> {
        let targets = targets(self);
        let mut problems = LoadProblems::default();
        for t in &targets {
            let Some(src) = dict.get(&t.key) else {
                // A tied parameter (one slot under several names) is loaded through any of
                // its names.
                let tied_given = targets
                    .iter()
                    .any(|o| o.slot.is_same(&t.slot) && dict.get(&o.key).is_some());
                if !tied_given {
                    problems.missing.push(t.key.clone());
                }
                continue;
            };
            let dst = t.slot.get();
            if src.shape() != dst.shape() || family(src.dtype()) != family(dst.dtype()) {
                problems.mismatched.push(Mismatch {
                    key: t.key.clone(),
                    expected: describe(&dst),
                    found: describe(src),
                });
            }
        }
        for (k, _) in dict.iter() {
            if !targets.iter().any(|t| t.key == k) {
                problems.unexpected.push(k.to_owned());
            }
        }
        let strict_failure =
            options.strict && !(problems.missing.is_empty() && problems.unexpected.is_empty());
        if strict_failure || !problems.mismatched.is_empty() {
            return Err(StateError::Mismatch(problems));
        }
        let _no_grad = GradModeGuard::no_grad();
        // Converted copies first, so an allocation failure changes nothing.
        let mut planned = Vec::new();
        for t in &targets {
            let Some(src) = dict.get(&t.key) else {
                continue;
            };
            let dst = t.slot.get();
            let take = options.assign && src.dtype() == dst.dtype() && src.device() == dst.device();
            let value = if take {
                src.detach()?
            } else {
                src.to_device_dtype(dst.device(), dst.dtype())?
            };
            planned.push((t, dst, value, take));
        }
        for (t, dst, value, take) in planned {
            if take {
                let value = if t.parameter {
                    value.mark_category(Category::Parameter);
                    if value.dtype().is_floating() {
                        value.requires_grad_(dst.requires_grad())?
                    } else {
                        value
                    }
                } else {
                    value.mark_category(dst.memory_category());
                    value
                };
                t.slot.set(value);
            } else {
                dst.copy_(&value)?;
            }
        }
        Ok(LoadReport {
            missing: problems.missing,
            unexpected: problems.unexpected,
        })
    }

    /// Saves [`state_dict`](StateDictExt::state_dict) to `path` as safetensors, atomically.
    fn save(&self, path: impl AsRef<Path>) -> Result<(), StateError>
    where
        Self: Sized,
    {
        self.state_dict().save(path)
    }

    /// Reads the safetensors file at `path` (memory-mapped, see [`StateDict::load`]) and
    /// loads it with `options`.
    fn load(&self, path: impl AsRef<Path>, options: LoadOptions) -> Result<LoadReport, StateError>
    where
        Self: Sized,
    {
        let dict = StateDict::load(path)?;
        self.load_state_dict(&dict, options)
    }
}

impl<M: Module + ?Sized> StateDictExt for M {}
