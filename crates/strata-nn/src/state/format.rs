//! The safetensors format: an 8-byte little-endian header length, a JSON header naming each
//! tensor's dtype, shape and byte range, then the bytes. Read and written here so that every
//! problem names the key it concerns.

use std::io::Write;
use std::path::Path;

use half::{bf16, f16};
use strata_core::{DType, Tensor};

use super::error::StateError;

/// One tensor's entry in a header; `start..end` is relative to the data section.
#[derive(Debug, Clone)]
pub(crate) struct EntryInfo {
    pub key: String,
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub start: usize,
    pub end: usize,
}

/// A checked header: the entries ordered by their bytes, and where the data section starts.
#[derive(Debug)]
pub(crate) struct Header {
    pub entries: Vec<EntryInfo>,
    pub data_start: usize,
    /// The `__metadata__` strings, `format` included.
    pub metadata: Metadata,
}

/// A file's `__metadata__`: string keys to string values.
pub(crate) type Metadata = std::collections::BTreeMap<String, String>;

/// The largest header accepted (safetensors' own limit).
const MAX_HEADER: usize = 100_000_000;

/// The safetensors name of a dtype.
pub(crate) fn dtype_name(d: DType) -> &'static str {
    match d {
        DType::Bool => "BOOL",
        DType::U8 => "U8",
        DType::I32 => "I32",
        DType::I64 => "I64",
        DType::F16 => "F16",
        DType::BF16 => "BF16",
        DType::F32 => "F32",
        DType::F64 => "F64",
    }
}

fn dtype_of(path: &Path, key: &str, name: &str) -> Result<DType, StateError> {
    Ok(match name {
        "BOOL" => DType::Bool,
        "U8" => DType::U8,
        "I32" => DType::I32,
        "I64" => DType::I64,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "F32" => DType::F32,
        "F64" => DType::F64,
        "I8" | "I16" | "U16" | "U32" | "U64" | "C64" | "F4" | "F6_E2M3" | "F6_E3M2"
        | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" | "F8_E4M3FNUZ" | "F8_E5M2FNUZ" => {
            return Err(StateError::entry(
                path,
                key,
                format!("dtype {name} has no strata counterpart (strata has BOOL, U8, I32, I64, F16, BF16, F32, F64)"),
            ))
        }
        other => {
            return Err(StateError::entry(
                path,
                key,
                format!("{other:?} is not a safetensors dtype"),
            ))
        }
    })
}

/// Parses and checks the header of the file whose bytes are `bytes`: every entry well
/// formed, its byte count matching its shape and dtype, the entries tiling the data section
/// without overlap or gap, and the file as long as the header says.
pub(crate) fn parse(path: &Path, bytes: &[u8]) -> Result<Header, StateError> {
    let Some(len_bytes) = bytes.get(..8) else {
        return Err(StateError::format(
            path,
            format!(
                "the file is {} bytes, too short for the 8-byte header length",
                bytes.len()
            ),
        ));
    };
    let mut word = [0u8; 8];
    word.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(word);
    if n > MAX_HEADER as u64 {
        return Err(StateError::format(
            path,
            format!("the header length {n} is beyond the {MAX_HEADER}-byte limit"),
        ));
    }
    let n = n as usize;
    let data_start = 8 + n;
    let Some(header) = bytes.get(8..data_start) else {
        return Err(StateError::format(
            path,
            format!(
                "the header should be {n} bytes but the file ends after {} (truncated file?)",
                bytes.len() - 8
            ),
        ));
    };
    let text = std::str::from_utf8(header)
        .map_err(|e| StateError::format(path, format!("the header is not UTF-8: {e}")))?;
    let json: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| StateError::format(path, format!("the header is not valid JSON: {e}")))?;
    let serde_json::Value::Object(map) = json else {
        return Err(StateError::format(path, "the header is not a JSON object"));
    };
    let mut entries = Vec::with_capacity(map.len());
    let mut metadata = Metadata::new();
    for (key, value) in map {
        if key == "__metadata__" {
            metadata = parse_metadata(path, value)?;
            continue;
        }
        entries.push(entry(path, &key, &value)?);
    }
    entries.sort_by_key(|e| (e.start, e.end));
    let data_len = bytes.len() - data_start;
    let mut at = 0usize;
    for (i, e) in entries.iter().enumerate() {
        if e.start < at {
            let prev = &entries[i - 1].key;
            return Err(StateError::entry(
                path,
                &e.key,
                format!("its bytes overlap those of `{prev}`"),
            ));
        }
        if e.start > at {
            return Err(StateError::entry(
                path,
                &e.key,
                format!(
                    "{} bytes before it belong to no tensor (the data must be contiguous)",
                    e.start - at
                ),
            ));
        }
        if e.end > data_len {
            return Err(StateError::entry(
                path,
                &e.key,
                format!(
                    "its bytes end at {} but the data section holds {data_len} (truncated file?)",
                    e.end
                ),
            ));
        }
        at = e.end;
    }
    if at != data_len {
        return Err(StateError::format(
            path,
            format!(
                "{} bytes after the last tensor belong to no tensor",
                data_len - at
            ),
        ));
    }
    Ok(Header {
        metadata,
        entries,
        data_start,
    })
}

fn entry(path: &Path, key: &str, v: &serde_json::Value) -> Result<EntryInfo, StateError> {
    let bad = |m: &str| StateError::entry(path, key, m.to_owned());
    let dtype = v
        .get("dtype")
        .and_then(|d| d.as_str())
        .ok_or_else(|| bad("no \"dtype\" string"))?;
    let dtype = dtype_of(path, key, dtype)?;
    let shape = v
        .get("shape")
        .and_then(|s| s.as_array())
        .ok_or_else(|| bad("no \"shape\" array"))?
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<Vec<usize>>>()
        .ok_or_else(|| bad("the shape holds something other than sizes"))?;
    let offsets = v
        .get("data_offsets")
        .and_then(|o| o.as_array())
        .ok_or_else(|| bad("no \"data_offsets\" array"))?;
    let (start, end) = match offsets.as_slice() {
        [a, b] => match (a.as_u64(), b.as_u64()) {
            (Some(a), Some(b)) if a <= b => (a as usize, b as usize),
            _ => return Err(bad("data_offsets must be two byte positions, begin <= end")),
        },
        _ => return Err(bad("data_offsets must be two byte positions")),
    };
    let needed = shape
        .iter()
        .try_fold(dtype.size(), |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad("the shape's byte count overflows"))?;
    if needed != end - start {
        return Err(StateError::entry(
            path,
            key,
            format!(
                "shape {shape:?} of {} needs {needed} bytes but data_offsets give {}",
                dtype_name(dtype),
                end - start
            ),
        ));
    }
    Ok(EntryInfo {
        key: key.to_owned(),
        dtype,
        shape,
        start,
        end,
    })
}

/// A tensor's elements as little-endian bytes, in row-major order.
fn tensor_bytes(t: &Tensor) -> strata_core::Result<Vec<u8>> {
    Ok(match t.dtype() {
        DType::Bool => t.to_vec::<bool>()?.into_iter().map(u8::from).collect(),
        DType::U8 => t.to_vec::<u8>()?,
        DType::I32 => t
            .to_vec::<i32>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::I64 => t
            .to_vec::<i64>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F16 => t
            .to_vec::<f16>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::BF16 => t
            .to_vec::<bf16>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F32 => t
            .to_vec::<f32>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
        DType::F64 => t
            .to_vec::<f64>()?
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect(),
    })
}

/// The `__metadata__` object: every value must be a string, as safetensors requires.
fn parse_metadata(path: &Path, value: serde_json::Value) -> Result<Metadata, StateError> {
    let serde_json::Value::Object(map) = value else {
        return Err(StateError::format(
            path,
            "__metadata__ is not a JSON object",
        ));
    };
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(StateError::format(
                path,
                format!("__metadata__ entry {k:?} is {other}, not a string"),
            )),
        })
        .collect()
}

/// The entries in the order their bytes are laid out (by dtype size, largest first, then by
/// name, as safetensors does, which keeps each one aligned) and the header that describes
/// them, padded with spaces to a multiple of 8 bytes.
fn layout<'a>(
    entries: &'a [(String, Tensor)],
    metadata: &Metadata,
) -> (Vec<&'a (String, Tensor)>, Vec<u8>) {
    let mut order: Vec<&(String, Tensor)> = entries.iter().collect();
    order.sort_by(|(a, x), (b, y)| y.dtype().size().cmp(&x.dtype().size()).then(a.cmp(b)));
    let mut header = serde_json::Map::new();
    let mut meta = serde_json::Map::new();
    meta.insert("format".into(), "pt".into());
    for (k, v) in metadata {
        meta.insert(k.clone(), v.clone().into());
    }
    header.insert("__metadata__".into(), meta.into());
    let mut at = 0usize;
    for (key, t) in &order {
        let n = t.nbytes();
        header.insert(
            key.clone(),
            serde_json::json!({
                "dtype": dtype_name(t.dtype()),
                "shape": t.shape().as_slice(),
                "data_offsets": [at, at + n],
            }),
        );
        at += n;
    }
    let mut text = serde_json::Value::Object(header).to_string().into_bytes();
    text.resize(text.len().next_multiple_of(8), b' ');
    (order, text)
}

/// Writes the safetensors bytes of `entries` (header length, header, data) to `w`.
fn write_to(
    w: &mut impl Write,
    entries: &[(String, Tensor)],
    metadata: &Metadata,
    io: impl Fn(std::io::Error) -> StateError,
) -> Result<(), StateError> {
    let (order, text) = layout(entries, metadata);
    w.write_all(&(text.len() as u64).to_le_bytes())
        .map_err(&io)?;
    w.write_all(&text).map_err(&io)?;
    for (_, t) in &order {
        w.write_all(&tensor_bytes(t)?).map_err(&io)?;
    }
    Ok(())
}

/// The safetensors bytes of `entries`, in memory.
pub(crate) fn encode(
    entries: &[(String, Tensor)],
    metadata: &Metadata,
) -> Result<Vec<u8>, StateError> {
    let mut out = Vec::new();
    let io = |e| StateError::io(Path::new("<memory>"), e);
    write_to(&mut out, entries, metadata, io)?;
    Ok(out)
}

/// Writes `entries` to `path` as a safetensors file, atomically: into a temporary file
/// beside it, flushed to disk, then renamed over `path` (and the directory synced), so a
/// crash leaves either the old file or the new one.
pub(crate) fn write(
    path: &Path,
    entries: &[(String, Tensor)],
    metadata: &Metadata,
) -> Result<(), StateError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| StateError::format(path, "the path names no file"))?;
    // Unique per process and call, so concurrent saves never share a temporary file.
    static SAVES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(
        ".{}.{}.{n}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> Result<(), StateError> {
        let file = std::fs::File::create(&tmp).map_err(|e| StateError::io(&tmp, e))?;
        let mut w = std::io::BufWriter::new(file);
        let io = |e| StateError::io(&tmp, e);
        write_to(&mut w, entries, metadata, io)?;
        let file = w
            .into_inner()
            .map_err(|e| StateError::io(&tmp, e.into_error()))?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(|e| StateError::io(path, e))?;
        // Make the rename itself durable.
        if let Ok(d) = std::fs::File::open(&dir) {
            d.sync_all().map_err(|e| StateError::io(&dir, e))?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Copies the bytes of one entry into a new tensor.
pub(crate) fn decode(path: &Path, e: &EntryInfo, bytes: &[u8]) -> Result<Tensor, StateError> {
    fn words<const N: usize, T>(b: &[u8], f: impl Fn([u8; N]) -> T) -> Vec<T> {
        b.chunks_exact(N)
            .map(|c| {
                let mut w = [0u8; N];
                w.copy_from_slice(c);
                f(w)
            })
            .collect()
    }
    let s = e.shape.as_slice();
    let t = match e.dtype {
        DType::Bool => {
            check_bools(path, &e.key, bytes)?;
            Tensor::from_vec(bytes.iter().map(|&b| b == 1).collect::<Vec<bool>>(), s)
        }
        DType::U8 => Tensor::from_vec(bytes.to_vec(), s),
        DType::I32 => Tensor::from_vec(words(bytes, i32::from_le_bytes), s),
        DType::I64 => Tensor::from_vec(words(bytes, i64::from_le_bytes), s),
        DType::F16 => Tensor::from_vec(words(bytes, f16::from_le_bytes), s),
        DType::BF16 => Tensor::from_vec(words(bytes, bf16::from_le_bytes), s),
        DType::F32 => Tensor::from_vec(words(bytes, f32::from_le_bytes), s),
        DType::F64 => Tensor::from_vec(words(bytes, f64::from_le_bytes), s),
    }?;
    Ok(t)
}

/// Checks that a BOOL entry holds only 0 and 1 bytes (any other byte is not a `bool`).
pub(crate) fn check_bools(path: &Path, key: &str, bytes: &[u8]) -> Result<(), StateError> {
    match bytes.iter().position(|&b| b > 1) {
        None => Ok(()),
        Some(i) => Err(StateError::entry(
            path,
            key,
            format!(
                "element {i} of a BOOL tensor is the byte {}, not 0 or 1",
                bytes[i]
            ),
        )),
    }
}
