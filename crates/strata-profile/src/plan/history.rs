//! The planned step's recorded history, read back: the timeline of live bytes and what was
//! live at the peak, by site and by scope.

use std::collections::{BTreeMap, HashMap};

use strata_alloc::caching::TraceEntry;
use strata_alloc::offline::{FreeAt, Step, TraceWalk};

/// One allocation or free of the planned step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelinePoint {
    /// `"alloc"` or `"free"`.
    pub action: &'static str,
    /// The bytes the caller asked for.
    pub bytes: usize,
    /// Requested bytes live after the event.
    pub live: usize,
    /// Where the block was allocated (`file:line (op) in scope`).
    pub site: String,
}

/// Live blocks that share a site or a scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveGroup {
    /// The site as displayed, or the scope path (empty: outside every scope).
    pub key: String,
    /// The callers' bytes.
    pub requested_bytes: usize,
    /// Live blocks.
    pub count: usize,
}

/// What [`walk`] finds.
pub(crate) struct Walk {
    pub timeline: Vec<TimelinePoint>,
    pub sites_at_peak: Vec<LiveGroup>,
    pub scopes_at_peak: Vec<LiveGroup>,
}

fn groups(
    live: &HashMap<u64, (usize, strata_alloc::Site)>,
    key: impl Fn(&strata_alloc::Site) -> String,
) -> Vec<LiveGroup> {
    let mut by: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (bytes, site) in live.values() {
        let e = by.entry(key(site)).or_default();
        e.0 += bytes;
        e.1 += 1;
    }
    let mut out: Vec<LiveGroup> = by
        .into_iter()
        .map(|(key, (requested_bytes, count))| LiveGroup {
            key,
            requested_bytes,
            count,
        })
        .collect();
    out.sort_by(|a, b| {
        b.requested_bytes
            .cmp(&a.requested_bytes)
            .then(a.key.cmp(&b.key))
    });
    out
}

/// Replays `entries`: the timeline, and the blocks live when the requested bytes peaked
/// (the first time they reached their highest).
pub(crate) fn walk(entries: &[TraceEntry]) -> Walk {
    let site_of = |i: usize| {
        entries[i]
            .site
            .unwrap_or_else(|| strata_alloc::Site::unknown("?"))
    };
    let mut walk = TraceWalk::new(FreeAt::Requested);
    let mut timeline = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        let (action, bytes, site) = match walk.step(i, e) {
            Step::Alloc { bytes, .. } => ("alloc", bytes, site_of(i)),
            Step::Free {
                bytes,
                since: Some(s),
                ..
            } => ("free", bytes, site_of(s)),
            _ => continue,
        };
        timeline.push(TimelinePoint {
            action,
            bytes: bytes as usize,
            live: walk.live().max(0) as usize,
            site: site.to_string(),
        });
    }
    // Walk again up to the peak for the blocks live there.
    let mut at_peak: HashMap<u64, (usize, strata_alloc::Site)> = HashMap::new();
    if let Some(end) = walk.peak_live_at() {
        let mut upto = TraceWalk::new(FreeAt::Requested);
        for (i, e) in entries[..=end].iter().enumerate() {
            upto.step(i, e);
        }
        for (addr, (since, bytes)) in upto.into_open() {
            at_peak.insert(addr, (bytes as usize, site_of(since)));
        }
    }
    Walk {
        timeline,
        sites_at_peak: groups(&at_peak, |s| s.to_string()),
        scopes_at_peak: groups(&at_peak, |s| s.scope.to_owned()),
    }
}
