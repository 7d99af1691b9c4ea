//! `strata explain`: an explanation as text, the verdict first, then the moment's memory, its
//! holders and the fixes replayed.

use std::fmt::Write;

use strata::alloc::caching::format_size;
use strata::alloc::offline::{Explanation, Fix, Moment};

fn size(bytes: u64) -> String {
    format_size(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// `text` broken into lines of at most `width` characters (words are never split).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        if line > 0 && line + 1 + word.len() > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += word.len();
    }
    out.push('\n');
    out
}

fn oom_cell(f: &Fix) -> String {
    match &f.first_oom {
        None => "none".to_owned(),
        Some(o) => format!("{} (first at entry {})", f.ooms, o.entry),
    }
}

/// The explanation as a report of at most `top` holders.
pub fn report(e: &Explanation, top: usize) -> String {
    let mut out = wrap(&e.verdict, 100);
    let f = &e.fragmentation;
    let moment = match &e.moment {
        Moment::OutOfMemory { entry, .. } => {
            format!("the out-of-memory at trace entry {entry} of {}", e.entries)
        }
        Moment::Peak { entry: Some(k) } => {
            format!("the allocated peak, after trace entry {k} of {}", e.entries)
        }
        Moment::Peak { entry: None } => "the allocated peak, before the trace began".to_owned(),
        Moment::Snapshot => "the snapshot (it has no trace)".to_owned(),
    };
    let _ = writeln!(out, "\nmemory at {moment}, device {}", e.device);
    let capacity = match e.capacity.bytes() {
        Some(b) => format!("{} ({})", size(b), e.capacity.source()),
        None => "unknown (give it with --capacity)".to_owned(),
    };
    let request = match e.moment {
        Moment::OutOfMemory { request, .. } => format!(" (the request: {})", size(request)),
        _ => String::new(),
    };
    for (name, value) in [
        ("capacity", capacity),
        ("reserved", size(f.reserved)),
        ("allocated", size(f.allocated)),
        ("free in reserved segments", size(f.free_in_reserved)),
        (
            "largest free block",
            format!("{}{request}", size(f.largest_free_block)),
        ),
        (
            "free in split segments (non-releasable)",
            size(f.inactive_split_bytes),
        ),
    ] {
        let _ = writeln!(out, "  {name:<42} {value}");
    }
    let _ = writeln!(
        out,
        "  {:<6} {:>9} {:>11} {:>14} {:>14} {:>14}",
        "pool", "segments", "expandable", "reserved", "allocated", "free"
    );
    for p in &f.pools {
        let pool = format!("{:?}", p.pool).to_lowercase();
        let _ = writeln!(
            out,
            "  {pool:<6} {:>9} {:>11} {:>14} {:>14} {:>14}",
            p.segments,
            p.expandable,
            size(p.reserved),
            size(p.allocated),
            size(p.free)
        );
    }
    let frames = if e.library_frames {
        "by first frame"
    } else {
        "by first frame in your code (library frames skipped; --library-frames keeps them)"
    };
    let _ = writeln!(out, "\nlive memory {frames}");
    let _ = writeln!(out, "  {:>12} {:>7}  site", "bytes", "blocks");
    for h in e.holders.iter().take(top) {
        let categories = if h.categories.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = h
                .categories
                .iter()
                .map(|(c, b)| format!("{c} {}", size(*b)))
                .collect();
            format!("  [{}]", parts.join(", "))
        };
        let _ = writeln!(
            out,
            "  {:>12} {:>7}  {}{categories}",
            size(h.bytes),
            h.blocks,
            h.site
        );
    }
    if e.holders.len() > top {
        let rest = &e.holders[top..];
        let _ = writeln!(
            out,
            "  {:>12} {:>7}  ({} more sites)",
            size(rest.iter().map(|h| h.bytes).sum()),
            rest.iter().map(|h| h.blocks).sum::<usize>(),
            rest.len()
        );
    }
    if e.fixes.is_empty() {
        return out;
    }
    let under = match e.capacity.bytes() {
        Some(b) => format!("on {}", size(b)),
        None => "on an unbounded device".to_owned(),
    };
    let _ = writeln!(out, "\nfixes, each replayed over the whole trace {under}");
    let _ = writeln!(
        out,
        "  {:<36} {:>14} {:>14} {:>8}  {:<26} helps",
        "change", "peak reserved", "peak allocated", "retries", "out of memory"
    );
    for f in &e.fixes {
        let helps = match f.change {
            strata::alloc::offline::Change::Recorded => "",
            _ if f.helps => "yes",
            _ => "no",
        };
        let row = format!(
            "  {:<36} {:>14} {:>14} {:>8}  {:<26} {helps}",
            f.change.label(),
            size(f.peak_reserved),
            size(f.peak_allocated),
            f.alloc_retries,
            oom_cell(f)
        );
        let _ = writeln!(out, "{}", row.trim_end());
    }
    let settings = e.suggested_settings();
    if !settings.is_empty() {
        let _ = writeln!(
            out,
            "\nsuggested (each verified by replay; set one in PYTORCH_CUDA_ALLOC_CONF, or \
             STRATA_ALLOC_CONF for strata):"
        );
        for s in settings {
            let _ = writeln!(out, "  {s}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn wrapping_keeps_words_whole() {
        assert_eq!(wrap("aa bb cc", 5), "aa bb\ncc\n");
        assert_eq!(wrap("a-very-long-word x", 4), "a-very-long-word\nx\n");
    }
}
