//! Adding a gradient into a leaf's `.grad`, as PyTorch's `AccumulateGrad`: the first
//! gradient is taken over without a copy when nothing else holds it and its layout fits
//! (the same strides as the parameter when that is dense, else contiguous); later ones are
//! added in place, so the `.grad` buffer stays the same. Then the leaf's post-accumulate-grad
//! hooks run, given the leaf with its complete `.grad`.

use crate::layout::Layout;
use crate::op::OpContext;
use crate::{Result, Tensor};

/// The layout a leaf's `.grad` gets: the leaf's own strides when they are dense, else
/// contiguous.
fn grad_layout(leaf: &Tensor) -> Layout {
    let l = leaf.layout();
    if l.is_non_overlapping_and_dense() {
        Layout::new(l.sizes().to_vec(), l.strides().to_vec(), 0)
    } else {
        Layout::contiguous(l.sizes(), 0)
    }
}

/// `g` as a plain tensor when nothing else can reach its storage: a non-view with one
/// handle, or a view with one handle that covers all of a base only it holds (the
/// transposed product a column-major weight's gradient is computed as). Such a view is
/// taken over as a tensor of its own over the same memory, as PyTorch's `AccumulateGrad`
/// steals it.
fn sole_owner(g: &Tensor) -> Option<Tensor> {
    if g.handle_count() != 1 {
        return None;
    }
    let Some(base) = g.base() else {
        return Some(g.clone());
    };
    if base.handle_count() != 1 || g.nbytes() != g.storage_nbytes() {
        return None;
    }
    let storage = g.body().storage.clone();
    Some(Tensor::from_parts(storage, g.layout(), g.dtype(), None))
}

fn obeys_contract(g: &Tensor, leaf: &Tensor) -> bool {
    let (gl, want) = (g.layout(), grad_layout(leaf));
    gl.is_non_overlapping_and_dense()
        && gl.sizes() == want.sizes()
        && gl.strides() == want.strides()
}

pub(crate) fn accumulate_into_leaf(leaf: &Tensor, g: Tensor) -> Result<()> {
    let hooks: Vec<_> = leaf
        .autograd_meta()
        .state()
        .leaf_hooks
        .iter()
        .map(|(_, h)| h.clone())
        .collect();
    let mut g = g;
    for h in hooks {
        if let Some(new) = h(&g)? {
            g = new;
        }
    }
    let existing = leaf.autograd_meta().state().grad.get();
    match existing {
        None => {
            // Take the gradient over when nothing else can reach its memory and it fits.
            let owned = sole_owner(&g).filter(|o| obeys_contract(o, leaf));
            let stored = if let Some(o) = owned {
                drop(g);
                o
            } else {
                let ctx = OpContext::enter("AccumulateGrad");
                g.copy_into_new(&ctx, grad_layout(leaf), leaf.dtype())?
            };
            let mut st = leaf.autograd_meta().state();
            st.grad.set(Some(stored));
            st.accumulations = 1;
        }
        Some(prev) => {
            prev.add_(&g)?;
            let mut st = leaf.autograd_meta().state();
            st.accumulations = st.accumulations.saturating_add(1);
        }
    }
    let post: Vec<_> = leaf
        .autograd_meta()
        .state()
        .post_accumulate_hooks
        .iter()
        .map(|(_, h)| h.clone())
        .collect();
    for h in post {
        h(leaf)?;
    }
    Ok(())
}
