//! Selective activation checkpointing (PyTorch's `create_selective_checkpoint_contexts`): a
//! policy names the ops whose outputs a checkpointed region's forward keeps; recomputing the
//! region for backward reuses those outputs instead of running the ops again, and runs every
//! other op anew. The policy is consulted by each op that records a node, by its own name and
//! by the names of the composite ops it runs inside (`linear`, `scaled_dot_product_attention`).

use std::any::Any;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::storage::Role;
use crate::{Error, Result, Tensor};

/// What selective checkpointing does with one op's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckpointPolicy {
    /// The forward keeps the outputs; the recomputation reuses them without running the op.
    MustSave,
    /// The outputs are dropped as in full checkpointing; the recomputation runs the op again.
    PreferRecompute,
}

type Rule = dyn Fn(&str) -> CheckpointPolicy + Send + Sync;

/// A selective checkpointing policy: for an op name, whether the region keeps its outputs.
///
/// An op that records a node is saved when the rule says [`CheckpointPolicy::MustSave`] for
/// its own name or for any composite op it runs inside: `linear` covers the product (and the
/// bias's addition) it runs, `scaled_dot_product_attention` the attention kernel it picks.
///
/// ```
/// use strata_core::autograd::{checkpoint_selective, CheckpointPolicy, SelectivePolicy};
/// use strata_core::Tensor;
/// // Keep the products, recompute the rest.
/// let policy = SelectivePolicy::saving(&["matmul"]);
/// assert_eq!(policy.policy_for("matmul", &[]), CheckpointPolicy::MustSave);
/// assert_eq!(policy.policy_for("gelu", &[]), CheckpointPolicy::PreferRecompute);
/// let w = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?.requires_grad_(true)?;
/// let x = Tensor::from_vec(vec![0.5f32, -1.0], &[1, 2])?;
/// let out = checkpoint_selective(
///     |t: &[Tensor]| Ok(vec![t[1].matmul(&t[0])?.gelu()?]),
///     &[w.clone(), x],
///     &policy,
/// )?;
/// out[0].sum(None, false)?.backward()?;
/// assert!(w.grad().is_some());
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Clone)]
pub struct SelectivePolicy {
    rule: Arc<Rule>,
}

impl fmt::Debug for SelectivePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SelectivePolicy(..)")
    }
}

impl SelectivePolicy {
    /// Saves the outputs of the ops named in `names` (and of the ops run inside composites
    /// named there); every other op is recomputed. PyTorch's
    /// `create_selective_checkpoint_contexts([ops...])`.
    pub fn saving(names: &[&str]) -> SelectivePolicy {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        SelectivePolicy::from_fn(move |op| {
            if names.iter().any(|n| n == op) {
                CheckpointPolicy::MustSave
            } else {
                CheckpointPolicy::PreferRecompute
            }
        })
    }

    /// A policy decided by `rule` for each op name (PyTorch's policy function).
    pub fn from_fn(
        rule: impl Fn(&str) -> CheckpointPolicy + Send + Sync + 'static,
    ) -> SelectivePolicy {
        SelectivePolicy {
            rule: Arc::new(rule),
        }
    }

    /// The policy for op `op` running inside the composite ops `within`: `MustSave` when
    /// the rule says so for `op` or for any of them.
    pub fn policy_for(&self, op: &str, within: &[&str]) -> CheckpointPolicy {
        let saves = |name: &str| (self.rule)(name) == CheckpointPolicy::MustSave;
        if saves(op) || within.iter().any(|c| saves(c)) {
            CheckpointPolicy::MustSave
        } else {
            CheckpointPolicy::PreferRecompute
        }
    }
}

/// An op's outputs as selective checkpointing keeps them: tensors as aliases without
/// history, so the kept outputs hold no graph (and no graph holds the region that keeps
/// them); plain values (shapes an op hands its backward) as copies.
pub(crate) trait KeptOutputs: Sized + Send + 'static {
    /// The outputs with every tensor an alias of its memory without autograd history.
    fn kept(&self) -> Self;
    /// Handles of every tensor among the outputs, in order.
    fn tensors(&self, into: &mut Vec<Tensor>);
}

impl KeptOutputs for Tensor {
    fn kept(&self) -> Self {
        self.detached_alias()
    }
    fn tensors(&self, into: &mut Vec<Tensor>) {
        into.push(self.clone());
    }
}

impl<T: KeptOutputs> KeptOutputs for Option<T> {
    fn kept(&self) -> Self {
        self.as_ref().map(T::kept)
    }
    fn tensors(&self, into: &mut Vec<Tensor>) {
        if let Some(t) = self {
            t.tensors(into);
        }
    }
}

impl<T: KeptOutputs> KeptOutputs for Vec<T> {
    fn kept(&self) -> Self {
        self.iter().map(T::kept).collect()
    }
    fn tensors(&self, into: &mut Vec<Tensor>) {
        self.iter().for_each(|t| t.tensors(into));
    }
}

impl<T: KeptOutputs, const N: usize> KeptOutputs for [T; N] {
    fn kept(&self) -> Self {
        std::array::from_fn(|i| self[i].kept())
    }
    fn tensors(&self, into: &mut Vec<Tensor>) {
        self.iter().for_each(|t| t.tensors(into));
    }
}

impl<A: KeptOutputs, B: KeptOutputs> KeptOutputs for (A, B) {
    fn kept(&self) -> Self {
        (self.0.kept(), self.1.kept())
    }
    fn tensors(&self, into: &mut Vec<Tensor>) {
        self.0.tensors(into);
        self.1.tensors(into);
    }
}

impl<A: KeptOutputs, B: KeptOutputs, C: KeptOutputs> KeptOutputs for (A, B, C) {
    fn kept(&self) -> Self {
        (self.0.kept(), self.1.kept(), self.2.kept())
    }
    fn tensors(&self, into: &mut Vec<Tensor>) {
        self.0.tensors(into);
        self.1.tensors(into);
        self.2.tensors(into);
    }
}

/// [`KeptOutputs`] for plain values an op returns beside its tensors: kept as copies.
macro_rules! kept_as_copies {
    ($($t:ty),* $(,)?) => {$(
        impl $crate::autograd::selective::KeptOutputs for $t {
            fn kept(&self) -> Self {
                self.clone()
            }
            fn tensors(&self, _: &mut Vec<$crate::Tensor>) {}
        }
    )*};
}
pub(crate) use kept_as_copies;

kept_as_copies!(f64);

/// Handles of `out`'s tensors.
fn tensors_of(out: &impl KeptOutputs) -> Vec<Tensor> {
    let mut v = Vec::new();
    out.tensors(&mut v);
    v
}

/// Each tensor's version.
fn versions(tensors: &[Tensor]) -> Vec<u32> {
    tensors.iter().map(Tensor::version).collect()
}

/// One kept op's outputs. Their memory counts as activations while they are kept.
struct Kept {
    op: &'static str,
    outputs: Box<dyn Any + Send>,
    /// The outputs' tensors, holding the role of saved memory.
    held: Vec<Tensor>,
    /// Their versions when kept.
    versions: Vec<u32>,
}

impl Kept {
    fn new<T: KeptOutputs>(op: &'static str, out: &T) -> Kept {
        let kept = out.kept();
        let held = tensors_of(&kept);
        for t in &held {
            t.with_body(|b| b.storage.take_role(Role::Saved, true));
        }
        Kept {
            op,
            versions: versions(&held),
            outputs: Box::new(kept),
            held,
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        for t in self.held.drain(..) {
            t.release_role(Role::Saved);
        }
    }
}

/// The outputs a region's forward kept, in the order its ops ran.
#[derive(Default)]
pub(crate) struct KeptStore {
    queue: Mutex<VecDeque<Kept>>,
    /// Whether a recomputation has taken the outputs (they serve one backward only).
    used: Mutex<bool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the active region is running its forward or its recomputation.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Forward,
    Recompute,
}

struct Active {
    policy: SelectivePolicy,
    store: Arc<KeptStore>,
    phase: Phase,
    /// The composite ops running now, outermost first.
    within: Vec<&'static str>,
}

thread_local! {
    static ACTIVE: RefCell<Vec<Active>> = const { RefCell::new(Vec::new()) };
}

/// Restores the stack of active regions when dropped (also on panic).
struct Pushed;

impl Drop for Pushed {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.borrow_mut().pop());
    }
}

fn with_active<R>(
    policy: &SelectivePolicy,
    store: &Arc<KeptStore>,
    phase: Phase,
    f: impl FnOnce() -> R,
) -> R {
    ACTIVE.with(|a| {
        a.borrow_mut().push(Active {
            policy: policy.clone(),
            store: store.clone(),
            phase,
            within: Vec::new(),
        })
    });
    let _pushed = Pushed;
    f()
}

/// Runs a region's forward under `policy`, keeping the outputs of its saved ops in `store`.
pub(crate) fn forward<R>(
    policy: &SelectivePolicy,
    store: &Arc<KeptStore>,
    f: impl FnOnce() -> R,
) -> R {
    with_active(policy, store, Phase::Forward, f)
}

/// Runs a region's recomputation under `policy`, its saved ops returning what `store`
/// kept; an `Err` if the outputs were used before (they serve one backward only) or if the
/// recomputation did not reuse every one of them.
pub(crate) fn recompute<R>(
    policy: &SelectivePolicy,
    store: &Arc<KeptStore>,
    f: impl FnOnce() -> Result<R>,
) -> Result<R> {
    {
        let mut used = lock(&store.used);
        if *used {
            return Err(Error::Autograd {
                message: "selective checkpointing: a region's kept outputs serve one backward \
                          only, and a second backward reached it. Hint: use full checkpointing \
                          (or none) for a graph you run backward through more than once"
                    .into(),
            });
        }
        *used = true;
    }
    let out = with_active(policy, store, Phase::Recompute, f)?;
    let left = lock(&store.queue).len();
    if left != 0 {
        return Err(Error::Autograd {
            message: format!(
                "selective checkpointing: recomputing the region reused fewer saved outputs \
                 than its forward kept ({left} left). Hint: a checkpointed function must do the \
                 same ops every time it runs"
            ),
        });
    }
    Ok(out)
}

/// Runs op `op`'s forward `f` (for an op that records a node) as the innermost active
/// region's policy says: in its forward, keeps the outputs of a saved op; in its
/// recomputation, returns them instead of running `f`. Outside any region, just `f`.
pub(crate) fn run_op<T: KeptOutputs>(op: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let Some((phase, store)) = ACTIVE.with(|a| {
        let a = a.borrow();
        let top = a.last()?;
        (top.policy.policy_for(op, &top.within) == CheckpointPolicy::MustSave)
            .then(|| (top.phase, top.store.clone()))
    }) else {
        return f();
    };
    match phase {
        Phase::Forward => {
            let out = f()?;
            lock(&store.queue).push_back(Kept::new(op, &out));
            Ok(out)
        }
        Phase::Recompute => reuse(op, &store),
    }
}

/// The next kept outputs, which must be `op`'s, unchanged since the forward kept them.
fn reuse<T: KeptOutputs>(op: &'static str, store: &KeptStore) -> Result<T> {
    let mismatch = |what: String| Error::Autograd {
        message: format!(
            "selective checkpointing: recomputing the region {what}. Hint: a checkpointed \
             function must do the same ops every time it runs"
        ),
    };
    let kept = lock(&store.queue)
        .pop_front()
        .ok_or_else(|| mismatch(format!("ran `{op}` more often than its forward did")))?;
    if kept.op != op {
        return Err(mismatch(format!(
            "ran `{op}` where its forward ran `{}`",
            kept.op
        )));
    }
    if versions(&kept.held) != kept.versions {
        return Err(Error::Autograd {
            message: format!(
                "selective checkpointing: an output of `{op}` that the region kept was \
                 modified in place after the forward kept it. Hint: do not modify a saved op's \
                 output in place inside a checkpointed region, or do not save that op"
            ),
        });
    }
    let mut kept = kept;
    let outputs = std::mem::replace(&mut kept.outputs, Box::new(()));
    let out = outputs
        .downcast::<T>()
        .map_err(|_| mismatch(format!("gave `{op}` other outputs than its forward did")))?;
    // The outputs now belong to the recomputation, whose nodes save what they need.
    drop(kept);
    Ok(*out)
}

/// Runs composite op `op`'s body `f` with `op` among the composites the innermost active
/// region's policy sees (nothing to do outside any region).
pub(crate) fn within_composite<R>(op: &'static str, f: impl FnOnce() -> R) -> R {
    let entered = ACTIVE.with(|a| match a.borrow_mut().last_mut() {
        Some(top) => {
            top.within.push(op);
            true
        }
        None => false,
    });
    if !entered {
        return f();
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            ACTIVE.with(|a| {
                if let Some(top) = a.borrow_mut().last_mut() {
                    top.within.pop();
                }
            });
        }
    }
    let _leave = Leave;
    f()
}
