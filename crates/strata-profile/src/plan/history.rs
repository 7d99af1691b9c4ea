//! The planned step's recorded history, read back: the timeline of live bytes and what was
//! live at the peak, by site and by scope.

use std::collections::{BTreeMap, HashMap};

use strata_alloc::caching::{TraceAction, TraceEntry};

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
    live: &HashMap<usize, (usize, strata_alloc::Site)>,
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
    let mut live: HashMap<usize, (usize, strata_alloc::Site)> = HashMap::new();
    let mut timeline = Vec::new();
    let (mut total, mut peak, mut peak_at) = (0usize, 0usize, None);
    for (i, e) in entries.iter().enumerate() {
        let site = e.site.unwrap_or_else(|| strata_alloc::Site::unknown("?"));
        match e.action {
            TraceAction::Alloc => {
                live.insert(e.addr, (e.size, site));
                total += e.size;
                timeline.push(TimelinePoint {
                    action: "alloc",
                    bytes: e.size,
                    live: total,
                    site: site.to_string(),
                });
                if total > peak {
                    (peak, peak_at) = (total, Some(i));
                }
            }
            TraceAction::FreeRequested => {
                if let Some((bytes, site)) = live.remove(&e.addr) {
                    total -= bytes;
                    timeline.push(TimelinePoint {
                        action: "free",
                        bytes,
                        live: total,
                        site: site.to_string(),
                    });
                }
            }
            _ => {}
        }
    }
    // Replay up to the peak for the live set there.
    let mut at_peak: HashMap<usize, (usize, strata_alloc::Site)> = HashMap::new();
    if let Some(end) = peak_at {
        for e in &entries[..=end] {
            let site = e.site.unwrap_or_else(|| strata_alloc::Site::unknown("?"));
            match e.action {
                TraceAction::Alloc => {
                    at_peak.insert(e.addr, (e.size, site));
                }
                TraceAction::FreeRequested => {
                    at_peak.remove(&e.addr);
                }
                _ => {}
            }
        }
    }
    Walk {
        timeline,
        sites_at_peak: groups(&at_peak, |s| s.to_string()),
        scopes_at_peak: groups(&at_peak, |s| s.scope.to_owned()),
    }
}
