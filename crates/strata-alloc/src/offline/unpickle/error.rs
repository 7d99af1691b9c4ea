//! Why the pickle machine could not read a pickle: the data ends early, an opcode builds
//! Python objects, or the stream breaks the machine's rules. Each message says where (the
//! byte of the pickle) and what to do.

/// Why a pickle could not be read; reading a snapshot gives it as
/// [`SnapshotReadError::Pickle`](crate::SnapshotReadError::Pickle), with the same message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnpickleError {
    /// The data ends before the pickle does.
    #[error(
        "the pickle is truncated: the data ends at byte {offset} while reading {reading}; \
         the file is incomplete (a copy or a dump that did not finish), so write or copy the \
         snapshot again"
    )]
    Truncated {
        /// Where the data ended (its length).
        offset: usize,
        /// What was being read.
        reading: String,
    },
    /// An opcode that builds Python objects (or is no pickle opcode at all).
    #[error("{}", unsupported_message(*opcode, *name, *offset))]
    UnsupportedOpcode {
        /// The opcode byte.
        opcode: u8,
        /// Its name (`GLOBAL`, `REDUCE`, ...), `None` when the byte is no pickle opcode.
        name: Option<&'static str>,
        /// Where it is.
        offset: usize,
    },
    /// The pickle breaks the rules of the pickle machine: stack underflow, a missing `MARK`,
    /// a memo index never stored, a dict key that is not a string, nesting too deep.
    #[error("malformed pickle at byte {offset}: {message}; the file is corrupt or not a pickle")]
    Malformed {
        /// The opcode where it went wrong.
        offset: usize,
        /// What went wrong.
        message: String,
    },
}

fn unsupported_message(opcode: u8, name: Option<&'static str>, offset: usize) -> String {
    match name {
        Some(name) => {
            let shown = if opcode.is_ascii_graphic() {
                format!("'{}'", char::from(opcode))
            } else {
                format!("'\\x{opcode:02x}'")
            };
            format!(
                "unsupported pickle opcode 0x{opcode:02x} ({shown}, {name}) at byte {offset}: \
                 a snapshot holds only dicts, lists, strings and numbers; this pickle holds \
                 Python objects (class instances, functions), which this reader never \
                 builds, so it is not a memory snapshot (write one with \
                 torch.cuda.memory._dump_snapshot)"
            )
        }
        None => format!(
            "0x{opcode:02x} at byte {offset} is not a pickle opcode: the data is not a pickle, \
             or it is corrupt"
        ),
    }
}
