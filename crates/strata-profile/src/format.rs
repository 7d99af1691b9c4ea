//! How reports write bytes and times.

/// Signed bytes for the profiler's table, with PyTorch's two decimals but the binary unit
/// names the rest of strata prints (PyTorch's table says `Mb` for 1024² bytes):
/// `4.00 MiB`, `-512 B`, `1.50 GiB`.
pub(crate) fn bytes_signed(b: i64) -> String {
    let a = b.unsigned_abs() as f64;
    let sign = if b < 0 { "-" } else { "" };
    const K: f64 = 1024.0;
    if a >= K * K * K {
        format!("{sign}{:.2} GiB", a / (K * K * K))
    } else if a >= K * K {
        format!("{sign}{:.2} MiB", a / (K * K))
    } else if a >= K {
        format!("{sign}{:.2} KiB", a / K)
    } else {
        format!("{sign}{a} B")
    }
}

/// Bytes for reports: `4.0 MiB`, `40.0 KiB`, `512 B`.
pub(crate) fn bytes(b: usize) -> String {
    let a = b as f64;
    const K: f64 = 1024.0;
    if a >= K * K * K {
        format!("{:.1} GiB", a / (K * K * K))
    } else if a >= K * K {
        format!("{:.1} MiB", a / (K * K))
    } else if a >= K {
        format!("{:.1} KiB", a / K)
    } else {
        format!("{b} B")
    }
}

/// A site as reports name it: `file:line (op)`, or `file:line (scope, op)` inside a scope.
pub(crate) fn place(s: &strata_alloc::Site) -> String {
    if s.scope.is_empty() {
        format!("{}:{} ({})", s.file, s.line, s.op)
    } else {
        format!("{}:{} ({}, {})", s.file, s.line, s.scope, s.op)
    }
}

/// Microseconds as PyTorch's profiler writes times: `12.345us`, `1.234ms`, `2.000s`.
pub(crate) fn micros(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.3}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.3}ms", us / 1e3)
    } else {
        format!("{us:.3}us")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_follow_the_size() {
        assert_eq!(bytes_signed(-512), "-512 B");
        assert_eq!(bytes_signed(4 << 20), "4.00 MiB");
        assert_eq!(bytes_signed(-(3 << 9)), "-1.50 KiB");
        assert_eq!(bytes_signed(3 << 29), "1.50 GiB");
        assert_eq!(bytes(40 * 1024), "40.0 KiB");
        assert_eq!(bytes(400 << 20), "400.0 MiB");
        assert_eq!(micros(1234.0), "1.234ms");
        assert_eq!(micros(12.3456), "12.346us");
    }
}
