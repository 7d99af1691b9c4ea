//! Graph nodes and edges. A non-leaf tensor owns its `grad_fn` node; a node owns the edges to
//! the nodes of its inputs and the tensors its backward needs, never its own output with a
//! `grad_fn`, so a graph has no reference cycles and is freed when its last tensor drops.
//! Dropping a node is iterative, so a chain of a million ops drops without deep recursion.

use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use strata_alloc::Site;

use super::graph_usage;
use crate::{DType, Result, Tensor};

/// The gradient of a node's inputs from the gradient of its output.
pub(crate) type BackwardFn = Box<dyn FnMut(Tensor) -> Result<Vec<Option<Tensor>>> + Send>;

/// A hook on the gradient flowing into a node (a tensor hook or `retain_grad`): it may
/// replace the gradient.
pub(crate) type GradHook = Arc<dyn Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync>;

/// A hook run on a leaf after a gradient was accumulated into its `.grad`; it is given the
/// leaf.
pub(crate) type PostAccumulateHook = Arc<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

/// Where an edge leads: a node and which of its inputs.
#[derive(Clone)]
pub(crate) struct Edge {
    pub node: Arc<Node>,
}

/// What a gradient for one input must look like (it is summed and cast to fit).
#[derive(Debug, Clone)]
pub(crate) struct InputMeta {
    pub shape: Vec<usize>,
    pub dtype: DType,
}

pub(crate) enum NodeKind {
    /// An op's backward. `None` once its saved tensors were released.
    Function {
        backward: Mutex<Option<BackwardFn>>,
        /// Whether the backward holds saved tensors (a node without any may run twice).
        saves: AtomicBool,
    },
    /// Adds the incoming gradient to a leaf's `.grad`. Holds the leaf; the leaf refers back
    /// to it only weakly.
    Accumulate { leaf: Tensor },
}

static NEXT_SEQ: AtomicU64 = AtomicU64::new(0);

/// One node of the graph.
pub(crate) struct Node {
    pub name: &'static str,
    /// Creation order: later nodes run first when several are ready.
    pub seq: u64,
    pub next: Vec<Option<Edge>>,
    pub inputs: Vec<Option<InputMeta>>,
    pub kind: NodeKind,
    /// The forward op's source location (allocations of the backward are attributed to it).
    pub location: Option<&'static Location<'static>>,
    /// The scope path the forward op ran in (its backward's allocations are recorded there).
    pub scope: &'static str,
    pub hooks: Mutex<Vec<(u64, GradHook)>>,
}

impl Node {
    /// The site of the forward op that recorded this node (its source line, name, scope).
    pub fn site(&self) -> Site {
        match self.location {
            Some(l) => Site::new(l, self.name),
            None => Site::unknown(self.name),
        }
        .in_scope(self.scope)
    }

    pub fn function(
        name: &'static str,
        next: Vec<Option<Edge>>,
        inputs: Vec<Option<InputMeta>>,
        backward: BackwardFn,
        saves: bool,
        location: Option<&'static Location<'static>>,
    ) -> Arc<Node> {
        let node = Node::pending(name, next, inputs, location);
        node.install(backward, saves);
        node
    }

    /// A node whose backward is installed later (after its output knows its `grad_fn`, so
    /// that saving the output sees it as a non-leaf).
    pub fn pending(
        name: &'static str,
        next: Vec<Option<Edge>>,
        inputs: Vec<Option<InputMeta>>,
        location: Option<&'static Location<'static>>,
    ) -> Arc<Node> {
        let node = Arc::new(Node {
            name,
            seq: NEXT_SEQ.fetch_add(1, Ordering::Relaxed),
            next,
            inputs,
            kind: NodeKind::Function {
                backward: Mutex::new(None),
                saves: AtomicBool::new(false),
            },
            location,
            scope: crate::scope::current(),
            hooks: Mutex::new(Vec::new()),
        });
        graph_usage::count(&node.site(), 1, 0, 0);
        node
    }

    /// Installs a pending node's backward.
    pub fn install(&self, f: BackwardFn, saves_tensors: bool) {
        if let NodeKind::Function { backward, saves } = &self.kind {
            saves.store(saves_tensors, Ordering::Release);
            *backward.lock().unwrap_or_else(|p| p.into_inner()) = Some(f);
        }
    }

    pub fn accumulate(leaf: Tensor) -> Arc<Node> {
        Arc::new(Node {
            name: "AccumulateGrad",
            seq: u64::MAX,
            next: Vec::new(),
            inputs: Vec::new(),
            kind: NodeKind::Accumulate { leaf },
            location: None,
            scope: "",
            hooks: Mutex::new(Vec::new()),
        })
    }

    pub fn hooks(&self) -> MutexGuard<'_, Vec<(u64, GradHook)>> {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops the saved tensors (after a backward without `retain_graph`).
    pub fn release(&self) {
        if let NodeKind::Function { backward, saves } = &self.kind {
            if !saves.load(Ordering::Acquire) {
                return;
            }
            let f = backward.lock().unwrap_or_else(|p| p.into_inner()).take();
            drop(f);
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if matches!(self.kind, NodeKind::Function { .. }) {
            graph_usage::count(&self.site(), -1, 0, 0);
        }
        // Unlink iteratively: a node whose last owner is this one is emptied here instead of
        // recursing into its own drop.
        let mut stack: Vec<Arc<Node>> = self.next.drain(..).flatten().map(|e| e.node).collect();
        while let Some(node) = stack.pop() {
            if let Ok(mut inner) = Arc::try_unwrap(node) {
                stack.extend(inner.next.drain(..).flatten().map(|e| e.node));
            }
        }
    }
}
