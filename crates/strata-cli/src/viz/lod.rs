//! The timeline at a level of detail: a fixed number of columns whatever the trace's length,
//! so that the page stays small and draws at once on a trace of millions of entries.
//!
//! Each column covers a run of entries and is drawn at one of them: the entry where the
//! bytes live peak within the column, so no peak is ever hidden by the summary. The stacks
//! are the bytes each coloured group holds at that entry, and the reserved line is the most
//! reserved within the column.

use serde::Serialize;

use super::Life;

/// Columns of a summary: about twice the page's drawing width.
pub const COLUMNS: usize = 2048;

/// Colours a grouping gets before the rest is drawn as "other": the page's palette.
pub const COLOURS: usize = 11;

/// The timeline summarised in columns.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The entry each column is drawn at, ascending.
    pub at: Vec<usize>,
    /// The first entry of each column.
    pub from: Vec<usize>,
    /// The most bytes reserved within each column.
    pub reserved: Vec<u64>,
    /// Per grouping (category, scope, site): the groups coloured, largest at the peak first.
    pub shown: [Vec<usize>; 3],
    /// Per grouping, per colour (the shown groups, then "other"), per column: the bytes live
    /// at the column's entry.
    pub stacks: [Vec<Vec<u64>>; 3],
}

/// The groups each grouping colours: the largest by bytes live at `peak_entry`.
fn shown_groups(lives: &[Life], groups: [usize; 3], peak_entry: usize) -> [Vec<usize>; 3] {
    std::array::from_fn(|kind| {
        let mut total = vec![0u64; groups[kind]];
        for l in lives
            .iter()
            .filter(|l| l.s <= peak_entry && peak_entry < l.e)
        {
            total[l.g[kind]] += l.b;
        }
        let mut order: Vec<usize> = (0..groups[kind]).collect();
        order.sort_by(|&a, &b| total[b].cmp(&total[a]).then(a.cmp(&b)));
        order.truncate(COLOURS);
        order
    })
}

/// `bytes` after a life of `b` bytes starts or ends.
fn apply(bytes: u64, starts: bool, b: u64) -> u64 {
    if starts {
        bytes + b
    } else {
        bytes.saturating_sub(b)
    }
}

/// Summarises `lives` over `entries` entries, with `reserved` the `(entry, bytes)` steps of
/// reserved memory and `groups` the number of names of each grouping.
pub fn summarise(
    lives: &[Life],
    entries: usize,
    reserved: &[(usize, u64)],
    groups: [usize; 3],
    peak_entry: usize,
) -> Summary {
    let n = entries.max(1);
    let cols = COLUMNS.min(n);
    let col_of = |i: usize| (i.min(n - 1) * cols / n).min(cols - 1);
    let from: Vec<usize> = (0..cols).map(|c| (c * n).div_ceil(cols)).collect();
    // Life starts and ends, ends first at an entry: a life is live at entries s..e.
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(lives.len() * 2);
    for (k, l) in lives.iter().enumerate() {
        if l.e > l.s {
            events.push((l.s, true, k));
            events.push((l.e, false, k));
        }
    }
    events.sort_unstable_by_key(|&(i, starts, _)| (i, starts));
    // Where each column peaks.
    let mut best: Vec<Option<(u64, usize)>> = vec![None; cols];
    let mut total: u64 = 0;
    let mut k = 0;
    while k < events.len() {
        let i = events[k].0;
        while k < events.len() && events[k].0 == i {
            let (_, starts, life) = events[k];
            total = apply(total, starts, lives[life].b);
            k += 1;
        }
        if i < n {
            let c = col_of(i);
            if best[c].is_none_or(|(t, _)| total > t) {
                best[c] = Some((total, i));
            }
        }
    }
    // A column without events is drawn at its first entry (its bytes are those carried in);
    // one whose events only lower the bytes is drawn at its first entry too, where they are
    // highest.
    let mut at = Vec::with_capacity(cols);
    let (mut k, mut running) = (0, 0u64);
    for c in 0..cols {
        // Bytes live at the column's first entry.
        while k < events.len() && events[k].0 <= from[c] {
            let (_, starts, life) = events[k];
            running = apply(running, starts, lives[life].b);
            k += 1;
        }
        let start = (from[c], running);
        at.push(match best[c] {
            Some((t, i)) if t > start.1 => i,
            _ => start.0,
        });
    }
    // The stacks at each column's entry.
    let shown = shown_groups(lives, groups, peak_entry);
    let slot: [Vec<usize>; 3] = std::array::from_fn(|kind| {
        let mut s = vec![shown[kind].len(); groups[kind]];
        for (j, &g) in shown[kind].iter().enumerate() {
            s[g] = j;
        }
        s
    });
    let mut stacks: [Vec<Vec<u64>>; 3] =
        std::array::from_fn(|kind| vec![vec![0u64; cols]; shown[kind].len() + 1]);
    let mut sums: [Vec<u64>; 3] = std::array::from_fn(|kind| vec![0u64; shown[kind].len() + 1]);
    let mut k = 0;
    for (c, &entry) in at.iter().enumerate() {
        while k < events.len() && events[k].0 <= entry {
            let (_, starts, life) = events[k];
            let l = &lives[life];
            for kind in 0..3 {
                let s = &mut sums[kind][slot[kind][l.g[kind]]];
                *s = apply(*s, starts, l.b);
            }
            k += 1;
        }
        for kind in 0..3 {
            for (j, v) in sums[kind].iter().enumerate() {
                stacks[kind][j][c] = *v;
            }
        }
    }
    // The most reserved within each column.
    let mut most = vec![0u64; cols];
    let mut level = 0u64;
    let mut r = 0;
    for c in 0..cols {
        let end = if c + 1 < cols { from[c + 1] } else { n };
        let mut top = level;
        while r < reserved.len() && reserved[r].0 < end {
            level = reserved[r].1;
            top = top.max(level);
            r += 1;
        }
        most[c] = top;
    }
    Summary {
        at,
        from,
        reserved: most,
        shown,
        stacks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(s: usize, e: usize, b: u64, g: usize) -> Life {
        Life {
            s,
            e,
            b,
            a: 0,
            g: [g, g, g],
        }
    }

    #[test]
    fn a_short_peak_inside_a_column_is_drawn() {
        // 100 000 entries in 2048 columns: a one-entry spike must still show.
        let lives = vec![life(0, 100_000, 10, 0), life(50_001, 50_002, 1000, 1)];
        let s = summarise(&lives, 100_000, &[(0, 4096)], [2, 2, 2], 50_001);
        let c = 50_001 * COLUMNS / 100_000;
        assert_eq!(s.at[c], 50_001);
        let total: u64 = (0..s.stacks[0].len()).map(|j| s.stacks[0][j][c]).sum();
        assert_eq!(total, 1010);
        assert_eq!(s.shown[0], vec![1, 0]);
        assert_eq!(s.reserved[c], 4096);
        // The column before holds only the long-lived block.
        let before: u64 = (0..s.stacks[0].len()).map(|j| s.stacks[0][j][c - 1]).sum();
        assert_eq!(before, 10);
    }

    #[test]
    fn a_short_trace_has_a_column_per_entry() {
        let lives = vec![life(1, 3, 5, 0)];
        let s = summarise(&lives, 4, &[], [1, 1, 1], 1);
        assert_eq!(s.at, vec![0, 1, 2, 3]);
        assert_eq!(s.stacks[0][0], vec![0, 5, 5, 0]);
    }
}
