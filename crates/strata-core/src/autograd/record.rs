//! How ops add themselves to the graph: [`Recorder`] for out-of-place ops, [`InplaceRecorder`]
//! for in-place ones (with PyTorch's checks, and the history rewrite of a view's base).

use std::sync::Arc;

use super::saved::SavedTensor;
use super::view::ViewGrad;
use crate::layout::Layout;
use crate::mode::is_grad_enabled;
use crate::op::OpContext;
use crate::tensor::grad_meta::GradState;
use crate::tensor::graph::{BackwardFn, Edge, InputMeta, Node};
use crate::tensor::ViewCreation;
use crate::{Error, Result, Tensor};

/// The edge a gradient for `t` flows along: its `grad_fn`, its accumulator (a leaf that
/// requires grad), or none.
pub(crate) fn gradient_edge(t: &Tensor) -> Option<Edge> {
    if !t.autograd_meta().requires_grad() {
        return None;
    }
    if let Some(node) = current_grad_fn(t) {
        return Some(Edge { node });
    }
    let meta = t.autograd_meta();
    let mut st = meta.state();
    if let Some(acc) = st.accumulator.upgrade() {
        return Some(Edge { node: acc });
    }
    let acc = Node::accumulate(t.clone());
    st.accumulator = Arc::downgrade(&acc);
    Some(Edge { node: acc })
}

/// `t`'s `grad_fn`, regenerated first when `t` is a view whose base was modified in place
/// since (its history now goes through the base's).
pub(crate) fn current_grad_fn(t: &Tensor) -> Option<Arc<Node>> {
    let version = t.version();
    {
        let st = t.autograd_meta().state();
        let stale = t.view_info().is_some() && st.fn_version != version;
        if !stale || t.is_inference() {
            return st.grad_fn.clone();
        }
    }
    let info = t.view_info()?;
    let base = info.base.clone();
    let base_edge = if base.autograd_meta().requires_grad() {
        gradient_edge(&base)
    } else {
        None
    };
    let mut st = t.autograd_meta().state();
    match base_edge {
        // The base was rewritten by an in-place op: this view's history now starts there.
        Some(edge) if base.autograd_meta().state().grad_fn.is_some() => {
            let (bl, vl) = (base.layout(), t.layout());
            let node = view_node(
                "AsStridedBackward0",
                edge,
                &base,
                ViewGrad::Geometry(Box::new((bl, vl, None))),
            );
            st.grad_fn = Some(node);
            t.autograd_meta().set_requires_grad(true);
        }
        _ => {}
    }
    st.fn_version = version;
    st.grad_fn.clone()
}

fn view_node(name: &'static str, edge: Edge, input: &Tensor, grad: ViewGrad) -> Arc<Node> {
    let meta = InputMeta {
        shape: input.shape().to_vec(),
        dtype: input.dtype(),
    };
    let backward: BackwardFn = Box::new(move |g: Tensor| Ok(vec![Some(grad.apply(&g)?)]));
    Node::function(
        name,
        vec![Some(edge)],
        vec![Some(meta)],
        backward,
        false,
        None,
    )
}

fn set_grad_fn(t: &Tensor, node: Arc<Node>) {
    let meta = t.autograd_meta();
    let mut st = meta.state();
    st.grad_fn = Some(node);
    st.fn_version = t.version();
    meta.set_requires_grad(true);
}

/// Records an out-of-place op whose inputs may require grad.
pub(crate) struct Recorder {
    name: &'static str,
    edges: Vec<Option<Edge>>,
    inputs: Vec<Option<InputMeta>>,
    location: &'static std::panic::Location<'static>,
    saves: bool,
    /// Which inputs need a gradient, kept once the edges moved into a node.
    needs: Option<Vec<bool>>,
}

impl Recorder {
    /// `None` when nothing is recorded: grad mode is off or no input requires grad.
    pub fn begin(ctx: &OpContext, name: &'static str, inputs: &[&Tensor]) -> Option<Recorder> {
        if !inputs.iter().any(|t| t.autograd_meta().requires_grad()) || !is_grad_enabled() {
            return None;
        }
        let edges: Vec<Option<Edge>> = inputs.iter().map(|t| gradient_edge(t)).collect();
        let inputs = inputs
            .iter()
            .zip(&edges)
            .map(|(t, e)| {
                e.as_ref().map(|_| InputMeta {
                    shape: t.shape().to_vec(),
                    dtype: t.dtype(),
                })
            })
            .collect();
        Some(Recorder {
            name,
            edges,
            inputs,
            location: ctx.location(),
            saves: false,
            needs: None,
        })
    }

    /// Whether input `i` needs a gradient.
    pub fn needs(&self, i: usize) -> bool {
        match &self.needs {
            Some(n) => n.get(i).copied().unwrap_or(false),
            None => self.edges.get(i).is_some_and(Option::is_some),
        }
    }

    /// Saves `t` for this node's backward.
    pub fn save(&mut self, t: &Tensor) -> Result<SavedTensor> {
        self.saves = true;
        let site =
            strata_alloc::Site::new(self.location, self.name).in_scope(crate::scope::current());
        SavedTensor::save(self.name, site, t)
    }

    /// Saves `t` when `cond` holds.
    pub fn save_if(&mut self, cond: bool, t: &Tensor) -> Result<Option<SavedTensor>> {
        if cond {
            self.save(t).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Marks the backward as holding saved state that is not a tensor (PyTorch's wrapped
    /// numbers), so that running it a second time without `retain_graph` is refused.
    pub fn mark_saves(&mut self) {
        self.saves = true;
    }

    /// Makes the node and gives it to `out`.
    pub fn finish(
        self,
        out: &Tensor,
        backward: impl FnMut(Tensor) -> Result<Vec<Option<Tensor>>> + Send + 'static,
    ) {
        let node = self.into_node(Box::new(backward));
        set_grad_fn(out, node);
    }

    /// Gives `out` its node first, then lets `build` save what the backward needs (so a
    /// saved output is seen as the non-leaf it is, by saved-tensor hooks too).
    pub fn finish_with<F>(
        mut self,
        out: &Tensor,
        build: impl FnOnce(&mut Recorder) -> Result<F>,
    ) -> Result<()>
    where
        F: FnMut(Tensor) -> Result<Vec<Option<Tensor>>> + Send + 'static,
    {
        self.needs = Some(self.edges.iter().map(Option::is_some).collect());
        let node = Node::pending(
            self.name,
            std::mem::take(&mut self.edges),
            std::mem::take(&mut self.inputs),
            Some(self.location),
        );
        set_grad_fn(out, node.clone());
        match build(&mut self) {
            Ok(f) => {
                node.install(Box::new(f), self.saves);
                Ok(())
            }
            Err(e) => {
                let meta = out.autograd_meta();
                meta.state().grad_fn = None;
                meta.set_requires_grad(false);
                Err(e)
            }
        }
    }

    fn into_node(self, backward: BackwardFn) -> Arc<Node> {
        Node::function(
            self.name,
            self.edges,
            self.inputs,
            backward,
            self.saves,
            Some(self.location),
        )
    }
}

/// Checks an in-place write to `t` may happen and, when it is recorded, prepares the node.
pub(crate) struct InplaceRecorder {
    rec: Recorder,
    target: Tensor,
}

/// Refuses in-place writes PyTorch refuses; run before anything is written.
pub(crate) fn check_inplace(op: &'static str, t: &Tensor, recorded: bool) -> Result<()> {
    // A detach of an inference tensor made outside inference mode has a version counter of
    // its own, which is what PyTorch's check asks for.
    if t.is_inference() && !t.has_own_version() && !crate::mode::is_inference_mode_enabled() {
        return Err(Error::Autograd {
            message: format!(
                "{op}: an inference tensor (made inside inference_mode) cannot be modified in \
                 place outside inference mode. Hint: deep_clone() it first to get a normal tensor"
            ),
        });
    }
    if !recorded {
        return Ok(());
    }
    if let Some(info) = t.view_info() {
        match info.creation {
            ViewCreation::MultiOutput => {
                return Err(Error::Autograd {
                    message: format!(
                        "{op}: this view is one of several outputs of {} and cannot be \
                         modified in place while autograd records. Hint: use the out-of-place \
                         op, or deep_clone() the view first",
                        info.op
                    ),
                })
            }
            ViewCreation::NoGrad => {
                return Err(Error::Autograd {
                    message: format!(
                        "{op}: this view was made by {} under no_grad and is now modified in \
                         place with grad mode on, which is ambiguous. Hint: do both inside \
                         no_grad, or both outside",
                        info.op
                    ),
                })
            }
            ViewCreation::InferenceMode => {
                return Err(Error::Autograd {
                    message: format!(
                        "{op}: this view was made by {} in inference mode and is now modified \
                         in place outside it. Hint: do both inside inference_mode, or both \
                         outside",
                        info.op
                    ),
                })
            }
            ViewCreation::Plain => {}
        }
        let base = &info.base;
        if t.autograd_meta().requires_grad() && current_grad_fn(base).is_none() {
            return Err(leaf_error(op, true));
        }
    }
    if t.autograd_meta().requires_grad() && current_grad_fn(t).is_none() {
        return Err(leaf_error(op, t.view_info().is_some()));
    }
    Ok(())
}

fn leaf_error(op: &'static str, view: bool) -> Error {
    let what = if view {
        "a view of a leaf tensor that requires grad"
    } else {
        "a leaf tensor that requires grad"
    };
    Error::Autograd {
        message: format!(
            "{op}: {what} cannot be modified in place while grad mode is on (its gradient \
             would be wrong). Hint: modify it inside no_grad (as optimizers do), or use the \
             out-of-place op"
        ),
    }
}

impl InplaceRecorder {
    /// Validates the write to `target` (input 0 of the op; `others` are the rest) and returns
    /// a recorder when the op must be recorded. Call before writing anything.
    pub fn begin(
        ctx: &OpContext,
        name: &'static str,
        target: &Tensor,
        others: &[&Tensor],
    ) -> Result<Option<InplaceRecorder>> {
        let base_requires = target
            .view_info()
            .is_some_and(|v| v.base.autograd_meta().requires_grad());
        let any = target.autograd_meta().requires_grad()
            || base_requires
            || others.iter().any(|t| t.autograd_meta().requires_grad());
        let recorded = any && is_grad_enabled();
        check_inplace(ctx.op(), target, recorded)?;
        if !recorded {
            return Ok(None);
        }
        let mut all = vec![target];
        all.extend_from_slice(others);
        let mut rec = Recorder {
            name,
            edges: all.iter().map(|t| gradient_edge(t)).collect(),
            inputs: all
                .iter()
                .map(|t| {
                    Some(InputMeta {
                        shape: t.shape().to_vec(),
                        dtype: t.dtype(),
                    })
                })
                .collect(),
            location: ctx.location(),
            saves: false,
            needs: None,
        };
        // The target's old value always has a slot, even without history: a view's node
        // passes that gradient on to the base.
        if rec.edges[0].is_none() && target.view_info().is_none() {
            rec.inputs[0] = None;
        }
        Ok(Some(InplaceRecorder {
            rec,
            target: target.clone(),
        }))
    }

    /// Whether input `i` (0 = the target's old value) needs a gradient.
    pub fn needs(&self, i: usize) -> bool {
        if i == 0 {
            return self.rec.inputs[0].is_some();
        }
        self.rec.needs(i)
    }

    /// Saves `t` for the backward.
    pub fn save(&mut self, t: &Tensor) -> Result<SavedTensor> {
        self.rec.save(t)
    }

    /// Saves `t` when `cond` holds.
    pub fn save_if(&mut self, cond: bool, t: &Tensor) -> Result<Option<SavedTensor>> {
        self.rec.save_if(cond, t)
    }

    /// See [`Recorder::mark_saves`].
    pub fn mark_saves(&mut self) {
        self.rec.mark_saves();
    }

    /// Records the write (call after it happened, with the version already bumped).
    pub fn finish(
        self,
        backward: impl FnMut(Tensor) -> Result<Vec<Option<Tensor>>> + Send + 'static,
    ) {
        let target = self.target;
        let Some(info) = target.view_info().cloned() else {
            let node = self.rec.into_node(Box::new(backward));
            set_grad_fn(&target, node);
            return;
        };
        // An in-place op on a view rewrites its base's history: the base's new node runs the
        // op's backward on the view's region of the base's gradient (PyTorch's CopySlices).
        let base = info.base;
        let base_edge = gradient_edge(&base);
        let base_meta = InputMeta {
            shape: base.shape().to_vec(),
            dtype: base.dtype(),
        };
        let (base_layout, view_layout) = (base.layout(), target.layout());
        let mut fn_edges = self.rec.edges;
        fn_edges[0] = base_edge;
        let mut inputs = self.rec.inputs;
        inputs[0] = Some(base_meta);
        let mut op_backward: BackwardFn = Box::new(backward);
        let copy_slices: BackwardFn = Box::new(move |g: Tensor| {
            copy_slices_backward(&g, &base_layout, &view_layout, &mut op_backward)
        });
        let node = Node::function(
            "CopySlices",
            fn_edges,
            inputs,
            copy_slices,
            self.rec.saves,
            Some(self.rec.location),
        );
        set_grad_fn(&base, node);
        // The view's own grad_fn is regenerated from the base's on next use.
        let mut st: std::sync::MutexGuard<'_, GradState> = target.autograd_meta().state();
        st.fn_version = u32::MAX;
        drop(st);
        target.autograd_meta().set_requires_grad(true);
        let _ = current_grad_fn(&target);
    }
}

/// The base's gradient for an in-place op on a view: the incoming gradient everywhere except
/// the view's region, where the op's backward decides.
fn copy_slices_backward(
    g: &Tensor,
    base: &Layout,
    view: &Layout,
    op_backward: &mut BackwardFn,
) -> Result<Vec<Option<Tensor>>> {
    let (buffer, lo) = super::view::zeros_covering(g, &[base, view])?;
    let result = buffer.as_strided(base.sizes(), base.strides(), Some(base.offset() - lo))?;
    result.copy_(g)?;
    let region = buffer.as_strided(view.sizes(), view.strides(), Some(view.offset() - lo))?;
    let mut grads = op_backward(region.deep_clone()?)?;
    match grads.first_mut().and_then(Option::take) {
        Some(gv) => region.copy_(&gv)?,
        None => region.zero_()?,
    };
    if grads.is_empty() {
        grads.push(None);
    }
    grads[0] = Some(result);
    Ok(grads)
}

/// `out=` ops are not differentiable (as in PyTorch): with grad mode on, an operand or output
/// that requires grad is an error. Also refuses writing into an inference tensor outside
/// inference mode. Run before anything is written.
pub(crate) fn refuse_out_with_grad(
    op: &'static str,
    inputs: &[&Tensor],
    out: &Tensor,
) -> Result<()> {
    check_inplace(op, out, false)?;
    if is_grad_enabled()
        && (out.autograd_meta().requires_grad()
            || inputs.iter().any(|t| t.autograd_meta().requires_grad()))
    {
        return Err(Error::Autograd {
            message: format!(
                "{op}: ops that write into a given output (out=) are not recorded by \
                 autograd, and an operand requires grad. Hint: use the out-of-place op, or \
                 run it inside no_grad"
            ),
        });
    }
    Ok(())
}
