//! The MPI process group's collectives on two ranks, against results computed by hand.
#![cfg(feature = "mpi")]

mod support;

use std::time::Duration;

use strata_core::{DType, Tensor};
use strata_dist::{init_process_group, ProcessGroup, ReduceOp};

fn values(rank: usize, n: usize) -> Vec<f64> {
    (0..n).map(|i| (rank * 1000 + i % 97) as f64).collect()
}

fn tensor(v: &[f64], dtype: DType) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()])
        .and_then(|t| t.to(dtype))
        .unwrap()
}

#[test]
fn collectives_on_two_ranks() {
    if !support::is_rank() {
        return support::run_ranks("collectives_on_two_ranks", 2, Duration::from_secs(120));
    }
    let pg = init_process_group().unwrap();
    let (rank, world) = (pg.rank(), pg.world_size());
    assert_eq!(world, 2);
    assert_eq!(pg.backend(), "mpi");

    // all_reduce: sum, average and max, for several dtypes and sizes.
    for n in [1usize, 1000, 1 << 20] {
        let (mine, theirs) = (values(rank, n), values(1 - rank, n));
        for dtype in [DType::F32, DType::F64, DType::I64, DType::I32] {
            let t = tensor(&mine, dtype);
            pg.all_reduce(&t, ReduceOp::Sum).unwrap();
            let want = tensor(
                &mine
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| a + b)
                    .collect::<Vec<_>>(),
                dtype,
            );
            assert!(
                t.to_vec::<f64>().unwrap() == want.to_vec::<f64>().unwrap(),
                "{dtype} sum of {n}"
            );
            let t = tensor(&mine, dtype);
            pg.all_reduce(&t, ReduceOp::Max).unwrap();
            let want = tensor(
                &mine
                    .iter()
                    .zip(&theirs)
                    .map(|(a, b)| a.max(*b))
                    .collect::<Vec<_>>(),
                dtype,
            );
            assert!(
                t.to_vec::<f64>().unwrap() == want.to_vec::<f64>().unwrap(),
                "{dtype} max of {n}"
            );
        }
        for dtype in [DType::F32, DType::F64] {
            let t = tensor(&mine, dtype);
            pg.all_reduce(&t, ReduceOp::Average).unwrap();
            let want: Vec<f64> = mine
                .iter()
                .zip(&theirs)
                .map(|(a, b)| (a + b) / 2.0)
                .collect();
            assert!(t.to_vec::<f64>().unwrap() == want, "{dtype} average of {n}");
        }
    }
    let flags = Tensor::from_vec(vec![rank == 0, false, rank == 1], &[3]).unwrap();
    pg.all_reduce(&flags, ReduceOp::Sum).unwrap();
    assert_eq!(
        flags.to_vec::<u8>().unwrap(),
        vec![1, 0, 1],
        "bool sums are a logical or"
    );
    let small = Tensor::from_vec(vec![rank as u8 * 7; 5], &[5]).unwrap();
    pg.all_reduce(&small, ReduceOp::Sum).unwrap();
    assert_eq!(small.to_vec::<u8>().unwrap(), vec![7; 5]);

    // broadcast moves any dtype, 16-bit floats included, as bytes.
    for dtype in [DType::F16, DType::BF16, DType::I64, DType::F32] {
        let t = tensor(&values(rank, 333), dtype);
        pg.broadcast(&t, 1).unwrap();
        assert_eq!(
            t.to_vec::<f64>().unwrap(),
            tensor(&values(1, 333), dtype).to_vec::<f64>().unwrap()
        );
    }

    // all_gather, into one tensor and into a list.
    let part = tensor(&values(rank, 10), DType::F32);
    let all = Tensor::zeros(&[20], DType::F32).unwrap();
    pg.all_gather_into_tensor(&all, &part).unwrap();
    let want: Vec<f64> = [values(0, 10), values(1, 10)].concat();
    assert_eq!(all.to_vec::<f64>().unwrap(), want);
    let outs = vec![
        Tensor::zeros(&[2, 5], DType::F32).unwrap(),
        Tensor::zeros(&[2, 5], DType::F32).unwrap(),
    ];
    pg.all_gather(&outs, &part.view(&[2, 5]).unwrap()).unwrap();
    for (r, o) in outs.iter().enumerate() {
        assert_eq!(o.to_vec::<f64>().unwrap(), values(r, 10));
    }

    // reduce_scatter: rank r keeps the r-th half of the sum (or average).
    let whole = tensor(&values(rank, 8), DType::F64);
    let share = Tensor::zeros(&[4], DType::F64).unwrap();
    pg.reduce_scatter_tensor(&share, &whole, ReduceOp::Sum)
        .unwrap();
    let sum: Vec<f64> = values(0, 8)
        .iter()
        .zip(values(1, 8))
        .map(|(a, b)| a + b)
        .collect();
    assert_eq!(share.to_vec::<f64>().unwrap(), sum[rank * 4..rank * 4 + 4]);
    pg.reduce_scatter_tensor(&share, &whole, ReduceOp::Average)
        .unwrap();
    let avg: Vec<f64> = sum.iter().map(|s| s / 2.0).collect();
    assert_eq!(share.to_vec::<f64>().unwrap(), avg[rank * 4..rank * 4 + 4]);

    // Asynchronous forms run in order; each handle reports its own completion.
    let buckets: Vec<Tensor> = (0..4)
        .map(|k| Tensor::full(&[1000], (rank + k) as f64, DType::F32).unwrap())
        .collect();
    let works: Vec<_> = buckets
        .iter()
        .map(|b| pg.all_reduce_async(b, ReduceOp::Sum).unwrap())
        .collect();
    for (k, (w, b)) in works.iter().zip(&buckets).enumerate() {
        w.wait().unwrap();
        assert!(w.is_completed());
        assert_eq!(b.to_vec::<f32>().unwrap(), vec![(1 + 2 * k) as f32; 1000]);
    }
    pg.barrier_async().unwrap().wait().unwrap();

    // Misuse is an error that names the fix, before anything is sent.
    let strided = Tensor::zeros(&[4, 4], DType::F32).unwrap().t().unwrap();
    let e = pg
        .all_reduce(&strided, ReduceOp::Sum)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not contiguous") && e.contains(".contiguous()"),
        "{e}"
    );
    let ints = Tensor::zeros(&[4], DType::I64).unwrap();
    let e = pg
        .all_reduce(&ints, ReduceOp::Average)
        .unwrap_err()
        .to_string();
    assert!(e.contains("floating"), "{e}");
    let half = Tensor::zeros(&[4], DType::F16).unwrap();
    let e = pg.all_reduce(&half, ReduceOp::Sum).unwrap_err().to_string();
    assert!(e.contains("f16") && e.contains("F32"), "{e}");
    let e = pg.broadcast(&half, 2).unwrap_err().to_string();
    assert!(e.contains("rank 2"), "{e}");
    let e = pg
        .all_gather_into_tensor(&Tensor::zeros(&[7], DType::F32).unwrap(), &part)
        .unwrap_err()
        .to_string();
    assert!(e.contains("2 ranks of 10 elements make 20"), "{e}");

    // A second process group in the same process is refused: MPI initialises once.
    let e = init_process_group()
        .err()
        .expect("a second group")
        .to_string();
    assert!(e.contains("only once"), "{e}");
    pg.barrier().unwrap();
}
