//! `strata replay`: a snapshot's recorded history under other allocator settings, printed
//! beside the recorded run.

use std::fmt::Write;

use strata::alloc::caching::format_size;
use strata::alloc::offline::{Coverage, ReplayFigures, ReplayReport};

fn row(out: &mut String, name: &str, a: &str, b: &str) {
    let _ = writeln!(out, "{name:<34} {a:>22} {b:>22}");
}

fn ooms(f: &ReplayFigures) -> String {
    match f.ooms.first() {
        None => "none".to_owned(),
        Some(o) => format!("{} (first at entry {})", f.ooms.len(), o.entry),
    }
}

/// The replay as a table: the recorded run (replayed under its own settings) and the
/// settings asked for, side by side, then what the trace covers and where the what-if run
/// would have run out of memory.
pub fn table(r: &ReplayReport) -> String {
    let mut out = String::new();
    let settings = |f: &ReplayFigures| {
        let s = if f.settings.is_empty() {
            "defaults".to_owned()
        } else {
            f.settings.clone()
        };
        match f.capacity {
            Some(c) => format!("{s}, {}", format_size(c as usize)),
            None => s,
        }
    };
    let _ = writeln!(out, "replayed {} trace entries", r.entries);
    row(&mut out, "", "recorded run", "what if");
    row(
        &mut out,
        "settings",
        &settings(&r.recorded),
        &settings(&r.what_if),
    );
    let size = |b: u64| format_size(b as usize);
    for (name, get) in [
        (
            "peak allocated",
            (|f: &ReplayFigures| f.peak_allocated) as fn(&ReplayFigures) -> u64,
        ),
        ("peak reserved", |f| f.peak_reserved),
        ("peak requested", |f| f.peak_requested),
        ("reserved at the allocated peak", |f| f.reserved_at_peak),
        ("largest free block there", |f| f.largest_free_block),
    ] {
        row(
            &mut out,
            name,
            &size(get(&r.recorded)),
            &size(get(&r.what_if)),
        );
    }
    row(
        &mut out,
        "reserved / allocated there",
        &format!("{:.3}", r.recorded.reserved_per_allocated),
        &format!("{:.3}", r.what_if.reserved_per_allocated),
    );
    for (name, get) in [
        (
            "peak segments",
            (|f: &ReplayFigures| f.peak_segments) as fn(&ReplayFigures) -> u64,
        ),
        ("allocation retries", |f| f.alloc_retries),
    ] {
        row(
            &mut out,
            name,
            &get(&r.recorded).to_string(),
            &get(&r.what_if).to_string(),
        );
    }
    row(
        &mut out,
        "out of memory",
        &ooms(&r.recorded),
        &ooms(&r.what_if),
    );
    let _ = writeln!(
        out,
        "the trace itself records peak requested {}, peak reserved {}, {} out-of-memory errors",
        size(r.traced_peak_requested),
        size(r.traced_peak_reserved),
        r.traced_ooms
    );
    if let Coverage::Truncated {
        missing,
        missing_bytes,
    } = r.coverage
    {
        let _ = writeln!(
            out,
            "the trace starts after the run did (a full ring buffer, recording switched on \
             late, or a --from window): {missing} blocks ({}) were allocated before it and are \
             replayed first, in \
             address order, so these figures reconstruct the run rather than repeat it; record \
             with a larger max_entries for an exact replay",
            size(missing_bytes)
        );
    }
    for o in r.what_if.ooms.iter().take(5) {
        let why = if o.segment > 0 {
            format!(
                ": no cached block fits, so it needs a new {} segment and the device has {} free",
                size(o.segment),
                size(o.device_free)
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  would run out of memory at entry {}: {} for {} with {} allocated, {} \
             reserved{why}",
            o.entry,
            size(o.bytes),
            o.site,
            size(o.allocated),
            size(o.reserved)
        );
    }
    out
}
