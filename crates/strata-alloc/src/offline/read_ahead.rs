//! Reading a large file once, front to back, without keeping it resident: the file is mapped
//! read-only and the pages already read are handed back to the kernel as the reader moves
//! on, so a 1 GB snapshot does not cost 1 GB of the process's memory while it is read.

use std::fs::File;
use std::io;
use std::path::Path;

use memmap2::{Advice, Mmap, UncheckedAdvice};

/// A file mapped for one front-to-back read.
pub(crate) struct ReadAhead {
    map: Mmap,
}

impl ReadAhead {
    /// Maps `path` read-only.
    pub(crate) fn open(path: &Path) -> io::Result<ReadAhead> {
        let file = File::open(path)?;
        // SAFETY: the mapping is read-only, and the bytes are only ever read through the
        // checked reader (`unpickle`), which treats them as untrusted input: should another
        // process change the file while it is read, the reader sees other bytes, which is
        // an input error at worst. (Truncating the file under the mapping would fault the
        // process, as it would any program reading a file through a mapping.)
        let map = unsafe { Mmap::map(&file)? };
        // Only a hint: a kernel that ignores it reads the file just as well.
        let _ = map.advise(Advice::Sequential);
        Ok(ReadAhead { map })
    }

    /// The file's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// Hands the pages wholly before `upto` back to the kernel: they leave this process's
    /// resident memory, and are read from the file again should they be touched.
    pub(crate) fn release_before(&self, upto: usize) {
        let page = page_size();
        let len = upto.min(self.map.len()) / page * page;
        if len == 0 {
            return;
        }
        // SAFETY: the mapping is a shared, read-only mapping of a file, so MADV_DONTNEED only
        // drops the pages from this process's memory: a later read of them faults them in
        // again from the file, with the same contents. No byte anyone borrows changes, which
        // is what `UncheckedAdvice::DontNeed` asks of its caller (its hazard is private and
        // anonymous mappings, whose pages come back zeroed).
        let _ = unsafe {
            self.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, 0, len)
        };
    }
}

/// The kernel's page size.
fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn released_pages_read_back_unchanged() {
        let path = std::env::temp_dir().join(format!("strata-read-ahead-{}", std::process::id()));
        let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let r = ReadAhead::open(&path).unwrap();
        assert_eq!(r.bytes(), &data[..]);
        r.release_before(2 * 4096 + 7);
        r.release_before(usize::MAX);
        assert_eq!(r.bytes(), &data[..]);
        drop(r);
        std::fs::remove_file(&path).unwrap();
    }
}
