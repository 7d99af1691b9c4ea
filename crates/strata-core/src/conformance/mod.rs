//! Regression tests for behaviour differences from PyTorch found by the conformance
//! programs: each test pins PyTorch's observed behaviour for one cause.

mod autograd_tests;
mod ops_tests;
