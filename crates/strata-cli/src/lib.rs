//! The `strata` command's work, as a library so that tests can call it in-process: the demo,
//! the conformance runner (`strata conform`), the benchmarks (`strata bench`) and the
//! training job (`strata train`, `strata eval`, `strata plan`) and the memory page
//! (`strata viz`).
//!
//! The binary (`src/main.rs` and its own modules in `src/cli/`) only parses arguments and
//! prints; everything it runs is here.

pub mod bench;
pub mod conform;
pub mod crash;
pub mod demo;
pub mod explain;
pub mod replay;
pub mod train;
pub mod viz;
