//! The autocast cast cache (PyTorch's `cached_cast`): inside the outermost region, a leaf
//! f32 tensor that requires grad (a parameter) is cast to the region's dtype once, and every
//! op that needs the cast reuses it, so one weight used by several ops has one cast in the
//! graph and one gradient path. The cache is cleared when the outermost region closes.

use std::sync::Weak;

use crate::cast_scope::{CachedCast, CAST_CACHE};
use crate::{DType, Result, Tensor};

/// Whether a cast of `t` to `target` inside a `region` region is cached: a cast to the
/// region's dtype of a leaf f32 tensor that requires grad and is not a view.
fn cacheable(t: &Tensor, target: DType, region: DType) -> bool {
    target == region
        && t.dtype() == DType::F32
        && t.requires_grad()
        && t.is_leaf()
        && t.view_info().is_none()
}

/// `t` cast to `target` (a recorded, differentiable cast), from the cache when it is
/// cacheable and was cast before in this region.
pub(super) fn cast(t: &Tensor, target: DType, region: DType) -> Result<Tensor> {
    if !cacheable(t, target, region) {
        return t.autocast_to(target);
    }
    let source = t.downgrade();
    let key = (Weak::as_ptr(&source) as usize, target);
    let (version, storage) = (t.version(), t.storage_id());
    let hit = CAST_CACHE.with(|c| {
        c.borrow().get(&key).and_then(|e| {
            let fresh = e.source.strong_count() > 0
                && e.version == version
                && e.storage == storage
                && t.dtype() == DType::F32;
            fresh.then(|| e.cast.clone())
        })
    });
    if let Some(cast) = hit {
        return Ok(cast);
    }
    let cast = t.autocast_to(target)?;
    let entry = CachedCast {
        source,
        version,
        storage,
        cast: cast.clone(),
    };
    // A stale entry replaced here is dropped after the borrow ends.
    let stale = CAST_CACHE.with(|c| c.borrow_mut().insert(key, entry));
    drop(stale);
    Ok(cast)
}
