//! The backward pass: walks the graph from the roots in dependency order (iteratively: no
//! recursion however long the graph), runs each node once all gradients for it arrived,
//! accumulates into leaves' `.grad`, and releases each node's saved tensors as it goes unless
//! the graph is retained.

use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use super::accumulate::accumulate_into_leaf;
use super::view::sum_to;
use crate::mode::GradModeGuard;
use crate::tensor::graph::{Edge, InputMeta, Node, NodeKind};
use crate::{Error, Result, Tensor};

type Key = *const Node;

thread_local! {
    /// Whether the backward running on this thread keeps the graph (`retain_graph`).
    static RETAINS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the backward pass now running on this thread keeps its nodes' saved tensors for
/// another pass (`retain_graph`). A backward formula may reuse a saved buffer for its own
/// results only when this is false: the engine releases the buffer right after the node.
pub(crate) fn retains_graph() -> bool {
    RETAINS.with(std::cell::Cell::get)
}

/// Sets [`retains_graph`] for one pass; the previous value (an enclosing pass's, for a
/// backward run inside a backward) comes back on drop.
struct RetainsGraph(bool);

impl RetainsGraph {
    fn set(retain: bool) -> RetainsGraph {
        RetainsGraph(RETAINS.with(|r| r.replace(retain)))
    }
}

impl Drop for RetainsGraph {
    fn drop(&mut self) {
        RETAINS.with(|r| r.set(self.0));
    }
}

fn key(n: &Arc<Node>) -> Key {
    Arc::as_ptr(n)
}

/// Ready nodes, later-created first (PyTorch's order); among nodes created at the same
/// point (gradient-accumulation nodes all share one), the one that became ready first. The
/// order never depends on addresses or hashing, so backward allocates in the same order in
/// every run.
struct Ready(u64, std::cmp::Reverse<u64>, Arc<Node>);
impl PartialEq for Ready {
    fn eq(&self, o: &Self) -> bool {
        (self.0, self.1) == (o.0, o.1)
    }
}
impl Eq for Ready {}
impl PartialOrd for Ready {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ready {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.0, self.1).cmp(&(o.0, o.1))
    }
}

/// Where the gradients end up.
pub(crate) enum Sink {
    /// Into leaves' `.grad`.
    Accumulate,
    /// Returned for these nodes (`grad()`), leaves untouched.
    Capture(Vec<Key>),
}

fn fit(grad: Tensor, meta: &InputMeta, node: &Node) -> Result<Tensor> {
    let mut g = grad;
    if g.shape().as_slice() != meta.shape {
        g = sum_to(&g, &meta.shape).map_err(|_| Error::Autograd {
            message: format!(
                "{}: the gradient has shape {:?} but its input has shape {:?}",
                node.name,
                g.shape(),
                meta.shape
            ),
        })?;
    }
    if g.dtype() != meta.dtype {
        g = g.to(meta.dtype)?;
    }
    Ok(g)
}

/// Runs backward from `roots` (each an edge and the gradient flowing into it).
pub(crate) fn run(
    roots: Vec<(Edge, Tensor)>,
    retain_graph: bool,
    sink: Sink,
) -> Result<HashMap<Key, Tensor>> {
    let _mode = GradModeGuard::no_grad();
    let _retains = RetainsGraph::set(retain_graph);
    // Count, for every reachable node, how many edges lead into it.
    let mut deps: HashMap<Key, usize> = HashMap::new();
    let mut seen: HashMap<Key, Arc<Node>> = HashMap::new();
    let mut stack: Vec<Arc<Node>> = Vec::new();
    // Every reachable node in the order it was found (deterministic, unlike `seen`'s).
    let mut found: Vec<Arc<Node>> = Vec::new();
    for (e, _) in &roots {
        if seen.insert(key(&e.node), e.node.clone()).is_none() {
            stack.push(e.node.clone());
            found.push(e.node.clone());
        }
    }
    while let Some(n) = stack.pop() {
        for e in n.next.iter().flatten() {
            *deps.entry(key(&e.node)).or_insert(0) += 1;
            if seen.insert(key(&e.node), e.node.clone()).is_none() {
                stack.push(e.node.clone());
                found.push(e.node.clone());
            }
        }
    }
    drop(seen);
    let captures: Vec<Key> = match &sink {
        Sink::Capture(k) => k.clone(),
        Sink::Accumulate => Vec::new(),
    };
    let mut buffers: HashMap<Key, Tensor> = HashMap::new();
    let mut captured: HashMap<Key, Tensor> = HashMap::new();
    for (e, g) in roots {
        add_into(&mut buffers, key(&e.node), g)?;
    }
    let mut ready: BinaryHeap<Ready> = BinaryHeap::new();
    let mut turn = 0u64;
    // Whether this pass has run a node that saves tensors and that no earlier backward had
    // freed: reaching a freed node after that means the graph links this step to an earlier
    // one. Nodes that save nothing are never freed, so running them says nothing.
    let mut ran_intact = false;
    let mut push = |ready: &mut BinaryHeap<Ready>, n: &Arc<Node>| {
        ready.push(Ready(n.seq, std::cmp::Reverse(turn), n.clone()));
        turn += 1;
    };
    for n in &found {
        if deps.get(&key(n)).copied().unwrap_or(0) == 0 {
            push(&mut ready, n);
        }
    }
    drop(found);
    while let Some(Ready(_, _, node)) = ready.pop() {
        let k = key(&node);
        let mut grad = buffers.remove(&k);
        if let Some(g) = grad.take() {
            grad = run_hooks(&node, g)?;
        }
        if captures.contains(&k) {
            if let Some(g) = &grad {
                captured.insert(k, g.clone());
            }
        }
        let outputs: Vec<Option<Tensor>> = match (&node.kind, grad) {
            (_, None) => Vec::new(),
            (NodeKind::Accumulate { leaf }, Some(g)) => {
                if matches!(sink, Sink::Accumulate) {
                    accumulate_into_leaf(leaf, g)?;
                }
                Vec::new()
            }
            (NodeKind::Function { .. }, Some(g)) if captures_all_done(&captures, &captured) => {
                drop(g);
                Vec::new()
            }
            (NodeKind::Function { backward, saves }, Some(g)) => {
                let mut slot = backward.lock().unwrap_or_else(|p| p.into_inner());
                let Some(f) = slot.as_mut() else {
                    return Err(freed_graph_error(node.name, ran_intact));
                };
                if saves.load(std::sync::atomic::Ordering::Acquire) {
                    ran_intact = true;
                }
                let _site = crate::op::BackwardSite::enter(node.location.map(|l| (l, node.name)));
                let _scope = crate::scope::restore(node.scope);
                let out = f(g)?;
                drop(slot);
                out
            }
        };
        if !retain_graph {
            node.release();
        }
        for (i, e) in node.next.iter().enumerate() {
            let Some(e) = e else { continue };
            let nk = key(&e.node);
            if let Some(Some(g)) = outputs.get(i) {
                let g = match node.inputs.get(i).and_then(Option::as_ref) {
                    Some(meta) => fit(g.clone(), meta, &node)?,
                    None => g.clone(),
                };
                add_into(&mut buffers, nk, g)?;
            }
            if let Some(d) = deps.get_mut(&nk) {
                *d -= 1;
                if *d == 0 {
                    push(&mut ready, &e.node);
                }
            }
        }
    }
    Ok(captured)
}

/// The error for a node whose saved tensors an earlier backward freed. When this pass first
/// ran intact nodes, the freed ones belong to an earlier step that a tensor carried over
/// (an RNN's hidden state, a running total) still links to; otherwise the same graph is run
/// backward twice.
fn freed_graph_error(name: &str, ran_intact: bool) -> Error {
    let message = if ran_intact {
        format!(
            "{name}: this backward reached a part of the graph that an earlier backward already \
             freed: a tensor carried over from an earlier step (an RNN's hidden state, a \
             running total) still links this step's graph to that one. Hint: detach the \
             carried state at the start of each step (`h = h.detach()?`); retain_graph = true \
             would instead keep every earlier step's graph alive, and memory would grow each \
             step"
        )
    } else {
        format!(
            "{name}: trying to backward through the graph a second time: backward through this \
             part of the graph ran before and its saved tensors were freed then. Hint: pass \
             retain_graph = true to the first backward if you need to run backward twice, or \
             recompute the forward"
        )
    };
    Error::Autograd { message }
}

fn captures_all_done(captures: &[Key], captured: &HashMap<Key, Tensor>) -> bool {
    // With every requested gradient found nothing further is needed (`grad()` stops early).
    !captures.is_empty() && captures.iter().all(|k| captured.contains_key(k))
}

fn add_into(buffers: &mut HashMap<Key, Tensor>, k: Key, g: Tensor) -> Result<()> {
    match buffers.remove(&k) {
        Some(prev) => {
            let sum = prev.add(&g)?;
            buffers.insert(k, sum);
        }
        None => {
            buffers.insert(k, g);
        }
    }
    Ok(())
}

fn run_hooks(node: &Node, g: Tensor) -> Result<Option<Tensor>> {
    let hooks: Vec<_> = node.hooks().iter().map(|(_, h)| h.clone()).collect();
    let mut g = g;
    for h in hooks {
        if let Some(new) = h(&g)? {
            g = new;
        }
    }
    Ok(Some(g))
}
