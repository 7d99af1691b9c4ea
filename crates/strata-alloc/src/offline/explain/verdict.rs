//! The plain-language answer at the top of an explanation.

use super::{Capacity, Change, Explanation, Fix, Moment};
use crate::size::format_size;

fn size(bytes: u64) -> String {
    format_size(usize::try_from(bytes).unwrap_or(usize::MAX))
}

/// `a`, `a or b`, `a, b or c`.
fn either(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// The capacity as a phrase: `of 1.00 GiB (given)`.
fn of_capacity(c: &Capacity) -> String {
    match c.bytes() {
        Some(b) => format!(" of {} ({})", size(b), c.source()),
        None => String::new(),
    }
}

/// What the holders taken away were: `the largest holder (model.py:41 (forward), 600.00 MiB)`.
fn holders_phrase(e: &Explanation, fix: &Fix) -> String {
    let Change::WithoutHolders { count, bytes } = fix.change else {
        return String::new();
    };
    let sites: Vec<&str> = e
        .holders
        .iter()
        .take(count)
        .map(|h| h.site.as_str())
        .collect();
    let who = if count == 1 {
        "the largest holder".to_owned()
    } else {
        format!("the {count} largest holders")
    };
    format!("{who} ({}: {})", sites.join(", "), size(bytes))
}

/// The verdict: what happened, whether it is fragmentation, and what fixes it.
pub(super) fn verdict(e: &Explanation) -> String {
    let f = &e.fragmentation;
    match &e.moment {
        Moment::Snapshot => format!(
            "the snapshot has no trace for device {}, so no fix can be verified by replay \
             (record one with torch.cuda.memory._record_memory_history or strata's \
             record_memory_history); as it was taken: {} allocated and {} reserved{}, {} free \
             in reserved segments, largest free block {}",
            e.device,
            size(f.allocated),
            size(f.reserved),
            of_capacity(&e.capacity),
            size(f.free_in_reserved),
            size(f.largest_free_block)
        ),
        Moment::OutOfMemory {
            entry,
            request,
            site,
            ..
        } => {
            let head = format!(
                "out of memory at trace entry {entry}: {} requested at {site} with {} \
                 allocated and {} reserved{}",
                size(*request),
                size(f.allocated),
                size(f.reserved),
                of_capacity(&e.capacity)
            );
            let reproduced = e.baseline().is_some_and(|b| b.ooms > 0);
            if !reproduced {
                let how = match e.capacity.bytes() {
                    Some(_) => {
                        "the replay under that capacity does not run out of memory, so \
                                the run could hold less (a memory fraction, or another process \
                                on the device)"
                    }
                    None => "the device's size is unknown",
                };
                return format!(
                    "{head}. {how}: give the bytes the run could hold with --capacity to \
                     verify fixes by replay"
                );
            }
            let fragmented = f.free_in_reserved >= *request;
            let frag = if fragmented {
                format!(
                    "Fragmentation: {} free in reserved segments, largest free block {} for a \
                     {} request",
                    size(f.free_in_reserved),
                    size(f.largest_free_block),
                    size(*request)
                )
            } else {
                format!(
                    "Not fragmentation: {} free in reserved segments, less than the {} request",
                    size(f.free_in_reserved),
                    size(*request)
                )
            };
            let settings = e.suggested_settings();
            if !settings.is_empty() {
                let verb = if settings.len() == 1 {
                    "fits it"
                } else {
                    "each fit it"
                };
                return format!(
                    "{head}. {frag}: {} {verb}, verified by replay",
                    either(&settings)
                );
            }
            let less = match e.fewest_holders_removed() {
                Some(fix) => format!(
                    "without {} it fits, so the run needs less memory: a smaller batch, \
                     activation checkpointing, or dropping what it no longer needs",
                    holders_phrase(e, fix)
                ),
                None => {
                    let n = e
                        .fixes
                        .iter()
                        .filter(|f| matches!(f.change, Change::WithoutHolders { .. }))
                        .count();
                    format!(
                        "even without its {n} largest holders it does not fit: the run needs \
                         much less memory, or a larger device"
                    )
                }
            };
            let joint = if fragmented { ", but no" } else { ". No" };
            format!("{head}. {frag}{joint} allocator setting fits it (each replayed); {less}")
        }
        Moment::Peak { entry } => {
            let at = match entry {
                Some(k) => format!("trace entry {k}"),
                None => "the start of the trace".to_owned(),
            };
            let head = format!(
                "no out-of-memory in the trace; allocated bytes peaked at {at}: {} allocated \
                 and {} reserved{}, {} of it free in reserved segments",
                size(f.allocated),
                size(f.reserved),
                of_capacity(&e.capacity),
                size(f.free_in_reserved)
            );
            let best = e
                .fixes
                .iter()
                .filter(|f| f.helps)
                .min_by_key(|f| f.peak_reserved);
            match (best, e.baseline()) {
                (Some(fix), Some(base)) => format!(
                    "{head}; {} lowers the peak reserved from {} to {}, verified by replay",
                    fix.change.label(),
                    size(base.peak_reserved),
                    size(fix.peak_reserved)
                ),
                _ => format!(
                    "{head}; no allocator setting lowers the peak reserved by 1% or more \
                     (each replayed)"
                ),
            }
        }
    }
}
