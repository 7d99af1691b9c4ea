//! A checkpoint file's framing and its atomic write.
//!
//! A file is a 24-byte header, the payload, and a 32-byte SHA-256 of everything before it:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | `STRATACK` |
//! | 4 | format version, little-endian (1) |
//! | 4 | zero |
//! | 8 | payload length, little-endian |
//! | n | the payload: a safetensors file (tensors, and the manifest in its metadata) |
//! | 32 | SHA-256 of the header and the payload |
//!
//! The payload length is checked against the file's own length before anything is read
//! through it, and the checksum before the payload is parsed.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::crash;

/// The first bytes of every checkpoint.
const MAGIC: &[u8; 8] = b"STRATACK";
/// The framing version this code writes and reads.
const VERSION: u32 = 1;
/// Magic, version, zero, payload length.
const HEADER: usize = 24;
/// A SHA-256 digest.
const CHECKSUM: usize = 32;

/// Why a checkpoint file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// What the system reported.
        source: std::io::Error,
    },
    /// The file is not a whole, intact checkpoint.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
}

fn invalid(path: &Path, message: impl Into<String>) -> FileError {
    FileError::Invalid {
        path: path.to_owned(),
        message: message.into(),
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> FileError + '_ {
    move |source| FileError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The file's bytes for `payload`: header, payload, checksum, in the payload's own buffer
/// (grown by 56 bytes, not copied into a second one).
pub fn frame(mut payload: Vec<u8>) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&0u32.to_le_bytes());
    header.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    payload.reserve_exact(HEADER + CHECKSUM);
    payload.splice(0..0, header);
    let sum = Sha256::digest(&payload);
    payload.extend_from_slice(&sum);
    payload
}

/// The payload of the file whose bytes are `bytes` (read from `path`), after checking the
/// header, the length and the checksum.
pub fn unframe<'a>(bytes: &'a [u8], path: &Path) -> Result<&'a [u8], FileError> {
    if bytes.len() < HEADER + CHECKSUM {
        return Err(invalid(
            path,
            format!(
                "truncated: {} bytes, shorter than the {} bytes of an empty checkpoint",
                bytes.len(),
                HEADER + CHECKSUM
            ),
        ));
    }
    if &bytes[..8] != MAGIC {
        return Err(invalid(
            path,
            "not a strata checkpoint (it does not start with STRATACK)",
        ));
    }
    let word = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&bytes[at..at + 4]);
        u32::from_le_bytes(w)
    };
    let version = word(8);
    if version != VERSION {
        return Err(invalid(
            path,
            format!("format version {version}; this strata reads version {VERSION}"),
        ));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[16..24]);
    let len = u64::from_le_bytes(len);
    let held = (bytes.len() - HEADER - CHECKSUM) as u64;
    if len != held {
        let what = if len > held { "truncated" } else { "too long" };
        return Err(invalid(
            path,
            format!("{what}: the header says {len} payload bytes, the file holds {held}"),
        ));
    }
    let end = bytes.len() - CHECKSUM;
    if Sha256::digest(&bytes[..end])[..] != bytes[end..] {
        return Err(invalid(
            path,
            "the checksum does not match: the file is corrupt",
        ));
    }
    Ok(&bytes[HEADER..end])
}

/// Reads the file at `path` and returns its payload, checked.
pub fn read(path: &Path) -> Result<Vec<u8>, FileError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    unframe(&bytes, path).map(<[u8]>::to_vec)
}

/// The temporary name a checkpoint named `name` is written under in its folder.
pub fn temporary_name(name: &str) -> String {
    format!(".{name}.tmp")
}

/// Writes `bytes` as `dir/name` so that a crash at any moment leaves either no file of that
/// name or the whole one, as SQLite and PostgreSQL write: into a temporary file, synced,
/// renamed over the name, and the folder synced so that the rename itself survives a power
/// cut.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), FileError> {
    let tmp = dir.join(temporary_name(name));
    let path = dir.join(name);
    let result = (|| {
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        let half = bytes.len() / 2;
        file.write_all(&bytes[..half]).map_err(io(&tmp))?;
        crash::point("checkpoint-write");
        file.write_all(&bytes[half..]).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io(&path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result?;
    crash::point("checkpoint-rename");
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_gives_back_its_payload_and_every_damage_is_named() {
        let path = Path::new("step-00000001.ckpt");
        let framed = frame(b"payload bytes".to_vec());
        assert_eq!(unframe(&framed, path).unwrap(), b"payload bytes");
        let err = |bytes: &[u8]| unframe(bytes, path).unwrap_err().to_string();
        assert!(err(&framed[..framed.len() - 1]).contains("truncated"));
        assert!(err(&framed[..10]).contains("truncated"));
        assert!(err(&[framed.clone(), vec![0]].concat()).contains("too long"));
        let mut flipped = framed.clone();
        flipped[HEADER + 3] ^= 1;
        assert!(err(&flipped).contains("checksum"));
        let mut other = framed.clone();
        other[0] = b'X';
        assert!(err(&other).contains("not a strata checkpoint"));
        let mut newer = framed;
        newer[8] = 2;
        assert!(err(&newer).contains("version 2"));
    }

    #[test]
    fn an_atomic_write_leaves_only_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write_atomic(dir.path(), "a.ckpt", &frame(b"x".to_vec())).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["a.ckpt"]);
        assert_eq!(read(&dir.path().join("a.ckpt")).unwrap(), b"x");
    }
}
