//! The IDX format (MNIST's): a magic number whose third byte is the element type and fourth
//! the number of dimensions, the dimensions as big-endian u32, then the elements, big-endian.
//! Files may be gzip-compressed (recognised by their first two bytes). Everything is checked
//! before it is used: a truncated or corrupt file is an error that says what is wrong.

use std::io::Read;
use std::path::Path;

use flate2::read::GzDecoder;

use crate::error::{DataError, Result};

/// The elements of an IDX array, in the types strata has.
#[derive(Debug, Clone, PartialEq)]
pub enum IdxData {
    /// Type 0x08.
    U8(Vec<u8>),
    /// Type 0x0C.
    I32(Vec<i32>),
    /// Type 0x0D.
    F32(Vec<f32>),
    /// Type 0x0E.
    F64(Vec<f64>),
}

impl IdxData {
    /// How many elements it holds.
    pub fn len(&self) -> usize {
        match self {
            IdxData::U8(v) => v.len(),
            IdxData::I32(v) => v.len(),
            IdxData::F32(v) => v.len(),
            IdxData::F64(v) => v.len(),
        }
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An IDX array: its dimensions and elements (row-major).
#[derive(Debug, Clone, PartialEq)]
pub struct IdxArray {
    /// The dimensions, outermost first.
    pub dims: Vec<usize>,
    /// The elements.
    pub data: IdxData,
}

/// Reads the IDX file at `path` (gzip-compressed or not).
pub fn read(path: &Path) -> Result<IdxArray> {
    let raw = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&raw, path)
}

/// The most elements an IDX header may declare (2^31): more is refused before anything is
/// allocated, whatever the file's size.
pub const MAX_ELEMENTS: usize = 1 << 31;

/// Parses IDX bytes (gzip-compressed or not); `name` names them in errors. A compressed
/// file is inflated as it is read: the header's element count is checked against
/// [`MAX_ELEMENTS`] first, and the elements' buffer only grows with the bytes actually
/// inflated, so no header (and no compressed bomb) sizes an allocation.
pub fn parse(raw: &[u8], name: &Path) -> Result<IdxArray> {
    if raw.starts_with(&[0x1f, 0x8b]) {
        parse_from(GzDecoder::new(raw), name)
    } else {
        parse_from(raw, name)
    }
}

/// Up to `n` bytes of `src` (fewer at its end).
fn read_up_to(src: &mut impl Read, n: u64, name: &Path) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    src.take(n).read_to_end(&mut out).map_err(|e| {
        DataError::format(
            name,
            format!("the gzip stream is corrupt or truncated: {e}"),
        )
    })?;
    Ok(out)
}

fn parse_from(mut src: impl Read, name: &Path) -> Result<IdxArray> {
    let fail = |m: String| DataError::format(name, m);
    let magic = read_up_to(&mut src, 4, name)?;
    if magic.len() < 4 {
        return Err(fail(format!(
            "{} bytes is too short for an IDX header (4 bytes of magic number)",
            magic.len()
        )));
    }
    if magic[0] != 0 || magic[1] != 0 {
        return Err(fail(format!(
            "not an IDX file: its magic number starts {:#04x} {:#04x}, not 0x00 0x00",
            magic[0], magic[1]
        )));
    }
    let (kind, ndim) = (magic[2], usize::from(magic[3]));
    let size = match kind {
        0x08 => 1,
        0x0C | 0x0D => 4,
        0x0E => 8,
        0x09 | 0x0B => {
            return Err(fail(format!(
                "element type {kind:#04x} (signed 8- or 16-bit) has no strata dtype; convert \
                 the file to u8, i32, f32 or f64"
            )))
        }
        other => return Err(fail(format!("unknown IDX element type {other:#04x}"))),
    };
    let header = 4 + 4 * ndim;
    let dim_bytes = read_up_to(&mut src, 4 * ndim as u64, name)?;
    if dim_bytes.len() < 4 * ndim {
        return Err(fail(format!(
            "truncated header: {ndim} dimensions need {header} bytes, the file has {}",
            4 + dim_bytes.len()
        )));
    }
    let dims: Vec<usize> = dim_bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]) as usize)
        .collect();
    let elements = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| {
            fail(format!(
                "dimensions {dims:?} declare more than 2^31 elements, the most this reader \
                 accepts"
            ))
        })?;
    let count = elements * size;
    // One byte more than needed tells trailing bytes from an exact end.
    let body = read_up_to(&mut src, count as u64 + 1, name)?;
    if body.len() != count {
        let (what, has) = if body.len() < count {
            ("truncated", body.len().to_string())
        } else {
            ("trailing bytes", "more".to_owned())
        };
        return Err(fail(format!(
            "{what}: dimensions {dims:?} need {count} bytes of elements, the file has {has}"
        )));
    }
    let body = body.as_slice();
    let data = match kind {
        0x08 => IdxData::U8(body.to_vec()),
        0x0C => IdxData::I32(
            body.chunks_exact(4)
                .map(|c| i32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        0x0D => IdxData::F32(
            body.chunks_exact(4)
                .map(|c| f32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        _ => IdxData::F64(
            body.chunks_exact(8)
                .map(|c| f64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                .collect(),
        ),
    };
    Ok(IdxArray { dims, data })
}

/// The bytes of a u8 IDX file holding `data` with dimensions `dims` (for tests and tools
/// that write small datasets).
pub fn encode_u8(dims: &[usize], data: &[u8]) -> Vec<u8> {
    let mut out = vec![0, 0, 0x08, dims.len() as u8];
    for &d in dims {
        out.extend_from_slice(&(d as u32).to_be_bytes());
    }
    out.extend_from_slice(data);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn name() -> &'static Path {
        Path::new("test.idx")
    }

    #[test]
    fn raw_and_gzip_files_read_the_same() {
        let raw = encode_u8(&[2, 3], &[1, 2, 3, 4, 5, 6]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        let want = IdxArray {
            dims: vec![2, 3],
            data: IdxData::U8(vec![1, 2, 3, 4, 5, 6]),
        };
        assert_eq!(parse(&raw, name()).unwrap(), want);
        assert_eq!(parse(&gz, name()).unwrap(), want);
    }

    #[test]
    fn wider_types_are_big_endian() {
        let mut bytes = vec![0, 0, 0x0C, 1, 0, 0, 0, 2];
        bytes.extend_from_slice(&(-5i32).to_be_bytes());
        bytes.extend_from_slice(&7i32.to_be_bytes());
        assert_eq!(
            parse(&bytes, name()).unwrap().data,
            IdxData::I32(vec![-5, 7])
        );
    }

    #[test]
    fn broken_files_say_what_is_wrong() {
        let good = encode_u8(&[2, 2], &[1, 2, 3, 4]);
        let err = |b: &[u8]| parse(b, name()).unwrap_err().to_string();
        assert!(err(&good[..good.len() - 1]).contains("truncated"));
        assert!(err(&[good.as_slice(), &[9]].concat()).contains("trailing bytes"));
        assert!(err(&good[..6]).contains("truncated header"));
        assert!(err(&[1, 2]).contains("too short"));
        assert!(err(&[7, 0, 8, 1, 0, 0, 0, 0]).contains("not an IDX file"));
        // 2^16 · 2^16 elements: refused from the header alone, whatever follows.
        assert!(err(&[0, 0, 8, 2, 0, 1, 0, 0, 0, 1, 0, 0]).contains("2^31"));
        assert!(err(&[0, 0, 0x0B, 1, 0, 0, 0, 0]).contains("no strata dtype"));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&good).unwrap();
        let gz = gz.finish().unwrap();
        assert!(err(&gz[..gz.len() / 2]).contains("gzip"));
        assert!(err(&gz[..gz.len() / 2]).contains("test.idx"));
    }
}
