//! `memory_summary`: the statistics as a 75-column table laid out like PyTorch's.

use super::stats::{MemoryStats, Stat, StatArray};
use crate::Category;

const WIDTH: usize = 75;

/// A size cell: the unit steps up while the reference value (the `all` row) is at least
/// 768 units of the next one.
fn size_cell(value: i64, reference: i64) -> String {
    const UNITS: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = value;
    let mut r = reference as f64;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if r < 768.0 * 1024.0 {
            break;
        }
        unit = u;
        v /= 1024;
        r /= 1024.0;
    }
    format!("{v:6} {unit}")
}

/// A count cell: `K`, `M` while the reference is at least 750 000.
fn count_cell(value: i64, reference: i64) -> String {
    const UNITS: [&str; 3] = [" ", "K", "M"];
    let mut v = value;
    let mut r = reference as f64;
    let mut unit = UNITS[0];
    for u in &UNITS[1..] {
        if r < 750_000.0 {
            break;
        }
        unit = u;
        v /= 1000;
        r /= 1000.0;
    }
    format!("{v:7} {unit} ")
}

fn row(name: &str, s: &Stat, reference: &Stat, cell: fn(i64, i64) -> String) -> String {
    format!(
        " {name:<21} | {} | {} | {} | {} ",
        cell(s.current, reference.current),
        cell(s.peak, reference.peak),
        cell(s.allocated, reference.allocated),
        cell(s.freed, reference.freed)
    )
}

/// Renders the table. `title` names the allocator and device; `abbreviated` drops the per-pool
/// rows.
pub fn render(stats: &MemoryStats, title: &str, abbreviated: bool) -> String {
    type Metric<'a> = (&'a StatArray, &'a str, fn(i64, i64) -> String);
    let metrics: [Metric; 9] = [
        (&stats.allocated_bytes, "Allocated memory", size_cell),
        (&stats.active_bytes, "Active memory", size_cell),
        (&stats.requested_bytes, "Requested memory", size_cell),
        (&stats.reserved_bytes, "Reserved memory", size_cell),
        (
            &stats.inactive_split_bytes,
            "Non-releasable memory",
            size_cell,
        ),
        (&stats.allocation, "Allocations", count_cell),
        (&stats.active, "Active allocs", count_cell),
        (&stats.segment, "Reserved segments", count_cell),
        (&stats.inactive_split, "Non-releasable allocs", count_cell),
    ];
    let mut lines = vec![
        "=".repeat(WIDTH),
        format!("{:^WIDTH$}", truncate(title, WIDTH - 2)),
        "-".repeat(WIDTH),
        format!(
            "{:^37}|{:^37}",
            format!("Out-of-memory errors: {}", stats.num_ooms),
            format!("Flush-and-retry allocations: {}", stats.num_alloc_retries)
        ),
        "=".repeat(WIDTH),
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".to_string(),
    ];
    for (arr, name, cell) in metrics {
        lines.push("-".repeat(WIDTH));
        lines.push(row(name, &arr.all, &arr.all, cell));
        if !abbreviated {
            lines.push(row(
                "      from large pool",
                &arr.large_pool,
                &arr.all,
                cell,
            ));
            lines.push(row(
                "      from small pool",
                &arr.small_pool,
                &arr.all,
                cell,
            ));
        }
    }
    for (s, name) in [
        (&stats.oversize_allocations, "Oversize allocations"),
        (&stats.oversize_segments, "Oversize segments"),
    ] {
        lines.push("-".repeat(WIDTH));
        lines.push(row(name, s, s, count_cell));
    }
    // Files mapped for tensors: held by the program, not allocated from the pools.
    lines.push("-".repeat(WIDTH));
    lines.push(row(
        "Mapped file memory",
        &stats.mapped_bytes,
        &stats.mapped_bytes,
        size_cell,
    ));
    // What the allocated bytes hold; the rows add up to "Allocated memory".
    lines.push("=".repeat(WIDTH));
    lines.push(format!("{:^WIDTH$}", "Allocated memory by category"));
    lines.push("-".repeat(WIDTH));
    let all = &stats.allocated_bytes.all;
    for c in Category::ALL {
        let name = format!("  {}", c.as_str().replace('_', " "));
        lines.push(row(&name, stats.category_bytes.get(c), all, size_cell));
    }
    lines.push("=".repeat(WIDTH));
    let mut out = String::new();
    for l in lines {
        out.push('|');
        out.push_str(&l);
        out.push_str("|\n");
    }
    out
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caching::config::PoolKind;

    #[test]
    fn cells() {
        assert_eq!(size_cell(5 << 20, 5 << 20), "  5120 KiB");
        assert_eq!(size_cell(100, 100), "   100 B  ");
        assert_eq!(size_cell(1 << 30, 1 << 30), "  1024 MiB");
        assert_eq!(size_cell(4 << 20, 800 << 20), "     4 MiB");
        assert_eq!(count_cell(12, 12), "     12   ");
        assert_eq!(count_cell(2_000_000, 2_000_000), "   2000 K ");
    }

    #[test]
    fn every_line_is_75_columns() {
        let mut st = MemoryStats::default();
        st.allocated_bytes.increase(PoolKind::Large, 4 << 20);
        st.allocated_bytes.increase(PoolKind::Small, 1 << 20);
        st.allocation.increase(PoolKind::Small, 12);
        let s = render(&st, "strata caching allocator (cpu) memory summary", false);
        for l in s.lines() {
            assert_eq!(l.chars().count(), WIDTH + 2, "{l:?}");
        }
        assert!(s.contains(
            "| Allocated memory      |   5120 KiB |   5120 KiB |   5120 KiB |      0 B   |"
        ));
        assert!(s.contains("|       from large pool |   4096 KiB |"));
        assert!(s.contains("| Allocations           |      12    |"));
        assert!(s.ends_with("|\n"));
        let short = render(&st, "x", true);
        assert!(!short.contains("from large pool"));
    }

    #[test]
    fn mapped_bytes_have_a_row_of_their_own() {
        let mut st = MemoryStats::default();
        st.mapped_bytes.increase(3 << 20);
        st.mapped_bytes.decrease(1 << 20);
        let s = render(&st, "x", true);
        assert!(
            s.contains(
                "| Mapped file memory    |   2048 KiB |   3072 KiB |   3072 KiB |   1024 KiB |"
            ),
            "{s}"
        );
    }

    #[test]
    fn the_category_rows_follow_the_allocated_scale() {
        let mut st = MemoryStats::default();
        st.allocated_bytes.increase(PoolKind::Large, 5 << 20);
        st.category_bytes
            .get_mut(Category::Parameter)
            .increase(4 << 20);
        st.category_bytes
            .get_mut(Category::OptimizerState)
            .increase(1 << 20);
        let s = render(&st, "x", true);
        assert!(s.contains("Allocated memory by category"));
        assert!(s.contains("|   parameter           |   4096 KiB |"), "{s}");
        assert!(s.contains("|   optimizer state     |   1024 KiB |"), "{s}");
        assert!(s.contains("|   temporary           |      0 KiB |"), "{s}");
    }
}
