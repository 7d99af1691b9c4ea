//! How much of the autograd graph is alive: nodes and the bytes their saved tensors hold,
//! grouped by the site of the forward op that recorded them. A loss kept in a list keeps
//! its whole graph alive; this is where that shows.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use strata_alloc::Site;

/// The graph still alive from one forward site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphUsage {
    /// The forward op's source line, name and scope.
    pub site: Site,
    /// Graph nodes recorded there that are still alive.
    pub nodes: usize,
    /// Tensors those nodes still hold for backward.
    pub saved_tensors: usize,
    /// Bytes of the storages of those tensors (a storage saved twice counts twice).
    pub saved_bytes: usize,
}

type Key = (&'static str, u32, u32, &'static str, &'static str);

fn key(s: &Site) -> Key {
    (s.file, s.line, s.column, s.op, s.scope)
}

static LIVE: Mutex<BTreeMap<Key, GraphUsage>> = Mutex::new(BTreeMap::new());

/// Adds `nodes`, `tensors` and `bytes` (each may be negative) to `site`'s usage.
pub(crate) fn count(site: &Site, nodes: isize, tensors: isize, bytes: isize) {
    let mut live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    let k = key(site);
    let u = live.entry(k).or_insert(GraphUsage {
        site: *site,
        nodes: 0,
        saved_tensors: 0,
        saved_bytes: 0,
    });
    u.nodes = u.nodes.saturating_add_signed(nodes);
    u.saved_tensors = u.saved_tensors.saturating_add_signed(tensors);
    u.saved_bytes = u.saved_bytes.saturating_add_signed(bytes);
    if u.nodes == 0 && u.saved_tensors == 0 {
        live.remove(&k);
    }
}

/// Every forward site with graph still alive, most saved bytes first (ties by site).
pub fn live_graph() -> Vec<GraphUsage> {
    let live = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    let mut v: Vec<GraphUsage> = live.values().copied().collect();
    v.sort_by(|a, b| {
        b.saved_bytes
            .cmp(&a.saved_bytes)
            .then(b.nodes.cmp(&a.nodes))
            .then_with(|| key(&a.site).cmp(&key(&b.site)))
    });
    v
}

/// One storage that live graph nodes hold for backward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SavedStorage {
    /// The storage ([`Tensor::storage_id`](crate::Tensor::storage_id)).
    pub storage_id: u64,
    /// Its size in bytes.
    pub bytes: usize,
    /// How many saved tensors hold it.
    pub saved_by: usize,
}

/// Saved storages by id: (holders, bytes).
static SAVED: Mutex<Option<HashMap<u64, (usize, usize)>>> = Mutex::new(None);

/// One more (`gain`) or one fewer saved tensor holding storage `id` of `bytes` bytes.
pub(crate) fn count_saved_storage(id: u64, bytes: usize, gain: bool) {
    let mut saved = SAVED.lock().unwrap_or_else(|p| p.into_inner());
    let map = saved.get_or_insert_with(HashMap::new);
    if gain {
        map.entry(id).or_insert((0, bytes)).0 += 1;
    } else if let Some(e) = map.get_mut(&id) {
        e.0 -= 1;
        if e.0 == 0 {
            map.remove(&id);
        }
    }
}

/// Every storage a live graph node holds for backward, each once, largest first: what
/// autograd keeps alive (the activations, and any parameters and inputs it saved).
pub fn saved_storages() -> Vec<SavedStorage> {
    let saved = SAVED.lock().unwrap_or_else(|p| p.into_inner());
    let mut v: Vec<SavedStorage> = saved
        .iter()
        .flatten()
        .map(|(&storage_id, &(saved_by, bytes))| SavedStorage {
            storage_id,
            bytes,
            saved_by,
        })
        .collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.storage_id.cmp(&b.storage_id)));
    v
}
