//! The reducer: counts the gradients of each bucket as backward produces them, starts the
//! bucket's all-reduce as soon as it is complete (buckets in order, so every rank issues the
//! same collectives in the same order), and at the end of backward waits for them all.

use std::sync::{Arc, Mutex, MutexGuard};

use strata_core::{Category, Error, Result, Tensor};

use crate::group::{ProcessGroup, ReduceOp};
use crate::work::Work;

/// One bucket: a flat gradient buffer and the views of it each parameter's gradient is.
pub(crate) struct Bucket {
    /// The flat buffer the all-reduce runs on.
    pub flat: Tensor,
    /// Indices of the bucket's parameters (registration order).
    pub params: Vec<usize>,
    /// `views[k]`: parameter `params[k]`'s gradient, a view of `flat` of its shape.
    pub views: Vec<Tensor>,
    pending: usize,
    work: Option<Work>,
}

struct State {
    buckets: Vec<Bucket>,
    /// For each parameter: its bucket and its place in it.
    place: Vec<(usize, usize)>,
    ready: Vec<bool>,
    next_to_launch: usize,
    /// Some gradient of this backward has been marked ready and the buckets are not all
    /// reduced yet.
    in_backward: bool,
    sync: bool,
    stats: CommunicationStats,
}

/// What a `DistributedDataParallel`'s gradient averaging has cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CommunicationStats {
    /// Synchronised backwards (each averaged every bucket once).
    pub backwards: u64,
    /// Seconds the buckets' all-reduces ran, summed.
    pub allreduce_seconds: f64,
    /// Seconds backward's end waited for them: the part not hidden behind the rest of
    /// backward.
    pub waited_seconds: f64,
}

impl CommunicationStats {
    /// What happened after `before` (an earlier reading of the same wrapper).
    pub fn since(&self, before: &CommunicationStats) -> CommunicationStats {
        CommunicationStats {
            backwards: self.backwards.saturating_sub(before.backwards),
            allreduce_seconds: self.allreduce_seconds - before.allreduce_seconds,
            waited_seconds: self.waited_seconds - before.waited_seconds,
        }
    }

    /// The share of the all-reduce time hidden behind backward's own work (0 to 1).
    pub fn hidden_share(&self) -> f64 {
        if self.allreduce_seconds <= 0.0 {
            return 0.0;
        }
        (1.0 - self.waited_seconds / self.allreduce_seconds).clamp(0.0, 1.0)
    }
}

/// The reducer of one `DistributedDataParallel`.
pub(crate) struct Reducer {
    group: Arc<dyn ProcessGroup>,
    names: Vec<String>,
    params: Vec<Tensor>,
    as_view: bool,
    state: Mutex<State>,
}

impl Reducer {
    /// Buckets `params` (named `names`) as `assignment` says, each bucket one buffer from the
    /// allocator, counted as gradient memory.
    pub(crate) fn new(
        group: Arc<dyn ProcessGroup>,
        names: Vec<String>,
        params: Vec<Tensor>,
        assignment: Vec<Vec<usize>>,
        as_view: bool,
    ) -> Result<Reducer> {
        let mut place = vec![(0, 0); params.len()];
        let mut buckets = Vec::with_capacity(assignment.len());
        for (b, members) in assignment.into_iter().enumerate() {
            let total: usize = members.iter().map(|&i| params[i].numel()).sum();
            let first = &params[members[0]];
            let flat = Tensor::on(first.device()).zeros(&[total], first.dtype())?;
            flat.mark_category(Category::Gradient);
            let mut views = Vec::with_capacity(members.len());
            let mut offset = 0;
            for (k, &i) in members.iter().enumerate() {
                let n = params[i].numel();
                views.push(flat.narrow(0, offset, n)?.view(&params[i].shape())?);
                offset += n;
                place[i] = (b, k);
            }
            buckets.push(Bucket {
                flat,
                pending: members.len(),
                params: members,
                views,
                work: None,
            });
        }
        let n = params.len();
        Ok(Reducer {
            group,
            names,
            params,
            as_view,
            state: Mutex::new(State {
                buckets,
                place,
                ready: vec![false; n],
                next_to_launch: 0,
                in_backward: false,
                sync: true,
                stats: CommunicationStats::default(),
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of all the buckets.
    pub(crate) fn bucket_bytes(&self) -> usize {
        self.state().buckets.iter().map(|b| b.flat.nbytes()).sum()
    }

    /// Each bucket's parameter names, in bucket order.
    pub(crate) fn bucket_names(&self) -> Vec<Vec<String>> {
        self.state()
            .buckets
            .iter()
            .map(|b| b.params.iter().map(|&i| self.names[i].clone()).collect())
            .collect()
    }

    /// The communication so far.
    pub(crate) fn stats(&self) -> CommunicationStats {
        self.state().stats
    }

    /// Whether gradients are averaged at the end of backward (false inside `no_sync`);
    /// returns the previous setting.
    pub(crate) fn set_sync(&self, sync: bool) -> bool {
        std::mem::replace(&mut self.state().sync, sync)
    }

    /// Before a forward: fails if the last backward left buckets unreduced (a parameter got
    /// no gradient), and, with bucket views, makes every `.grad` its view again (zeroed where
    /// the gradient had been dropped, copied where it had been replaced).
    pub(crate) fn prepare_for_forward(&self) -> Result<()> {
        let st = self.state();
        if st.in_backward {
            let missing: Vec<&str> = (0..self.params.len())
                .filter(|&i| !st.ready[i])
                .map(|i| self.names[i].as_str())
                .collect();
            return Err(Error::Autograd {
                message: format!(
                    "DistributedDataParallel: the last backward produced no gradient for {} \
                     ({}), so their buckets were never averaged and the ranks may now hold \
                     different parameters. Every parameter must contribute to the loss of \
                     every step (find_unused_parameters is not supported); leave the unused \
                     ones out of the module, or set requires_grad_(false) on them",
                    if missing.len() == 1 {
                        "parameter"
                    } else {
                        "parameters"
                    },
                    missing.join(", ")
                ),
            });
        }
        if self.as_view {
            for b in &st.buckets {
                self.install_views(b)?;
            }
        }
        Ok(())
    }

    fn is_view(grad: &Tensor, view: &Tensor) -> bool {
        grad.storage_id() == view.storage_id() && grad.data_ptr() == view.data_ptr()
    }

    fn install_views(&self, b: &Bucket) -> Result<()> {
        let grads: Vec<Option<Tensor>> = b.params.iter().map(|&i| self.params[i].grad()).collect();
        let all_dropped = grads.iter().all(Option::is_none);
        let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
        if all_dropped {
            b.flat.zero_()?;
        }
        for ((&i, view), grad) in b.params.iter().zip(&b.views).zip(grads) {
            match grad {
                Some(g) if Self::is_view(&g, view) => continue,
                Some(g) => {
                    view.copy_(&g)?;
                }
                None if !all_dropped => {
                    view.zero_()?;
                }
                None => {}
            }
            self.params[i].set_grad(Some(view.clone()))?;
        }
        Ok(())
    }

    /// Called when parameter `index`'s gradient is complete for this backward.
    pub(crate) fn mark_ready(&self, index: usize) -> Result<()> {
        let mut st = self.state();
        if !st.sync {
            return Ok(());
        }
        if st.ready[index] {
            return Err(Error::Autograd {
                message: format!(
                    "DistributedDataParallel: parameter {} received a gradient twice before \
                     the buckets were averaged (a second backward through the same forward, \
                     or a parameter used by two forwards of one step). Run one backward per \
                     forward, or accumulate inside no_sync()",
                    self.names[index]
                ),
            });
        }
        st.ready[index] = true;
        st.in_backward = true;
        let (b, k) = st.place[index];
        self.gather_gradient(&st.buckets[b], index, k)?;
        st.buckets[b].pending -= 1;
        while st.next_to_launch < st.buckets.len() && st.buckets[st.next_to_launch].pending == 0 {
            let next = st.next_to_launch;
            let work = self
                .group
                .all_reduce_async(&st.buckets[next].flat, ReduceOp::Average)?;
            st.buckets[next].work = Some(work);
            st.next_to_launch += 1;
        }
        if st.next_to_launch == st.buckets.len() {
            self.finish(&mut st)?;
        }
        Ok(())
    }

    /// Puts parameter `index`'s gradient into its place in bucket `bucket`: nothing to do
    /// when the gradient is that place (a bucket view), else a copy.
    fn gather_gradient(&self, bucket: &Bucket, index: usize, k: usize) -> Result<()> {
        let view = &bucket.views[k];
        match self.params[index].grad() {
            Some(g) if Self::is_view(&g, view) => Ok(()),
            Some(g) => {
                let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
                view.copy_(&g)?;
                if self.as_view {
                    self.params[index].set_grad(Some(view.clone()))?;
                }
                Ok(())
            }
            None => Err(Error::Autograd {
                message: format!(
                    "DistributedDataParallel: parameter {} was marked ready without a gradient",
                    self.names[index]
                ),
            }),
        }
    }

    /// Waits for every bucket's all-reduce, copies the averages back into gradients that are
    /// not bucket views, and resets for the next backward.
    fn finish(&self, st: &mut State) -> Result<()> {
        let mut first_error = None;
        let waiting = std::time::Instant::now();
        let mut busy = 0.0;
        for b in &mut st.buckets {
            if let Some(w) = b.work.take() {
                if let Err(e) = w.wait() {
                    first_error.get_or_insert(e);
                }
                busy += w.elapsed().map_or(0.0, |d| d.as_secs_f64());
            }
            b.pending = b.params.len();
        }
        st.stats.waited_seconds += waiting.elapsed().as_secs_f64();
        st.stats.allreduce_seconds += busy;
        st.stats.backwards += 1;
        st.ready.iter_mut().for_each(|r| *r = false);
        st.next_to_launch = 0;
        st.in_backward = false;
        if let Some(e) = first_error {
            return Err(e);
        }
        for b in &st.buckets {
            for (&i, view) in b.params.iter().zip(&b.views) {
                if let Some(g) = self.params[i].grad() {
                    if !Self::is_view(&g, view) {
                        let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
                        g.copy_(view)?;
                    }
                }
            }
        }
        Ok(())
    }
}
