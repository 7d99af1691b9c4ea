//! Constants, size rounding and the `STRATA_ALLOC_CONF` settings.

use std::fmt;

/// Every request is rounded up to a multiple of this many bytes; also the smallest remainder a
/// small-pool (or expandable) block is split off at.
pub const MIN_BLOCK_SIZE: usize = 512;
/// Requests of at most this many bytes (after rounding) go to the small pool.
pub const SMALL_SIZE: usize = 1 << 20;
/// Segment size of the small pool, and page size of small expandable segments.
pub const SMALL_BUFFER: usize = 2 << 20;
/// Large requests below this size get a whole [`LARGE_BUFFER`] segment.
pub const MIN_LARGE_ALLOC: usize = 10 << 20;
/// Segment size for requests in (1 MiB, 10 MiB); page size of large expandable segments.
pub const LARGE_BUFFER: usize = 20 << 20;
/// Segments for requests of 10 MiB and more are rounded up to a multiple of this.
pub const ROUND_LARGE: usize = 2 << 20;
/// Number of power-of-two size buckets (1 MiB .. 64 GiB) for `roundup_power2_divisions`.
pub const ROUNDUP_INTERVALS: usize = 16;
/// Requests of this many bytes (1 EiB) or more are refused outright.
pub const MAX_REQUEST: usize = 1 << 60;

/// The environment variable [`AllocatorConfig::from_env`] reads.
pub const ENV_VAR: &str = "STRATA_ALLOC_CONF";

/// Where a CUDA device's allocator reads its settings, first set wins: strata's variable,
/// then PyTorch's current name and its older one.
pub const CUDA_ENV_VARS: [&str; 3] = [ENV_VAR, "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"];

/// Which pool a block belongs to.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PoolKind {
    /// Blocks of at most 1 MiB, carved from 2 MiB segments.
    Small,
    /// Everything larger.
    Large,
}

impl PoolKind {
    /// The pool a rounded size goes to.
    pub fn for_size(rounded: usize) -> PoolKind {
        if rounded <= SMALL_SIZE {
            PoolKind::Small
        } else {
            PoolKind::Large
        }
    }

    #[inline]
    pub(crate) fn index(self) -> usize {
        match self {
            PoolKind::Small => 0,
            PoolKind::Large => 1,
        }
    }

    /// `"small"` or `"large"`, as in snapshots.
    pub fn as_str(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
}

/// The size of the segment requested from the backing when no cached block fits a request of
/// `rounded` bytes: 2 MiB for the small pool, 20 MiB for requests under 10 MiB, otherwise the
/// request rounded up to 2 MiB.
pub fn allocation_size(rounded: usize) -> usize {
    if rounded <= SMALL_SIZE {
        SMALL_BUFFER
    } else if rounded < MIN_LARGE_ALLOC {
        LARGE_BUFFER
    } else {
        rounded.next_multiple_of(ROUND_LARGE)
    }
}

/// Which allocator serves memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// The caching allocator (`backend:native`, the default).
    #[default]
    Native,
    /// No caching (`backend:system`): every request gets its own segment of its rounded size,
    /// returned to the backing as soon as it is freed. Statistics, history and snapshots still
    /// work. The analogue of PyTorch's `PYTORCH_NO_CUDA_MEMORY_CACHING`.
    System,
}

/// Allocator settings, with the keys and syntax of PyTorch's `PYTORCH_CUDA_ALLOC_CONF`.
///
/// ```
/// use strata_alloc::AllocatorConfig;
/// let c = AllocatorConfig::parse(
///     "max_split_size_mb:128,roundup_power2_divisions:[256:1,512:2,>:8],\
///      garbage_collection_threshold:0.6,expandable_segments:False",
/// )
/// .unwrap();
/// assert_eq!(c.max_split_size, Some(128 << 20));
/// assert_eq!(c.roundup_power2_divisions[9], 2);
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AllocatorConfig {
    /// `backend:native|system`.
    pub backend: Backend,
    /// `max_split_size_mb`: blocks of this size or more are never split and are reused only for
    /// requests within [`max_non_split_rounding`](Self::max_non_split_rounding) of their size.
    /// `None` (the default) means unlimited.
    pub max_split_size: Option<usize>,
    /// `max_non_split_rounding_mb` (default 20 MiB).
    pub max_non_split_rounding: usize,
    /// `roundup_power2_divisions`, per power-of-two bucket: bucket `i` holds sizes in
    /// `[2^(20+i), 2^(21+i))` bytes (smaller sizes use bucket 0, larger ones bucket 15).
    /// 0 or 1 means plain 512-byte rounding.
    pub roundup_power2_divisions: [usize; ROUNDUP_INTERVALS],
    /// `garbage_collection_threshold` in (0, 1); 0 = off. Only acts while a memory limit is set.
    pub garbage_collection_threshold: f64,
    /// `expandable_segments:True|False`.
    pub expandable_segments: bool,
    /// `per_process_memory_fraction` in [0, 1], applied when the allocator is created.
    pub per_process_memory_fraction: Option<f64>,
    /// The text this configuration was parsed from (empty for the default).
    pub raw: String,
}

impl Default for AllocatorConfig {
    fn default() -> Self {
        AllocatorConfig {
            backend: Backend::Native,
            max_split_size: None,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            per_process_memory_fraction: None,
            raw: String::new(),
        }
    }
}

/// An invalid allocator setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The option at fault (or the offending token when no option could be read).
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid allocator setting `{}`: {}",
            self.key, self.message
        )
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        message: message.into(),
    }
}

const KNOWN_KEYS: &str = "backend, max_split_size_mb, max_non_split_rounding_mb, \
    roundup_power2_divisions, garbage_collection_threshold, expandable_segments, \
    per_process_memory_fraction, release_lock_on_cudamalloc, pinned_use_cuda_host_register, \
    pinned_num_register_threads, pinned_use_background_threads";

/// Splits on `,` `:` `[` `]` (each its own token), dropping whitespace.
fn tokenize(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in s.chars() {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !cur.trim().is_empty() {
                out.push(cur.trim().to_string());
            }
            cur.clear();
            out.push(c.to_string());
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

struct Tokens {
    toks: Vec<String>,
    pos: usize,
}

impl Tokens {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.pos).map(String::as_str)
    }
    fn next(&mut self) -> Option<String> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn expect(&mut self, key: &str, what: &str) -> Result<(), ConfigError> {
        match self.next() {
            Some(t) if t == what => Ok(()),
            Some(t) => Err(err(key, format!("expected `{what}`, found `{t}`"))),
            None => Err(err(key, format!("expected `{what}` but the setting ended"))),
        }
    }
    fn value(&mut self, key: &str) -> Result<String, ConfigError> {
        match self.next() {
            Some(t) if !matches!(t.as_str(), "," | ":" | "[" | "]") => Ok(t),
            Some(t) => Err(err(key, format!("expected a value, found `{t}`"))),
            None => Err(err(key, "missing value")),
        }
    }
}

fn parse_bool(key: &str, v: &str) -> Result<bool, ConfigError> {
    match v {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(err(key, format!("expected `True` or `False`, found `{v}`"))),
    }
}

fn parse_mb(key: &str, v: &str, min: usize) -> Result<usize, ConfigError> {
    let mb: usize = v
        .parse()
        .map_err(|_| err(key, format!("expected a whole number of MiB, found `{v}`")))?;
    if mb < min {
        return Err(err(
            key,
            format!("{mb} is too small, it must be at least {min}"),
        ));
    }
    mb.checked_mul(1 << 20)
        .ok_or_else(|| err(key, format!("{mb} MiB is larger than the address space")))
}

fn parse_divisions(key: &str, v: &str) -> Result<usize, ConfigError> {
    let d: usize = v
        .parse()
        .map_err(|_| err(key, format!("expected a number of divisions, found `{v}`")))?;
    if d != 0 && !d.is_power_of_two() {
        return Err(err(
            key,
            format!("{d} divisions: the number of divisions must be 0 or a power of two"),
        ));
    }
    Ok(d)
}

fn parse_fraction(key: &str, v: &str) -> Result<f64, ConfigError> {
    v.parse::<f64>()
        .ok()
        .filter(|f| f.is_finite())
        .ok_or_else(|| err(key, format!("expected a number, found `{v}`")))
}

impl AllocatorConfig {
    /// Parses `key:value,key:value` settings, with the keys of `PYTORCH_CUDA_ALLOC_CONF`:
    ///
    /// * `backend:native|system`
    /// * `max_split_size_mb:<MiB ≥ 20>`
    /// * `max_non_split_rounding_mb:<MiB ≥ 20>`
    /// * `roundup_power2_divisions:<d>` or `roundup_power2_divisions:[<MiB>:<d>,…,>:<d>]`, each
    ///   `d` 0 or a power of two. In the list form a key `K` (a power of two, in MiB) sets the
    ///   bucket starting at `K` MiB; the first key also sets every bucket below it and `>` sets
    ///   every bucket after the last key (PyTorch's 2025 parser; older releases overwrote the
    ///   last key's bucket too).
    /// * `garbage_collection_threshold:<t in (0, 1)>`
    /// * `expandable_segments:True|False`
    /// * `per_process_memory_fraction:<f in [0, 1]>`
    /// * `release_lock_on_cudamalloc`, `pinned_use_cuda_host_register`,
    ///   `pinned_num_register_threads`, `pinned_use_background_threads`: checked and accepted so
    ///   a PyTorch setting string works unchanged, but they have no effect here.
    ///
    /// Whitespace is ignored; an empty string gives the defaults. Anything else is an error
    /// that names the offending key.
    pub fn parse(s: &str) -> Result<AllocatorConfig, ConfigError> {
        let mut c = AllocatorConfig {
            raw: s.to_string(),
            ..AllocatorConfig::default()
        };
        let mut t = Tokens {
            toks: tokenize(s),
            pos: 0,
        };
        while let Some(key) = t.next() {
            if key == "," {
                continue;
            }
            if matches!(key.as_str(), ":" | "[" | "]") {
                return Err(err(&key, "expected an option name"));
            }
            t.expect(&key, ":")?;
            match key.as_str() {
                "backend" => {
                    let v = t.value(&key)?;
                    c.backend = match v.as_str() {
                        "native" => Backend::Native,
                        "system" => Backend::System,
                        _ => {
                            return Err(err(
                                &key,
                                format!("expected `native` or `system`, found `{v}`"),
                            ))
                        }
                    }
                }
                "max_split_size_mb" => {
                    let v = t.value(&key)?;
                    c.max_split_size = Some(parse_mb(&key, &v, LARGE_BUFFER >> 20)?);
                }
                "max_non_split_rounding_mb" => {
                    let v = t.value(&key)?;
                    c.max_non_split_rounding = parse_mb(&key, &v, LARGE_BUFFER >> 20)?;
                }
                "roundup_power2_divisions" => {
                    c.roundup_power2_divisions = Self::parse_roundup(&key, &mut t)?;
                }
                "garbage_collection_threshold" => {
                    let v = t.value(&key)?;
                    let f = parse_fraction(&key, &v)?;
                    if !(f > 0.0 && f < 1.0) {
                        return Err(err(
                            &key,
                            format!("{f} is out of range; it must lie in (0.0, 1.0)"),
                        ));
                    }
                    c.garbage_collection_threshold = f;
                }
                "expandable_segments" => {
                    let v = t.value(&key)?;
                    c.expandable_segments = parse_bool(&key, &v)?;
                }
                "per_process_memory_fraction" => {
                    let v = t.value(&key)?;
                    let f = parse_fraction(&key, &v)?;
                    if !(0.0..=1.0).contains(&f) {
                        return Err(err(
                            &key,
                            format!("{f} is out of range; it must lie in [0.0, 1.0]"),
                        ));
                    }
                    c.per_process_memory_fraction = Some(f);
                }
                "release_lock_on_cudamalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_background_threads" => {
                    let v = t.value(&key)?;
                    parse_bool(&key, &v)?;
                }
                "pinned_num_register_threads" => {
                    let v = t.value(&key)?;
                    match v.parse::<usize>() {
                        Ok(n) if n.is_power_of_two() && n <= 128 => {}
                        _ => {
                            return Err(err(
                                &key,
                                format!("expected a power of two up to 128, found `{v}`"),
                            ))
                        }
                    }
                }
                _ => {
                    return Err(err(
                        &key,
                        format!("unknown option; the options are {KNOWN_KEYS}"),
                    ))
                }
            }
            match t.peek() {
                None | Some(",") => {}
                Some(other) => {
                    return Err(err(
                        &key,
                        format!("expected `,` after the value, found `{other}`"),
                    ))
                }
            }
        }
        Ok(c)
    }

    fn parse_roundup(key: &str, t: &mut Tokens) -> Result<[usize; ROUNDUP_INTERVALS], ConfigError> {
        let mut out = [0; ROUNDUP_INTERVALS];
        if t.peek() != Some("[") {
            let v = t.value(key)?;
            let d = parse_divisions(key, &v)?;
            return Ok([d; ROUNDUP_INTERVALS]);
        }
        t.next();
        let mut last: Option<usize> = None;
        let mut first = true;
        loop {
            let k = t.value(key)?;
            t.expect(key, ":")?;
            let v = t.value(key)?;
            let d = parse_divisions(key, &v)?;
            if k == ">" {
                let from = last.map_or(0, |l| l + 1);
                for slot in out.iter_mut().skip(from) {
                    *slot = d;
                }
                last = Some(ROUNDUP_INTERVALS - 1);
            } else {
                let mb: usize = k
                    .parse()
                    .ok()
                    .filter(|m: &usize| m.is_power_of_two())
                    .ok_or_else(|| {
                        err(
                            key,
                            format!("interval start `{k}` must be a power of two (in MiB) or `>`"),
                        )
                    })?;
                let idx = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                if let Some(l) = last {
                    if idx <= l {
                        return Err(err(
                            key,
                            format!("interval `{k}` must come after the intervals before it"),
                        ));
                    }
                }
                if first {
                    for slot in out.iter_mut().take(idx + 1) {
                        *slot = d;
                    }
                } else {
                    out[idx] = d;
                }
                last = Some(idx);
            }
            first = false;
            match t.next().as_deref() {
                Some(",") => continue,
                Some("]") => break,
                Some(other) => {
                    return Err(err(key, format!("expected `,` or `]`, found `{other}`")))
                }
                None => return Err(err(key, "missing `]`")),
            }
        }
        Ok(out)
    }

    /// Reads the first of `vars` that is set (unset everywhere or empty: the defaults); an
    /// error names the variable it came from. A CUDA device reads [`CUDA_ENV_VARS`], so a
    /// PyTorch user's `PYTORCH_CUDA_ALLOC_CONF` carries over.
    pub fn from_env_vars(vars: &[&str]) -> Result<AllocatorConfig, ConfigError> {
        for var in vars {
            match std::env::var(var) {
                Ok(s) => {
                    return Self::parse(&s).map_err(|e| ConfigError {
                        message: format!("{} (read from {var})", e.message),
                        ..e
                    })
                }
                Err(std::env::VarError::NotPresent) => continue,
                Err(std::env::VarError::NotUnicode(_)) => {
                    return Err(err(var, "the variable is not valid UTF-8"))
                }
            }
        }
        Ok(Self::default())
    }

    /// Reads `STRATA_ALLOC_CONF`; unset or empty gives the defaults.
    pub fn from_env() -> Result<AllocatorConfig, ConfigError> {
        match std::env::var(ENV_VAR) {
            Ok(s) => Self::parse(&s),
            Err(std::env::VarError::NotPresent) => Ok(Self::default()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(err(ENV_VAR, "the variable is not valid UTF-8"))
            }
        }
    }

    /// `max_split_size` in bytes, `usize::MAX` when unlimited.
    #[inline]
    pub fn max_split_size_bytes(&self) -> usize {
        self.max_split_size.unwrap_or(usize::MAX)
    }

    /// The `roundup_power2_divisions` setting that applies to a request of `size` bytes.
    #[inline]
    pub fn roundup_divisions(&self, size: usize) -> usize {
        let log = usize::BITS as usize - 1 - size.max(1).leading_zeros() as usize;
        let idx = log.saturating_sub(20).min(ROUNDUP_INTERVALS - 1);
        self.roundup_power2_divisions[idx]
    }

    /// PyTorch's `round_size`: what a request of `n` bytes occupies. At least 512 bytes; a
    /// multiple of 512, or, where `roundup_power2_divisions` applies, the next of `d` equal
    /// steps between two powers of two (a power of two itself is kept).
    #[inline]
    pub fn round_size(&self, n: usize) -> usize {
        if n < MIN_BLOCK_SIZE {
            return MIN_BLOCK_SIZE;
        }
        let d = self.roundup_divisions(n);
        if d > 1 && n > MIN_BLOCK_SIZE.saturating_mul(d) {
            return next_power2_division(n, d);
        }
        n.next_multiple_of(MIN_BLOCK_SIZE)
    }
}

/// Rounds `n` up to the next of `d` (a power of two) equal steps between the powers of two
/// around it; a power of two is kept.
fn next_power2_division(n: usize, d: usize) -> usize {
    if n.is_power_of_two() {
        return n;
    }
    let floor2 = 1usize << (usize::BITS - 1 - n.leading_zeros());
    let step = floor2 >> d.trailing_zeros();
    if step == 0 {
        return floor2 << 1;
    }
    n.next_multiple_of(step)
}

#[cfg(test)]
mod tests {
    use super::*;
    const MIB: usize = 1 << 20;

    /// Settings strings from the keys' own vocabulary, shuffled and mistyped: every one is a
    /// configuration or an error, never a panic, and an accepted one keeps its string.
    mod parse_properties {
        use super::*;
        use proptest::prelude::*;

        fn piece() -> impl Strategy<Value = String> {
            let words = prop::sample::select(vec![
                "backend",
                "native",
                "system",
                "max_split_size_mb",
                "max_non_split_rounding_mb",
                "roundup_power2_divisions",
                "garbage_collection_threshold",
                "expandable_segments",
                "per_process_memory_fraction",
                "True",
                "False",
                ">",
                "release_lock_on_cudamalloc",
                "pinned_num_register_threads",
                ":",
                ",",
                "[",
                "]",
                " ",
                "0",
                "1",
                "2",
                "20",
                "64",
                "0.5",
                "1e400",
                "-1",
                "18446744073709551616",
                "nan",
                "\u{0}",
                "é",
            ]);
            prop::collection::vec(words, 0..24).prop_map(|w| w.concat())
        }

        proptest! {
            #[test]
            fn any_text_is_a_configuration_or_an_error(s in "\\PC{0,64}") {
                if let Ok(c) = AllocatorConfig::parse(&s) {
                    prop_assert_eq!(c.raw, s);
                }
            }

            #[test]
            fn keys_and_values_in_any_order_are_a_configuration_or_an_error(s in piece()) {
                if let Ok(c) = AllocatorConfig::parse(&s) {
                    let fraction = c.per_process_memory_fraction;
                    prop_assert!(fraction.is_none_or(|f| (0.0..=1.0).contains(&f)));
                    prop_assert_eq!(c.raw, s);
                }
            }
        }
    }

    #[test]
    fn rounding_examples_from_the_reference() {
        let c = AllocatorConfig::default();
        assert_eq!(c.round_size(1), 512);
        assert_eq!(c.round_size(100), 512);
        assert_eq!(c.round_size(512), 512);
        assert_eq!(c.round_size(513), 1024);
        assert_eq!(c.round_size(3 * MIB + 1), 3 * MIB + 512);
        // The reference's division example: 1200 bytes in 4 divisions -> floor 1024, step 256.
        assert_eq!(next_power2_division(1200, 4), 1280);
        assert_eq!(next_power2_division(1024, 4), 1024);
        assert_eq!(next_power2_division(1280, 4), 1280);
        assert_eq!(next_power2_division(3, 4), 4);
    }

    #[test]
    fn power2_divisions() {
        let mut c = AllocatorConfig {
            roundup_power2_divisions: [4; ROUNDUP_INTERVALS],
            ..AllocatorConfig::default()
        };
        // Below 512 * d the plain rounding applies.
        assert_eq!(c.round_size(1200), 1536);
        assert_eq!(c.round_size(5000), 5120); // floor 4096, step 1024
        assert_eq!(c.round_size(4096), 4096);
        assert_eq!(c.round_size(5 * MIB + 1), 6 * MIB); // step 1 MiB
        assert_eq!(c.round_size(1_300_000), 1_310_720); // floor 1 MiB, step 256 KiB
        c.roundup_power2_divisions = [1; ROUNDUP_INTERVALS];
        assert_eq!(c.round_size(5 * MIB + 1), 5 * MIB + 512); // 1 means off
        let big = AllocatorConfig {
            roundup_power2_divisions: [1 << 30; ROUNDUP_INTERVALS],
            ..AllocatorConfig::default()
        };
        assert_eq!(big.round_size(1 << 50 | 1), (1 << 50) + (1 << 20));
    }

    #[test]
    fn allocation_sizes() {
        assert_eq!(allocation_size(512), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB), SMALL_BUFFER);
        assert_eq!(allocation_size(MIB + 512), LARGE_BUFFER);
        assert_eq!(allocation_size(3 * MIB), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB - 512), LARGE_BUFFER);
        assert_eq!(allocation_size(10 * MIB), 10 * MIB);
        assert_eq!(allocation_size(11 * MIB), 12 * MIB);
        assert_eq!(PoolKind::for_size(MIB), PoolKind::Small);
        assert_eq!(PoolKind::for_size(MIB + 512), PoolKind::Large);
    }

    #[test]
    fn parses_every_key() {
        let c = AllocatorConfig::parse(
            " backend:system, max_split_size_mb:64 ,max_non_split_rounding_mb:32,\
             garbage_collection_threshold:0.5,expandable_segments:True,\
             per_process_memory_fraction:0.25,release_lock_on_cudamalloc:True,\
             pinned_num_register_threads:8",
        )
        .unwrap();
        assert_eq!(c.backend, Backend::System);
        assert_eq!(c.max_split_size, Some(64 * MIB));
        assert_eq!(c.max_non_split_rounding, 32 * MIB);
        assert_eq!(c.garbage_collection_threshold, 0.5);
        assert!(c.expandable_segments);
        assert_eq!(c.per_process_memory_fraction, Some(0.25));
        assert_eq!(
            AllocatorConfig::parse("").unwrap(),
            AllocatorConfig::default()
        );
    }

    #[test]
    fn roundup_list_form() {
        let c =
            AllocatorConfig::parse("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]").unwrap();
        let d = c.roundup_power2_divisions;
        assert_eq!(&d[..9], &[1; 9]);
        assert_eq!(d[9], 2);
        assert_eq!(d[10], 4);
        assert_eq!(&d[11..], &[8; 5]);
        let c = AllocatorConfig::parse("roundup_power2_divisions:4").unwrap();
        assert_eq!(c.roundup_power2_divisions, [4; 16]);
        let c = AllocatorConfig::parse("roundup_power2_divisions:[>:2]").unwrap();
        assert_eq!(c.roundup_power2_divisions, [2; 16]);
        assert_eq!(c.roundup_divisions(100), 2);
        assert_eq!(c.roundup_divisions(1 << 40), 2);
    }

    #[test]
    fn errors_name_the_key() {
        for (s, key) in [
            ("max_split_size_mb:10", "max_split_size_mb"),
            ("max_split_size_mb:abc", "max_split_size_mb"),
            (
                "garbage_collection_threshold:1.0",
                "garbage_collection_threshold",
            ),
            (
                "garbage_collection_threshold:0",
                "garbage_collection_threshold",
            ),
            ("expandable_segments:true", "expandable_segments"),
            ("roundup_power2_divisions:3", "roundup_power2_divisions"),
            (
                "roundup_power2_divisions:[300:2]",
                "roundup_power2_divisions",
            ),
            (
                "roundup_power2_divisions:[512:2,256:4]",
                "roundup_power2_divisions",
            ),
            (
                "roundup_power2_divisions:[256:2",
                "roundup_power2_divisions",
            ),
            ("backend:cudaMallocAsync", "backend"),
            ("no_such_key:1", "no_such_key"),
            ("expandable_segments", "expandable_segments"),
            ("expandable_segments:True:False", "expandable_segments"),
            (
                "per_process_memory_fraction:1.5",
                "per_process_memory_fraction",
            ),
        ] {
            let e = AllocatorConfig::parse(s).unwrap_err();
            assert_eq!(e.key, key, "{s}: {e}");
            assert!(e.to_string().contains(key));
        }
    }
}
