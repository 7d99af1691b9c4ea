//! Parsing of the size arguments: memory sizes (`--memory-limit`, `--capacity`) and
//! `--batch-size`; and of `--device`.

/// `cpu`, `meta`, `cuda` or `cuda:N`.
pub(crate) fn parse_device(s: &str) -> Result<strata::core::Device, String> {
    s.parse()
        .map_err(|e: strata::core::device::ParseDeviceError| e.to_string())
}

/// `2GiB`, `512MiB`, `64KiB` or a number of bytes.
pub(crate) fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, unit) = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((t, ""), |i| t.split_at(i));
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" | "K" | "KB" => 1024.0,
        "MiB" | "M" | "MB" => 1024.0 * 1024.0,
        "GiB" | "G" | "GB" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit `{other}`: use bytes, KiB, MiB or GiB"
            ))
        }
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size: write 2GiB, 512MiB or a number of bytes"))?;
    let bytes = n * scale;
    // 2^64 and more cannot be a usize (`as` would quietly give usize::MAX).
    if bytes >= usize::MAX as f64 {
        return Err(format!("`{s}` is more bytes than this machine can address"));
    }
    Ok(bytes as usize)
}

/// `--batch-size`: a number of samples, or `auto` (`None`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchSize(pub(crate) Option<usize>);

/// `auto`, or a positive number of samples.
pub(crate) fn parse_batch_size(s: &str) -> Result<BatchSize, String> {
    if s == "auto" {
        return Ok(BatchSize(None));
    }
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(BatchSize(Some(n))),
        _ => Err(format!(
            "`{s}` is not a batch size: write a positive number or `auto`"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_batch_size, parse_size};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn any_text_is_a_size_or_an_error(s in "\\PC{0,24}") {
            let _ = parse_size(&s);
            let _ = parse_batch_size(&s);
        }

        #[test]
        fn whole_sizes_in_every_unit_are_exact(
            n in 0u64..(1 << 30),
            (unit, scale) in prop::sample::select(vec![
                ("", 1u64), ("B", 1), ("K", 1 << 10), ("KB", 1 << 10), ("KiB", 1 << 10),
                ("M", 1 << 20), ("MB", 1 << 20), ("MiB", 1 << 20), ("G", 1 << 30),
                ("GB", 1 << 30), ("GiB", 1 << 30),
            ]),
        ) {
            prop_assert_eq!(parse_size(&format!("{n}{unit}")), Ok((n * scale) as usize));
        }

        #[test]
        fn sizes_past_the_address_space_are_errors(giga in (1u64 << 34)..u64::MAX) {
            let text = format!("{giga}GiB");
            prop_assert!(parse_size(&text).is_err(), "{text} parsed");
        }
    }

    #[test]
    fn sizes_take_bytes_or_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size(" 1.5 MiB "), Ok(3 * 512 * 1024));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert!(parse_size("3XB").is_err());
        assert!(parse_size("GiB").is_err());
    }

    #[test]
    fn a_batch_size_is_positive_or_auto() {
        assert_eq!(parse_batch_size("auto").map(|b| b.0), Ok(None));
        assert_eq!(parse_batch_size("32").map(|b| b.0), Ok(Some(32)));
        assert!(parse_batch_size("0").is_err());
        assert!(parse_batch_size("-1").is_err());
    }
}
