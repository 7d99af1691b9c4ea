//! The Chrome trace-event format (what `chrome://tracing` and Perfetto open): each op as a
//! begin/end pair on its thread, memory as counter tracks, thread names as metadata; and a
//! checker of the format's rules.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Map, Value};

use super::record::{MemorySample, OpEvent};

const PID: u64 = 1;

fn args(e: &OpEvent) -> Value {
    let mut a = Map::new();
    if !e.location.is_empty() {
        a.insert("Source".into(), json!(e.location));
    }
    if !e.scope.is_empty() {
        a.insert("Scope".into(), json!(e.scope));
    }
    if !e.inputs.is_empty() {
        let dims: Vec<Value> = e.inputs.iter().map(|i| json!(i.shape)).collect();
        let types: Vec<Value> = e
            .inputs
            .iter()
            .map(|i| json!(format!("{}", i.dtype)))
            .collect();
        a.insert("Input Dims".into(), Value::Array(dims));
        a.insert("Input type".into(), Value::Array(types));
    }
    a.insert("Allocated".into(), json!(e.allocated));
    a.insert("Freed".into(), json!(e.freed));
    a.insert("Self Allocated".into(), json!(e.self_allocated));
    a.insert("Self Freed".into(), json!(e.self_freed));
    a.insert("Peak".into(), json!(e.peak));
    Value::Object(a)
}

/// The trace of `events` (sorted by thread, start, depth) and `samples`.
pub(crate) fn to_chrome_trace(events: &[OpEvent], samples: &[MemorySample]) -> String {
    let mut out: Vec<Value> = vec![json!({
        "ph": "M", "name": "process_name", "pid": PID, "tid": 0,
        "args": {"name": "strata"}
    })];
    let mut by_thread: BTreeMap<u64, Vec<&OpEvent>> = BTreeMap::new();
    for e in events {
        by_thread.entry(e.thread).or_default().push(e);
    }
    for (tid, mut evs) in by_thread {
        out.push(json!({
            "ph": "M", "name": "thread_name", "pid": PID, "tid": tid,
            "args": {"name": format!("thread {tid}")}
        }));
        evs.sort_by(|a, b| {
            (a.start_us, a.depth)
                .partial_cmp(&(b.start_us, b.depth))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        // Emit begins in start order, closing what ended first; clamp so that timestamps
        // never go back (rounding can put a child's end a hair after its parent's).
        let mut open: Vec<(&OpEvent, f64)> = Vec::new();
        let mut last = 0.0f64;
        let end = |out: &mut Vec<Value>, e: &OpEvent, ts: f64, last: &mut f64| {
            let ts = ts.max(*last);
            *last = ts;
            out.push(json!({"ph": "E", "name": e.name, "pid": PID, "tid": tid, "ts": ts}));
        };
        for e in evs {
            while let Some(&(top, top_end)) = open.last() {
                if top.depth >= e.depth || top_end <= e.start_us {
                    open.pop();
                    end(&mut out, top, top_end, &mut last);
                } else {
                    break;
                }
            }
            let ts = e.start_us.max(last);
            last = ts;
            let cat = if e.is_range {
                "user_annotation"
            } else {
                "cpu_op"
            };
            out.push(json!({
                "ph": "B", "name": e.name, "cat": cat, "pid": PID, "tid": tid, "ts": ts,
                "args": args(e)
            }));
            let parent_end = open.last().map_or(f64::INFINITY, |p| p.1);
            open.push((e, (e.start_us + e.duration_us).min(parent_end)));
        }
        while let Some((top, top_end)) = open.pop() {
            end(&mut out, top, top_end, &mut last);
        }
    }
    for s in samples {
        out.push(json!({
            "ph": "C", "name": format!("Memory ({})", s.device), "pid": PID, "tid": 0,
            "ts": s.time_us, "args": {"allocated": s.allocated}
        }));
    }
    json!({"traceEvents": out, "displayTimeUnit": "ms"}).to_string()
}

/// What [`validate_chrome_trace`] found in a valid trace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceSummary {
    /// Begin/end pairs and complete events.
    pub durations: usize,
    /// Counter samples.
    pub counters: usize,
    /// Metadata events.
    pub metadata: usize,
    /// Threads with duration events.
    pub threads: usize,
}

fn field<'a>(e: &'a Map<String, Value>, k: &str, i: usize) -> Result<&'a Value, String> {
    e.get(k)
        .ok_or_else(|| format!("event {i}: `{k}` is missing"))
}

fn number(e: &Map<String, Value>, k: &str, i: usize) -> Result<f64, String> {
    field(e, k, i)?
        .as_f64()
        .ok_or_else(|| format!("event {i}: `{k}` is not a number"))
}

/// Checks `json` against the trace-event format's rules: an object with a `traceEvents`
/// array (or the array alone); every event has a known `ph`, `pid` and `tid`, and a numeric
/// non-negative `ts` unless it is metadata; complete events (`X`) have a `dur`; every end
/// (`E`) closes the last open begin (`B`) of its thread, with the same name when it gives
/// one, and every begin is closed; counters (`C`) carry numeric `args`; metadata (`M`) names
/// its kind and carries `args.name`; and on each thread, and on each counter track, time
/// never goes back.
pub fn validate_chrome_trace(json: &str) -> Result<TraceSummary, String> {
    let v: Value = serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
    let events = match &v {
        Value::Array(a) => a,
        Value::Object(o) => o
            .get("traceEvents")
            .and_then(Value::as_array)
            .ok_or("the object has no `traceEvents` array")?,
        _ => return Err("a trace is an object or an array".into()),
    };
    let mut summary = TraceSummary::default();
    let mut stacks: HashMap<(String, String), Vec<String>> = HashMap::new();
    let mut last_ts: HashMap<String, f64> = HashMap::new();
    for (i, ev) in events.iter().enumerate() {
        let e = ev
            .as_object()
            .ok_or_else(|| format!("event {i} is not an object"))?;
        let ph = field(e, "ph", i)?
            .as_str()
            .ok_or_else(|| format!("event {i}: `ph` is not a string"))?;
        let pid = field(e, "pid", i)?.to_string();
        let tid = field(e, "tid", i)?.to_string();
        let name = e.get("name").and_then(Value::as_str);
        if ph == "M" {
            let kind = name.ok_or_else(|| format!("event {i}: metadata without a name"))?;
            if !matches!(
                kind,
                "process_name"
                    | "process_labels"
                    | "process_sort_index"
                    | "thread_name"
                    | "thread_sort_index"
            ) {
                return Err(format!("event {i}: unknown metadata `{kind}`"));
            }
            if kind.ends_with("_name") && e.get("args").and_then(|a| a.get("name")).is_none() {
                return Err(format!("event {i}: {kind} without `args.name`"));
            }
            summary.metadata += 1;
            continue;
        }
        let ts = number(e, "ts", i)?;
        if ts < 0.0 {
            return Err(format!("event {i}: negative timestamp {ts}"));
        }
        let track = match ph {
            "C" => format!("counter {pid} {}", name.unwrap_or("")),
            _ => format!("thread {pid} {tid}"),
        };
        let last = last_ts.entry(track.clone()).or_insert(ts);
        if ts < *last {
            return Err(format!(
                "event {i}: time goes back on {track} ({ts} < {last})"
            ));
        }
        *last = ts;
        match ph {
            "B" => {
                let n = name.ok_or_else(|| format!("event {i}: a begin without a name"))?;
                stacks.entry((pid, tid)).or_default().push(n.to_owned());
            }
            "E" => {
                let open = stacks
                    .get_mut(&(pid, tid.clone()))
                    .and_then(Vec::pop)
                    .ok_or_else(|| format!("event {i}: an end with no open begin on {tid}"))?;
                if let Some(n) = name {
                    if n != open {
                        return Err(format!("event {i}: `{n}` ends while `{open}` is open"));
                    }
                }
                summary.durations += 1;
            }
            "X" => {
                name.ok_or_else(|| format!("event {i}: a complete event without a name"))?;
                if number(e, "dur", i)? < 0.0 {
                    return Err(format!("event {i}: negative duration"));
                }
                summary.durations += 1;
            }
            "C" => {
                name.ok_or_else(|| format!("event {i}: a counter without a name"))?;
                let a = field(e, "args", i)?
                    .as_object()
                    .ok_or_else(|| format!("event {i}: counter args are not an object"))?;
                if a.is_empty() || !a.values().all(Value::is_number) {
                    return Err(format!("event {i}: counter args must be numbers"));
                }
                summary.counters += 1;
            }
            "i" | "I" | "b" | "e" | "n" | "s" | "t" | "f" | "P" | "O" | "N" | "D" => {}
            other => return Err(format!("event {i}: unknown phase `{other}`")),
        }
    }
    if let Some(((_, tid), open)) = stacks.iter().find(|(_, s)| !s.is_empty()) {
        return Err(format!("`{}` on thread {tid} never ends", open[0]));
    }
    summary.threads = last_ts.keys().filter(|k| k.starts_with("thread")).count();
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_breaks_the_rules() {
        let ok = r#"{"traceEvents":[{"ph":"B","name":"a","pid":1,"tid":1,"ts":1},
            {"ph":"E","name":"a","pid":1,"tid":1,"ts":2}]}"#;
        assert_eq!(validate_chrome_trace(ok).map(|s| s.durations), Ok(1));
        let unmatched = r#"[{"ph":"B","name":"a","pid":1,"tid":1,"ts":1}]"#;
        assert!(validate_chrome_trace(unmatched).is_err());
        let crossed = r#"[{"ph":"B","name":"a","pid":1,"tid":1,"ts":1},
            {"ph":"B","name":"b","pid":1,"tid":1,"ts":2},
            {"ph":"E","name":"a","pid":1,"tid":1,"ts":3},
            {"ph":"E","name":"b","pid":1,"tid":1,"ts":4}]"#;
        assert!(validate_chrome_trace(crossed).is_err());
        let back = r#"[{"ph":"B","name":"a","pid":1,"tid":1,"ts":5},
            {"ph":"E","name":"a","pid":1,"tid":1,"ts":4}]"#;
        assert!(validate_chrome_trace(back).is_err());
        let no_dur = r#"[{"ph":"X","name":"a","pid":1,"tid":1,"ts":5}]"#;
        assert!(validate_chrome_trace(no_dur).is_err());
        let counter = r#"[{"ph":"C","name":"m","pid":1,"tid":0,"ts":5,"args":{"a":"x"}}]"#;
        assert!(validate_chrome_trace(counter).is_err());
        let no_pid = r#"[{"ph":"B","name":"a","tid":1,"ts":5}]"#;
        assert!(validate_chrome_trace(no_pid).is_err());
    }
}
