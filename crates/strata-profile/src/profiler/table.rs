//! PyTorch's `key_averages()`: events grouped by name (and, as asked, by input shapes or
//! scope), with their time and memory columns, sortable by any of them.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::str::FromStr;

use super::record::{OpEvent, OutsideOps};
use crate::format::{bytes_signed, micros};

/// What besides the name makes two events one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupBy {
    /// Rows per distinct operand shapes (PyTorch's `group_by_input_shape`).
    pub input_shapes: bool,
    /// Rows per scope path.
    pub scope: bool,
}

/// The column a table is sorted by (largest first). Parsed from PyTorch's names
/// (`"self_cpu_memory_usage"`, `"cpu_time_total"`, `"count"`; `"calls"` too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Time spent in the op itself.
    SelfCpuTimeTotal,
    /// Time spent in the op and what it called.
    CpuTimeTotal,
    /// Average total time per call.
    CpuTime,
    /// Bytes the op allocated minus bytes it freed, itself.
    SelfCpuMemoryUsage,
    /// The same, with what it called.
    CpuMemoryUsage,
    /// The most bytes held above the start during one call.
    PeakMemory,
    /// Number of calls.
    Count,
}

impl FromStr for SortKey {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "self_cpu_time_total" => SortKey::SelfCpuTimeTotal,
            "cpu_time_total" => SortKey::CpuTimeTotal,
            "cpu_time" => SortKey::CpuTime,
            "self_cpu_memory_usage" => SortKey::SelfCpuMemoryUsage,
            "cpu_memory_usage" => SortKey::CpuMemoryUsage,
            "peak_memory" => SortKey::PeakMemory,
            "count" | "calls" => SortKey::Count,
            other => {
                return Err(format!(
                    "unknown sort key `{other}`: use self_cpu_time_total, cpu_time_total, \
                     cpu_time, self_cpu_memory_usage, cpu_memory_usage, peak_memory or count"
                ))
            }
        })
    }
}

/// One row of the table: every event with one key.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The op or range name (`"[memory]"` for memory freed and allocated outside ops).
    pub name: String,
    /// The operand shapes, when grouped by them (`[[64, 784], [128, 784]]`).
    pub input_shapes: String,
    /// The scope path, when grouped by it.
    pub scope: String,
    /// Number of calls.
    pub count: usize,
    /// Time in the op itself, microseconds, all calls.
    pub self_cpu_time_total: f64,
    /// Time in the op and what it called, microseconds, all calls.
    pub cpu_time_total: f64,
    /// Bytes allocated minus freed while it ran, with what it called, all calls.
    pub cpu_memory_usage: i64,
    /// Bytes allocated minus freed by the op itself, all calls.
    pub self_cpu_memory_usage: i64,
    /// Bytes the op itself allocated, all calls.
    pub self_allocated: usize,
    /// Bytes the op itself freed, all calls.
    pub self_freed: usize,
    /// The largest peak of one call (bytes held above the start).
    pub peak: usize,
}

impl Row {
    /// Average total time per call, microseconds.
    pub fn cpu_time(&self) -> f64 {
        self.cpu_time_total / self.count.max(1) as f64
    }

    fn key(&self, key: SortKey) -> f64 {
        match key {
            SortKey::SelfCpuTimeTotal => self.self_cpu_time_total,
            SortKey::CpuTimeTotal => self.cpu_time_total,
            SortKey::CpuTime => self.cpu_time(),
            SortKey::SelfCpuMemoryUsage => self.self_cpu_memory_usage as f64,
            SortKey::CpuMemoryUsage => self.cpu_memory_usage as f64,
            SortKey::PeakMemory => self.peak as f64,
            SortKey::Count => self.count as f64,
        }
    }
}

/// Events grouped into rows.
#[derive(Debug, Clone)]
pub struct KeyAverages {
    rows: Vec<Row>,
    group: GroupBy,
    self_total: f64,
}

fn shapes(e: &OpEvent) -> String {
    let s: Vec<String> = e.inputs.iter().map(|i| format!("{:?}", i.shape)).collect();
    format!("[{}]", s.join(", "))
}

impl KeyAverages {
    pub(crate) fn new(events: &[OpEvent], outside: OutsideOps, group: GroupBy) -> KeyAverages {
        let mut rows: BTreeMap<(String, String, String), Row> = BTreeMap::new();
        for e in events {
            let shapes = if group.input_shapes {
                shapes(e)
            } else {
                String::new()
            };
            let scope = if group.scope {
                e.scope.to_owned()
            } else {
                String::new()
            };
            let row = rows
                .entry((e.name.to_owned(), shapes.clone(), scope.clone()))
                .or_insert_with(|| Row {
                    name: e.name.to_owned(),
                    input_shapes: shapes,
                    scope,
                    count: 0,
                    self_cpu_time_total: 0.0,
                    cpu_time_total: 0.0,
                    cpu_memory_usage: 0,
                    self_cpu_memory_usage: 0,
                    self_allocated: 0,
                    self_freed: 0,
                    peak: 0,
                });
            row.count += 1;
            row.self_cpu_time_total += e.self_us;
            row.cpu_time_total += e.duration_us;
            row.cpu_memory_usage += e.allocated as i64 - e.freed as i64;
            row.self_cpu_memory_usage += e.self_allocated as i64 - e.self_freed as i64;
            row.self_allocated += e.self_allocated;
            row.self_freed += e.self_freed;
            row.peak = row.peak.max(e.peak);
        }
        let mut rows: Vec<Row> = rows.into_values().collect();
        if outside.events > 0 {
            let net = outside.allocated as i64 - outside.freed as i64;
            rows.push(Row {
                name: "[memory]".to_owned(),
                input_shapes: String::new(),
                scope: String::new(),
                count: outside.events,
                self_cpu_time_total: 0.0,
                cpu_time_total: 0.0,
                cpu_memory_usage: net,
                self_cpu_memory_usage: net,
                self_allocated: outside.allocated,
                self_freed: outside.freed,
                peak: 0,
            });
        }
        let self_total = rows.iter().map(|r| r.self_cpu_time_total).sum();
        KeyAverages {
            rows,
            group,
            self_total,
        }
    }

    /// The rows, in name order until sorted.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The row named `name` (the first, when grouped by shapes or scope).
    pub fn row(&self, name: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.name == name)
    }

    /// The rows sorted by `key`, largest first (ties by name).
    pub fn sorted(&self, key: SortKey) -> Vec<Row> {
        let mut rows = self.rows.clone();
        rows.sort_by(|a, b| {
            b.key(key)
                .partial_cmp(&a.key(key))
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.name.cmp(&b.name))
        });
        rows
    }

    /// Total self time of every row, microseconds (the table's footer).
    pub fn self_cpu_time_total(&self) -> f64 {
        self.self_total
    }

    /// PyTorch's table: the first `row_limit` rows sorted by `key`.
    pub fn table(&self, key: SortKey, row_limit: usize) -> String {
        let rows = self.sorted(key);
        let rows = &rows[..rows.len().min(row_limit)];
        let mut head: Vec<&str> = vec![
            "Name",
            "Self CPU %",
            "Self CPU",
            "CPU total %",
            "CPU total",
            "CPU time avg",
            "CPU Mem",
            "Self CPU Mem",
            "Self Alloc",
            "Self Freed",
            "Peak",
            "# of Calls",
        ];
        if self.group.scope {
            head.push("Scope");
        }
        if self.group.input_shapes {
            head.push("Input Shapes");
        }
        let pct = |v: f64| {
            if self.self_total > 0.0 {
                format!("{:.2}%", 100.0 * v / self.self_total)
            } else {
                "0.00%".to_owned()
            }
        };
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                let mut c = vec![
                    r.name.clone(),
                    pct(r.self_cpu_time_total),
                    micros(r.self_cpu_time_total),
                    pct(r.cpu_time_total),
                    micros(r.cpu_time_total),
                    micros(r.cpu_time()),
                    bytes_signed(r.cpu_memory_usage),
                    bytes_signed(r.self_cpu_memory_usage),
                    bytes_signed(r.self_allocated as i64),
                    bytes_signed(r.self_freed as i64),
                    bytes_signed(r.peak as i64),
                    r.count.to_string(),
                ];
                if self.group.scope {
                    c.push(r.scope.clone());
                }
                if self.group.input_shapes {
                    c.push(r.input_shapes.clone());
                }
                c
            })
            .collect();
        let widths: Vec<usize> = (0..head.len())
            .map(|i| {
                cells
                    .iter()
                    .map(|c| c[i].len())
                    .chain([head[i].len()])
                    .max()
                    .unwrap_or(0)
                    .min(60)
            })
            .collect();
        let rule: String = widths
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ");
        let mut out = String::new();
        let line = |out: &mut String, c: &[String]| {
            let parts: Vec<String> = c
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (v, w))| {
                    let v: String = v.chars().take(*w).collect();
                    let left = i == 0 || (self.group.scope || self.group.input_shapes) && i >= 12;
                    if left {
                        format!("{v:<w$}")
                    } else {
                        format!("{v:>w$}")
                    }
                })
                .collect();
            let _ = writeln!(out, "{}", parts.join("  ").trim_end());
        };
        let _ = writeln!(out, "{rule}");
        line(
            &mut out,
            &head.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        );
        let _ = writeln!(out, "{rule}");
        for c in &cells {
            line(&mut out, c);
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, "Self CPU time total: {}", micros(self.self_total));
        out
    }
}
