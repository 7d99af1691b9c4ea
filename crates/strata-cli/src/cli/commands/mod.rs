//! The driver of each subcommand: run the library's work, print the result and give the
//! exit code.

pub(crate) mod bench;
pub(crate) mod conform;
pub(crate) mod demo;
pub(crate) mod eval;
pub(crate) mod explain;
pub(crate) mod plan;
pub(crate) mod replay;
pub(crate) mod sample;
pub(crate) mod shared;
pub(crate) mod summary;
pub(crate) mod train;
pub(crate) mod viz;
