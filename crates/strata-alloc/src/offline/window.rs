//! Windows of a trace: the part of a long run that `strata replay`, `strata explain` and
//! `strata viz` look at (`--from`, `--to`), by trace entry or by time since the first entry.
//!
//! A window is read as a trace that starts at its first entry: the blocks live then were
//! allocated before it, and the replay allocates them first (as for a trace whose ring buffer
//! was full). When the window ends before the trace does, the snapshot's own segments (the
//! allocator's state at the end of the whole run) are left out, since they describe a later
//! moment.

use std::fmt;
use std::str::FromStr;

use crate::caching::Snapshot;

/// A point of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TracePoint {
    /// The trace entry of this index.
    Entry(usize),
    /// The first entry this many microseconds after the trace's first entry, or later.
    Micros(u64),
}

impl FromStr for TracePoint {
    type Err = String;

    /// `1200` (an entry), or a time since the first entry: `2.5s`, `300ms`, `40us`.
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let units = [("us", 1.0), ("ms", 1e3), ("s", 1e6)];
        for (suffix, micros) in units {
            if let Some(number) = s.strip_suffix(suffix) {
                let value: f64 = number.trim().parse().map_err(|_| {
                    format!("`{s}`: expected a number before `{suffix}`, as in 2.5s or 300ms")
                })?;
                if !(value.is_finite() && value >= 0.0) {
                    return Err(format!("`{s}`: a time must be 0 or more"));
                }
                return Ok(TracePoint::Micros((value * micros).round() as u64));
            }
        }
        s.parse::<usize>().map(TracePoint::Entry).map_err(|_| {
            format!(
                "`{s}`: expected a trace entry (1200) or a time since the first entry (2.5s, \
                 300ms, 40us)"
            )
        })
    }
}

impl fmt::Display for TracePoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TracePoint::Entry(i) => write!(f, "entry {i}"),
            TracePoint::Micros(us) => write!(f, "{us} us"),
        }
    }
}

/// Why a window cannot be taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The window holds no entry of the trace.
    #[error(
        "the window from {from} to {to} holds no entry of device {device}'s trace, which has \
         {entries} entries over {span_us} us: choose --from before --to, within the trace"
    )]
    Empty {
        /// The device.
        device: usize,
        /// The window's start, as given.
        from: String,
        /// Its end, as given.
        to: String,
        /// Entries in the trace.
        entries: usize,
        /// Microseconds from its first entry to its last.
        span_us: i64,
    },
}

/// Where a window cut one device's trace: entries `start..end` of the original.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The first entry kept.
    pub start: usize,
    /// One past the last entry kept.
    pub end: usize,
}

impl Snapshot {
    /// Keeps entries `from..to` of every device's trace (either end open when `None`); see
    /// the [module](self). Returns where each trace was cut.
    ///
    /// ```
    /// use strata_alloc::offline::TracePoint;
    /// use strata_alloc::{CachingAllocator, DeviceAllocator, RecordContext, Site, VirtualBacking};
    /// let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    /// a.record_memory_history(true, RecordContext::All, 1000);
    /// for _ in 0..3 {
    ///     let b = a.allocate(1 << 20, &Site::unknown("step")).unwrap();
    ///     unsafe { a.deallocate(b) };
    /// }
    /// let mut s = a.snapshot();
    /// let cuts = s.restrict(Some(TracePoint::Entry(2)), Some(TracePoint::Entry(4))).unwrap();
    /// assert_eq!((cuts[0].start, cuts[0].end), (2, 4));
    /// assert_eq!(s.device_traces[0].len(), 2);
    /// ```
    pub fn restrict(
        &mut self,
        from: Option<TracePoint>,
        to: Option<TracePoint>,
    ) -> Result<Vec<Cut>, WindowError> {
        let mut cuts = Vec::with_capacity(self.device_traces.len());
        for (device, trace) in self.device_traces.iter().enumerate() {
            let t0 = trace.first().map_or(0, |e| e.time_us);
            let at = |p: TracePoint| match p {
                TracePoint::Entry(i) => i.min(trace.len()),
                TracePoint::Micros(us) => {
                    let t = t0.saturating_add(i64::try_from(us).unwrap_or(i64::MAX));
                    trace.partition_point(|e| e.time_us < t)
                }
            };
            let start = from.map_or(0, at);
            let end = to.map_or(trace.len(), at);
            if start >= end && !trace.is_empty() {
                let span_us = trace.last().map_or(0, |e| e.time_us - t0);
                let open = |p: Option<TracePoint>, side: &str| {
                    p.map_or_else(|| format!("the {side}"), |p| p.to_string())
                };
                return Err(WindowError::Empty {
                    device,
                    from: open(from, "start"),
                    to: open(to, "end"),
                    entries: trace.len(),
                    span_us,
                });
            }
            cuts.push(Cut { start, end });
        }
        let cut_end = cuts
            .iter()
            .zip(&self.device_traces)
            .any(|(c, t)| c.end < t.len());
        for (trace, cut) in self.device_traces.iter_mut().zip(&cuts) {
            trace.truncate(cut.end);
            trace.drain(..cut.start.min(trace.len()));
        }
        if cut_end {
            self.segments.clear();
        }
        Ok(cuts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_parse_as_entries_or_times() {
        assert_eq!("1200".parse(), Ok(TracePoint::Entry(1200)));
        assert_eq!("2.5s".parse(), Ok(TracePoint::Micros(2_500_000)));
        assert_eq!("300ms".parse(), Ok(TracePoint::Micros(300_000)));
        assert_eq!("40us".parse(), Ok(TracePoint::Micros(40)));
        for bad in ["", "-3", "2.5", "fast", "-1s", "1e400s"] {
            assert!(bad.parse::<TracePoint>().is_err(), "{bad}");
        }
    }
}
