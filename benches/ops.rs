//! Op benchmarks: the shapes `strata bench` reports, as divan benchmarks, each beside the
//! memory-copy baseline (`copy_probe`) measured in the same run. `strata bench` prints the
//! same figures as a table with PyTorch's beside them when `python3 -c "import torch"` works.
//!
//! Run with `cargo bench --bench ops`.

use divan::{black_box, Bencher};
use strata::prelude::*;

fn main() {
    divan::main();
}

const N: usize = 1 << 24;

fn rand(shape: &[usize]) -> Tensor {
    Tensor::rand(shape, DType::F32).expect("benchmark inputs fit in memory")
}

/// The baseline: copying 64 MiB between resident buffers with strata's threads (bytes moved
/// = read + write).
#[divan::bench]
fn copy_probe(b: Bencher) {
    use rayon::prelude::*;
    let n = 64usize << 20;
    let src = vec![1u8; n];
    let mut dst = vec![0u8; n];
    let chunk = n.div_ceil(strata::core::num_threads());
    b.counter(divan::counter::BytesCount::new(2 * n))
        .bench_local(|| {
            strata::core::thread_pool().install(|| {
                dst.par_chunks_mut(chunk)
                    .zip(src.par_chunks(chunk))
                    .for_each(|(d, s)| d.copy_from_slice(s))
            });
            black_box(&dst);
        });
}

#[divan::bench]
fn add_one_element(b: Bencher) {
    let (x, y) = (rand(&[1]), rand(&[1]));
    b.bench(|| black_box(x.add(&y)));
}

#[divan::bench]
fn add_16m_new_output(b: Bencher) {
    let (x, y) = (rand(&[N]), rand(&[N]));
    b.counter(divan::counter::BytesCount::new(12 * N))
        .bench(|| black_box(x.add(&y)));
}

#[divan::bench]
fn add_16m_out(b: Bencher) {
    let (x, y, out) = (rand(&[N]), rand(&[N]), rand(&[N]));
    b.counter(divan::counter::BytesCount::new(12 * N))
        .bench(|| black_box(x.add_out(&y, 1i64, &out)));
}

#[divan::bench]
fn add_16m_in_place(b: Bencher) {
    let (x, y) = (rand(&[N]), rand(&[N]));
    b.counter(divan::counter::BytesCount::new(12 * N))
        .bench(|| black_box(x.add_(&y)));
}

#[divan::bench]
fn add_4096sq_one_transposed(b: Bencher) {
    let x = rand(&[4096, 4096]);
    let yt = rand(&[4096, 4096]).t().expect("2-d");
    b.counter(divan::counter::BytesCount::new(12 * N))
        .bench(|| black_box(x.add(&yt)));
}

#[divan::bench]
fn transpose_copy_4096sq(b: Bencher) {
    let xt = rand(&[4096, 4096]).t().expect("2-d");
    b.counter(divan::counter::BytesCount::new(8 * N))
        .bench(|| black_box(xt.contiguous()));
}

#[divan::bench(args = [1, 0])]
fn sum_4096sq_over_dim(b: Bencher, dim: i64) {
    let x = rand(&[4096, 4096]);
    b.counter(divan::counter::BytesCount::new(4 * N))
        .bench(|| black_box(x.sum(Some(&[dim]), false)));
}

#[divan::bench]
fn softmax_4096x1024(b: Bencher) {
    let x = rand(&[4096, 1024]);
    b.counter(divan::counter::BytesCount::new(8usize * 4096 * 1024))
        .bench(|| black_box(x.softmax(1)));
}

#[divan::bench(args = [512, 1024, 2048], sample_count = 10)]
fn sgemm(b: Bencher, k: usize) {
    let (x, y) = (rand(&[k, k]), rand(&[k, k]));
    b.counter(divan::counter::ItemsCount::new(2 * k * k * k))
        .bench(|| black_box(x.matmul(&y)));
}
