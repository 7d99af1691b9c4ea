//! `strata viz`: a snapshot's history as one self-contained HTML page (no network): live
//! memory over time stacked by category, scope or site, reserved memory over it, the
//! segments and their blocks at any moment, and the largest holders at the peak. With
//! `--png`, the timeline as a bitmap.

mod lod;
mod page;
#[cfg(feature = "png")]
mod png;
mod serve;

use std::collections::HashMap;

use serde::Serialize;
use strata::alloc::caching::{BlockState, Frame, Snapshot, TraceAction, TraceEntrySnapshot};
use strata::alloc::offline::{FreeAt, Step, TraceWalk};

pub use lod::{Summary, COLUMNS};
pub use page::html;
#[cfg(feature = "png")]
pub use png::timeline_png;
pub use serve::{serve, ServeError};

/// One allocation's life: from trace entry `s` to entry `e` (the number of entries when it
/// is still live at the end), `b` bytes requested at address `a`, and its category, scope
/// and site as indices into [`VizData`]'s name lists.
#[derive(Debug, Clone, Serialize)]
pub struct Life {
    /// Entry index of the allocation (0 for blocks allocated before the trace began).
    pub s: usize,
    /// Entry index of the free.
    pub e: usize,
    /// Bytes requested.
    pub b: u64,
    /// Address.
    pub a: u64,
    /// Category, scope and site indices.
    pub g: [usize; 3],
}

/// A range of device memory held by the allocator from entry `s` to entry `e`.
#[derive(Debug, Clone, Serialize)]
pub struct Range {
    /// Start address.
    pub a: u64,
    /// Bytes.
    pub b: u64,
    /// Entry index where it was reserved (0: before the trace).
    pub s: usize,
    /// Entry index where it was released (the entry count: never).
    pub e: usize,
}

/// Everything the page draws, computed from one snapshot.
#[derive(Debug, Clone, Serialize)]
pub struct VizData {
    /// What the page is about (the snapshot's file name).
    pub title: String,
    /// Trace entries: the time axis.
    pub entries: usize,
    /// Category, scope and site names.
    pub names: [Vec<String>; 3],
    /// The entry of the whole trace that entry 0 here is (the start of a window).
    pub offset: usize,
    /// Every allocation of the trace, and those live at the snapshot that it did not see;
    /// when there are more than [`VizOptions::exact_lives`], only those live at the peak.
    pub lives: Vec<Life>,
    /// Whether `lives` holds every allocation.
    pub complete: bool,
    /// How many allocations there are.
    pub total_lives: usize,
    /// The timeline in columns, for drawing it whole.
    pub summary: lod::Summary,
    /// Reserved bytes after each change: `(entry, bytes)`.
    pub reserved: Vec<(usize, u64)>,
    /// Reserved ranges (segments; the mapped ranges of expandable ones).
    pub ranges: Vec<Range>,
    /// The entry at which requested bytes peaked, and the peak.
    pub peak_entry: usize,
    /// See `peak_entry`.
    pub peak_bytes: u64,
    /// The sites holding the most at the peak: `(site, bytes, blocks)`, largest first.
    pub top_holders: Vec<(String, u64, usize)>,
    /// What the page should say about the data (a truncated trace, no trace).
    pub notes: Vec<String>,
}

/// Interns names, giving each an index.
#[derive(Default)]
struct Names {
    list: Vec<String>,
    index: HashMap<String, usize>,
}

impl Names {
    fn id(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.list.push(name.to_owned());
        self.index.insert(name.to_owned(), self.list.len() - 1);
        self.list.len() - 1
    }
}

/// The site and scope a trace entry's frames name.
fn site_and_scope(frames: &[Frame]) -> (String, String) {
    let (site, scope) = Frame::site_and_scope(frames);
    (
        site.unwrap_or_else(|| "(no frames)".to_owned()),
        scope.unwrap_or("(no scope)").to_owned(),
    )
}

/// Closes the parts of open ranges that `[a, a + b)` covers at entry `i`, reopening what
/// is left of each on either side.
fn unmap(open: &mut Vec<Range>, done: &mut Vec<Range>, a: u64, b: u64, i: usize) {
    let end = a + b;
    let mut kept = Vec::new();
    for r in open.drain(..) {
        let r_end = r.a + r.b;
        if r_end <= a || r.a >= end {
            kept.push(r);
            continue;
        }
        done.push(Range { e: i, ..r.clone() });
        if r.a < a {
            kept.push(Range {
                a: r.a,
                b: a - r.a,
                s: i,
                e: 0,
            });
        }
        if r_end > end {
            kept.push(Range {
                a: end,
                b: r_end - end,
                s: i,
                e: 0,
            });
        }
    }
    *open = kept;
}

/// How much a page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VizOptions {
    /// Up to this many allocations, the page holds every one of them and draws the timeline
    /// exactly at any zoom; beyond it, it holds the [summary](lod::Summary) and the blocks
    /// live at the peak, and zooming in asks `strata viz --serve` for the window.
    pub exact_lives: usize,
}

impl Default for VizOptions {
    fn default() -> Self {
        VizOptions {
            exact_lives: 200_000,
        }
    }
}

/// The page's data for device `device` of `snapshot`, the whole trace.
pub fn viz_data(snapshot: &Snapshot, device: usize, title: &str) -> VizData {
    viz_window(snapshot, device, title, None, &VizOptions::default())
}

/// A trace's segment events: the reserved ranges still open at its end and those closed
/// (absolute entries, `e` 0 while open), and the reserved level after each change, relative
/// to the start of the trace.
fn segment_events(trace: &[TraceEntrySnapshot]) -> (Vec<Range>, Vec<Range>, Vec<(usize, i128)>) {
    let mut open_ranges: Vec<Range> = Vec::new();
    let mut ranges: Vec<Range> = Vec::new();
    let mut reserved = Vec::new();
    let mut walk = TraceWalk::new(FreeAt::Requested);
    for (i, e) in trace.iter().enumerate() {
        // Only segment events: the walk need not follow the blocks here.
        if !matches!(
            e.action,
            TraceAction::SegmentAlloc
                | TraceAction::SegmentMap
                | TraceAction::SegmentFree
                | TraceAction::SegmentUnmap
        ) {
            continue;
        }
        let Step::Reserve { delta } = walk.step(i, e) else {
            continue;
        };
        reserved.push((i, walk.reserved()));
        let Some(addr) = e.addr else { continue };
        if delta > 0 {
            open_ranges.push(Range {
                a: addr,
                b: e.size,
                s: i,
                e: 0,
            });
        } else {
            unmap(&mut open_ranges, &mut ranges, addr, e.size, i);
        }
    }
    (open_ranges, ranges, reserved)
}

/// The page's data for entries `window` of device `device`'s trace (all of it when `None`;
/// entries in the data count from the window's start, [`VizData::offset`]). Blocks live
/// when the window opens are drawn from its start.
pub fn viz_window(
    snapshot: &Snapshot,
    device: usize,
    title: &str,
    window: Option<std::ops::Range<usize>>,
    options: &VizOptions,
) -> VizData {
    let full: &[TraceEntrySnapshot] = snapshot
        .device_traces
        .get(device)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let (start, end) = window.map_or((0, full.len()), |w| {
        let end = w.end.min(full.len());
        (w.start.min(end), end)
    });
    let trace = &full[start..end];
    let n = trace.len();
    let mut names: [Names; 3] = Default::default();
    let mut notes = Vec::new();
    // Categories of blocks live at the end, by address (strata's snapshots say); they describe
    // the end of the whole trace only.
    let mut live_at_end: HashMap<u64, &strata::alloc::caching::BlockSnapshot> = HashMap::new();
    if end == full.len() {
        for seg in &snapshot.segments {
            for b in &seg.blocks {
                if b.state != BlockState::Inactive {
                    live_at_end.insert(b.address, b);
                }
            }
        }
    }
    let mut lives = Vec::new();
    let mut early = 0usize;
    let group = |names: &mut [Names; 3], category: &str, scope: &str, site: &str| {
        [names[0].id(category), names[1].id(scope), names[2].id(site)]
    };
    // The blocks live when the window opens, then the window's own allocations and frees.
    let mut before = TraceWalk::new(FreeAt::Requested);
    for (i, e) in full[..start].iter().enumerate() {
        before.step(i, e);
    }
    let mut walk = TraceWalk::new(FreeAt::Requested).with_open(before.into_open());
    for (i, e) in trace.iter().enumerate() {
        let Step::Free { addr, bytes, since } = walk.step(start + i, e) else {
            continue;
        };
        let category = e.category.map_or("unknown", |c| c.as_str());
        if since.is_none() {
            early += 1;
        }
        let since = since.unwrap_or(start + i);
        let (site, scope) = site_and_scope(&full[since].frames);
        let g = group(&mut names, category, &scope, &site);
        lives.push(Life {
            s: since.saturating_sub(start),
            e: i,
            b: bytes,
            a: addr,
            g,
        });
    }
    let mut open: Vec<(u64, (usize, u64))> = walk.into_open().into_iter().collect();
    open.sort_unstable();
    for (addr, (s, b)) in open {
        let (site, scope) = site_and_scope(&full[s].frames);
        let category = live_at_end
            .get(&addr)
            .and_then(|blk| blk.category)
            .map_or("unknown", |c| c.as_str());
        let g = group(&mut names, category, &scope, &site);
        lives.push(Life {
            s: s.saturating_sub(start),
            e: n,
            b,
            a: addr,
            g,
        });
    }
    let seen: std::collections::HashSet<u64> = lives.iter().map(|l| l.a).collect();
    for (addr, blk) in &live_at_end {
        if !seen.contains(addr) && blk.state == BlockState::ActiveAllocated {
            early += 1;
            let (site, scope) = site_and_scope(&blk.frames);
            let category = blk.category.map_or("unknown", |c| c.as_str());
            let g = group(&mut names, category, &scope, &site);
            lives.push(Life {
                s: 0,
                e: n,
                b: blk.requested_size,
                a: *addr,
                g,
            });
        }
    }
    lives.sort_by_key(|l| (l.s, l.a));
    if n == 0 {
        notes.push(
            "the snapshot has no allocation history: only the blocks live when it was taken \
             are shown"
                .to_owned(),
        );
    } else if early > 0 {
        notes.push(format!(
            "the history starts after the run did (a full ring buffer or late recording): \
             {early} blocks were allocated before its first entry and are drawn from the start"
        ));
    }
    // Reserved memory and ranges from the segment events; what the trace does not explain
    // was reserved before it.
    // One pass over the whole trace: its final level says what was reserved before it, and
    // the window takes its part of the ranges and steps.
    let (mut open_ranges, mut ranges, steps) = segment_events(full);
    let whole_level = steps.last().map_or(0, |s| s.1);
    let before_trace = (i128::from(snapshot.total_reserved()) - whole_level).max(0);
    if before_trace > 0 {
        for seg in &snapshot.segments {
            let covered = open_ranges
                .iter()
                .chain(&ranges)
                .any(|r| r.a <= seg.address && seg.address < r.a + r.b);
            if !covered {
                open_ranges.push(Range {
                    a: seg.address,
                    b: seg.total_size,
                    s: 0,
                    e: 0,
                });
            }
        }
    }
    let at_start = steps
        .iter()
        .take_while(|s| s.0 < start)
        .last()
        .map_or(0, |s| s.1);
    let level = |l: i128| (l + before_trace).max(0) as u64;
    let reserved: Vec<(usize, u64)> = std::iter::once((0, level(at_start)))
        .chain(
            steps
                .iter()
                .filter(|s| start <= s.0 && s.0 < end)
                .map(|&(i, l)| (i - start, level(l))),
        )
        .collect();
    ranges.extend(
        open_ranges
            .into_iter()
            .map(|r| Range { e: full.len(), ..r }),
    );
    let mut ranges: Vec<Range> = ranges
        .into_iter()
        .filter(|r| (r.e > start && r.s < end) || start == end)
        .map(|r| Range {
            s: r.s.saturating_sub(start),
            e: r.e.min(end).saturating_sub(start),
            ..r
        })
        .collect();
    ranges.sort_by_key(|r| (r.a, r.s));
    // The peak of live requested bytes and who held it.
    let mut deltas: Vec<(usize, i128)> = Vec::with_capacity(lives.len() * 2);
    for l in &lives {
        deltas.push((l.s, i128::from(l.b)));
        deltas.push((l.e, -i128::from(l.b)));
    }
    // Frees before allocations at the same entry.
    deltas.sort_by_key(|(i, d)| (*i, *d > 0));
    let (mut live, mut peak_bytes, mut peak_entry) = (0i128, 0i128, 0usize);
    for (i, d) in deltas {
        live += d;
        if live > peak_bytes {
            (peak_bytes, peak_entry) = (live, i);
        }
    }
    let mut by_site: HashMap<usize, (u64, usize)> = HashMap::new();
    for l in lives
        .iter()
        .filter(|l| l.s <= peak_entry && peak_entry < l.e)
    {
        let e = by_site.entry(l.g[2]).or_default();
        e.0 += l.b;
        e.1 += 1;
    }
    let [categories, scopes, sites] = names.map(|n| n.list);
    let mut top_holders: Vec<(String, u64, usize)> = by_site
        .into_iter()
        .map(|(s, (b, c))| (sites[s].clone(), b, c))
        .collect();
    top_holders.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top_holders.truncate(10);
    let groups = [categories.len(), scopes.len(), sites.len()];
    let summary = lod::summarise(&lives, n, &reserved, groups, peak_entry);
    let total_lives = lives.len();
    let complete = total_lives <= options.exact_lives;
    if !complete {
        // The page keeps the blocks live at the peak, for the segments drawn there.
        lives.retain(|l| l.s <= peak_entry && peak_entry < l.e);
        lives.shrink_to_fit();
        notes.push(format!(
            "{total_lives} allocations are too many to draw one by one: the timeline is drawn              in {} columns, each at the moment its bytes peak; the segments show the peak.              To zoom into the exact blocks of a window, run `strata viz --serve` on the              snapshot and open the page it prints.",
            summary.at.len()
        ));
    }
    VizData {
        title: title.to_owned(),
        entries: n,
        offset: start,
        names: [categories, scopes, sites],
        lives,
        complete,
        total_lives,
        summary,
        reserved,
        ranges,
        peak_entry,
        peak_bytes: peak_bytes.max(0) as u64,
        top_holders,
        notes,
    }
}

/// Writes the page for `snapshot` (device 0) to `html`, and with `png` the timeline there.
pub fn write(
    snapshot: &Snapshot,
    title: &str,
    html_path: &std::path::Path,
    png: Option<&std::path::Path>,
    options: &VizOptions,
) -> Result<VizData, String> {
    let data = viz_window(snapshot, 0, title, None, options);
    std::fs::write(html_path, html(&data))
        .map_err(|e| format!("cannot write {}: {e}", html_path.display()))?;
    if let Some(path) = png {
        #[cfg(feature = "png")]
        timeline_png(&data, path, 1100, 420)?;
        #[cfg(not(feature = "png"))]
        return Err(format!(
            "cannot draw {}: this strata was built without the `png` feature",
            path.display()
        ));
    }
    Ok(data)
}
