//! Backends: where kernels run. `cpu` is the only one today.

pub(crate) mod cpu;
