//! `ZeroRedundancyOptimizer`: optimizer state sharded over the ranks (ZeRO stage 1). Each
//! rank keeps the state of its own share of the parameters, steps only those, and
//! broadcasts them to the others.

use std::sync::Arc;

use serde_json::{json, Map, Value};
use strata_core::{Error, Result, Tensor};
use strata_nn::optim::Optimizer;
use strata_nn::state::StateDict;

use crate::group::ProcessGroup;

/// PyTorch's partition: parameters sorted by element count, largest first (ties keep their
/// order), each given to the rank with the fewest elements so far (the lowest such rank).
/// Returns the owning rank of each parameter, in the order given.
pub fn partition(numels: &[usize], world_size: usize) -> Vec<usize> {
    let world_size = world_size.max(1);
    let mut order: Vec<usize> = (0..numels.len()).collect();
    order.sort_by(|&a, &b| numels[b].cmp(&numels[a]));
    let mut load = vec![0usize; world_size];
    let mut owner = vec![0; numels.len()];
    for i in order {
        let r = (0..world_size).min_by_key(|&r| (load[r], r)).unwrap_or(0);
        owner[i] = r;
        load[r] = load[r].saturating_add(numels[i]);
    }
    owner
}

/// An optimizer whose state is split over the ranks of a process group (PyTorch's
/// `ZeroRedundancyOptimizer`, one parameter group). Use it with
/// [`DistributedDataParallel`](crate::DistributedDataParallel): every rank has the averaged
/// gradients, [`step`](Self::step) updates this rank's parameters with its optimizer and
/// broadcasts each parameter from its owner, so the replicas stay equal while each rank
/// holds only its share of the state (with Adam, two tensors per owned parameter).
pub struct ZeroRedundancyOptimizer {
    group: Arc<dyn ProcessGroup>,
    params: Vec<Tensor>,
    owner: Vec<usize>,
    /// Each parameter's index in its owner's local optimizer.
    local_index: Vec<usize>,
    local: Optimizer,
}

impl ZeroRedundancyOptimizer {
    /// Partitions `params` over the group's ranks and builds this rank's optimizer over its
    /// share with `build` (for example `|p| Optimizer::adam(p, Adam::default())`).
    ///
    /// # Errors
    ///
    /// What `build` returns, for example for a rank that owns no parameter when the
    /// optimizer refuses an empty list (use fewer ranks than parameters).
    pub fn new(
        params: Vec<Tensor>,
        group: Arc<dyn ProcessGroup>,
        build: impl FnOnce(Vec<Tensor>) -> Result<Optimizer>,
    ) -> Result<Self> {
        let numels: Vec<usize> = params.iter().map(Tensor::numel).collect();
        let owner = partition(&numels, group.world_size());
        let mut counts = vec![0usize; group.world_size().max(1)];
        let local_index = owner
            .iter()
            .map(|&r| {
                counts[r] += 1;
                counts[r] - 1
            })
            .collect();
        let mine = params
            .iter()
            .zip(&owner)
            .filter(|(_, &r)| r == group.rank())
            .map(|(p, _)| p.clone())
            .collect();
        let local = build(mine)?;
        Ok(ZeroRedundancyOptimizer {
            group,
            params,
            owner,
            local_index,
            local,
        })
    }

    /// The rank owning each parameter, in the order given to [`new`](Self::new).
    pub fn owners(&self) -> &[usize] {
        &self.owner
    }

    /// This rank's optimizer, over its share of the parameters (for learning-rate changes).
    pub fn local_optimizer(&mut self) -> &mut Optimizer {
        &mut self.local
    }

    /// Bytes of this rank's optimizer state.
    pub fn state_bytes(&self) -> usize {
        self.local.state_bytes()
    }

    /// Steps this rank's parameters, then broadcasts every parameter from its owner (all
    /// started, then waited for). Every rank must call it.
    pub fn step(&mut self) -> Result<()> {
        self.local.step()?;
        let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
        let works = self
            .params
            .iter()
            .zip(&self.owner)
            .map(|(p, &r)| self.group.broadcast_async(p, r))
            .collect::<Result<Vec<_>>>()?;
        for w in works {
            w.wait()?;
        }
        Ok(())
    }

    /// Clears the gradients of every parameter, not only this rank's (`set_to_none` as for
    /// [`Optimizer::zero_grad`]).
    pub fn zero_grad(&mut self, set_to_none: bool) -> Result<()> {
        for p in &self.params {
            p.zero_grad(set_to_none)?;
        }
        Ok(())
    }

    /// The whole optimizer's state dict, gathered from every rank's share: on rank 0 the
    /// dict a one-process optimizer over all the parameters would have (PyTorch's
    /// `consolidate_state_dict(to=0)` then `state_dict()`), `None` on the others. Every rank
    /// must call it.
    pub fn consolidated_state_dict(&self) -> Result<Option<StateDict>> {
        let rank = self.group.rank();
        let local = self.local.state_dict();
        let names = self.local.rule().state_names();
        let mut full = StateDict::new();
        let mut steps = Map::new();
        for (i, p) in self.params.iter().enumerate() {
            let (r, j) = (self.owner[i], self.local_index[i]);
            let header = match (rank == r).then(|| self.local.step_count(j)).flatten() {
                Some(step) => Tensor::from_vec(vec![1i64, step as i64], &[2])?,
                None => Tensor::zeros(&[2], strata_core::DType::I64)?,
            };
            self.group.broadcast(&header, r)?;
            let header = header.to_vec::<i64>()?;
            if header[0] == 0 {
                continue;
            }
            steps.insert(i.to_string(), json!({ "step": header[1] }));
            for name in names {
                let t = match local.get(&format!("state.{j}.{name}")) {
                    Some(t) if rank == r => t.contiguous()?,
                    _ => Tensor::zeros(&p.shape(), p.dtype())?,
                };
                self.group.broadcast(&t, r)?;
                if rank == 0 {
                    full.insert(format!("state.{i}.{name}"), t);
                }
            }
        }
        if rank != 0 {
            return Ok(None);
        }
        let groups = self.renumbered_groups(&local, 0..self.params.len())?;
        full.set_metadata("optimizer", local.metadata("optimizer").unwrap_or(""));
        full.set_metadata("param_groups", groups);
        full.set_metadata("state", Value::Object(steps).to_string());
        Ok(Some(full))
    }

    /// Loads a whole optimizer's state dict (from [`consolidated_state_dict`], or from a
    /// one-process optimizer over the same parameters) into this rank's share: each rank
    /// takes the entries of the parameters it owns.
    ///
    /// [`consolidated_state_dict`]: Self::consolidated_state_dict
    pub fn load_state_dict(&mut self, full: &StateDict) -> Result<()> {
        let rank = self.group.rank();
        let steps: Map<String, Value> = full
            .metadata("state")
            .and_then(|s| serde_json::from_str(s).ok())
            .ok_or_else(|| bad("the state dict has no readable \"state\" metadata"))?;
        let mut local = StateDict::new();
        let mut local_steps = Map::new();
        for (i, &r) in self.owner.iter().enumerate() {
            if r != rank {
                continue;
            }
            let j = self.local_index[i];
            if let Some(s) = steps.get(&i.to_string()) {
                local_steps.insert(j.to_string(), s.clone());
            }
            for name in self.local.rule().state_names() {
                if let Some(t) = full.get(&format!("state.{i}.{name}")) {
                    local.insert(format!("state.{j}.{name}"), t.clone());
                }
            }
        }
        let owned = self.owner.iter().filter(|&&r| r == rank).count();
        local.set_metadata("optimizer", full.metadata("optimizer").unwrap_or(""));
        local.set_metadata("param_groups", self.renumbered_groups(full, 0..owned)?);
        local.set_metadata("state", Value::Object(local_steps).to_string());
        self.local.load_state_dict(&local)
    }

    /// `dict`'s one parameter group with its `params` replaced by `indices`.
    fn renumbered_groups(
        &self,
        dict: &StateDict,
        indices: std::ops::Range<usize>,
    ) -> Result<String> {
        let groups: Vec<Value> = dict
            .metadata("param_groups")
            .and_then(|s| serde_json::from_str(s).ok())
            .ok_or_else(|| bad("the state dict has no readable \"param_groups\" metadata"))?;
        let [group] = <[Value; 1]>::try_from(groups).map_err(|g| {
            bad(format!(
                "ZeroRedundancyOptimizer has one parameter group, the state dict {}",
                g.len()
            ))
        })?;
        let mut group = group;
        if let Value::Object(g) = &mut group {
            g.insert("params".into(), json!(indices.collect::<Vec<_>>()));
        }
        Ok(Value::Array(vec![group]).to_string())
    }
}

fn bad(message: impl Into<String>) -> Error {
    Error::argument(
        "ZeroRedundancyOptimizer",
        message,
        Some("use a state dict of an optimizer of the same kind over the same parameters"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn largest_first_to_the_least_loaded_rank() {
        // The mlp: 0.weight 802816, 0.bias 1024, 2.weight 1048576, 2.bias 1024,
        // 4.weight 10240, 4.bias 10.
        let mlp = [802_816, 1024, 1_048_576, 1024, 10_240, 10];
        assert_eq!(partition(&mlp, 2), vec![1, 1, 0, 1, 1, 1]);
        let rank0: usize = mlp
            .iter()
            .zip(partition(&mlp, 2))
            .filter(|(_, r)| *r == 0)
            .map(|(n, _)| n)
            .sum();
        let share = rank0 as f64 / mlp.iter().sum::<usize>() as f64;
        assert!((share - 0.5626).abs() < 1e-3, "{share}");
        // Ties keep their order and go to the lowest rank.
        assert_eq!(partition(&[5, 5, 5, 5], 2), vec![0, 1, 0, 1]);
        assert_eq!(partition(&[3], 4), vec![0]);
    }
}
