//! Small views that keep large storages alive.

use std::collections::BTreeMap;
use std::sync::Mutex;

use strata_alloc::Site;
use strata_core::{Tensor, WeakTensor};

use crate::finding::{Finding, FindingKind};
use crate::format::bytes;
use crate::hub::{Listener, Listening};

#[derive(Default)]
struct Seen {
    views: Vec<(WeakTensor, Site)>,
    since_prune: usize,
}

struct Recorder(Mutex<Seen>);

impl Listener for Recorder {
    fn view_made(&self, view: &Tensor, site: Site) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.views.push((view.downgrade_handle(), site));
        s.since_prune += 1;
        // Views die young: forget the dead ones now and then so the list stays small.
        if s.since_prune >= 4096 {
            s.views.retain(|(w, _)| w.is_alive());
            s.since_prune = 0;
        }
    }
}

/// One storage only views hold: its bytes, the views' bytes, and each view's bytes and site.
type Held = (usize, usize, Vec<(usize, Site)>);

/// Remembers every view made while it lives (with the line that made it), and reports the
/// storages that only small views keep alive: a 40 KiB slice of a 400 MiB batch keeps all
/// 400 MiB until the slice drops.
///
/// ```
/// use strata_profile::ViewWatch;
/// use strata_core::{DType, Tensor};
/// let watch = ViewWatch::start();
/// let big = Tensor::zeros(&[1 << 20], DType::F32)?; // 4 MiB
/// let head = big.narrow(0, 0, 1024)?;               // 4 KiB
/// drop(big);
/// let found = watch.report(1 << 20, 4);
/// assert!(found[0].message.contains("keeps a 4.0 MiB storage alive"));
/// let copy = head.deep_clone()?;                    // the fix: a copy of its own,
/// drop(head);                                       // and the view dropped (a shadowing
/// assert!(watch.report(1 << 20, 4).is_empty());     // `let head = ...` would keep it)
/// # drop(copy);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct ViewWatch(Listening<Recorder>);

impl ViewWatch {
    /// Starts remembering the views made from now on.
    pub fn start() -> ViewWatch {
        ViewWatch(Listening::start(Recorder(Mutex::new(Seen::default()))))
    }

    /// The storages of at least `min_storage_bytes` that only views keep alive, where the
    /// views cover at most `1 / ratio` of the storage; largest waste first.
    pub fn report(&self, min_storage_bytes: usize, ratio: usize) -> Vec<Finding> {
        let live: Vec<(Tensor, Site)> = {
            let mut s = self.0.listener.0.lock().unwrap_or_else(|p| p.into_inner());
            s.views.retain(|(w, _)| w.is_alive());
            s.views
                .iter()
                .filter_map(|(w, site)| w.upgrade().map(|t| (t, *site)))
                .collect()
        };
        // Per storage: its size, the views' bytes, and where each view was made.
        let mut storages: BTreeMap<u64, Held> = BTreeMap::new();
        for (t, site) in &live {
            if !t.storage_held_only_by_views() {
                continue;
            }
            let e = storages
                .entry(t.storage_id())
                .or_insert((t.storage_nbytes(), 0, Vec::new()));
            e.1 += t.nbytes();
            e.2.push((t.nbytes(), *site));
        }
        drop(live);
        let mut found: Vec<(usize, Finding)> = storages
            .into_values()
            .filter(|(storage, views, _)| {
                *storage >= min_storage_bytes && views.saturating_mul(ratio.max(1)) <= *storage
            })
            .map(|(storage, views, mut made)| {
                made.sort_by_key(|m| std::cmp::Reverse(m.0));
                let (first_bytes, first) = made[0];
                let where_ = format!("{}:{}", first.file, first.line);
                let scope = if first.scope.is_empty() {
                    String::new()
                } else {
                    format!(" in {}", first.scope)
                };
                let others = match made.len() {
                    1 => String::new(),
                    n => format!(" (with {} other views, {} in all)", n - 1, bytes(views)),
                };
                let message = format!(
                    "a {} view made at {where_} by `{}`{scope}{others} keeps a {} storage \
                     alive; copy it with `deep_clone()` (or `contiguous()` when it is strided) \
                     and drop the view, and the storage is freed",
                    bytes(first_bytes),
                    first.op,
                    bytes(storage)
                );
                (
                    storage - views,
                    Finding::new(FindingKind::ViewRetention, message),
                )
            })
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        found.into_iter().map(|(_, f)| f).collect()
    }
}
