//! Seeded random numbers: a counter-based Philox4x32-10 generator whose whole state is a seed
//! and an offset, so it can be saved and restored exactly (checkpointing recomputes dropout
//! with the state it had in the forward pass).

use std::sync::{Mutex, MutexGuard};

use crate::{Error, Result};

/// A random generator. `Generator::new(seed)` always produces the same stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generator {
    seed: u64,
    /// Index of the next 128-bit Philox block.
    counter: u64,
    /// Unused words of the current block.
    buffer: [u32; 4],
    used: usize,
}

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

fn philox(counter: u64, seed: u64) -> [u32; 4] {
    let mut c = [counter as u32, (counter >> 32) as u32, 0, 0];
    let mut k = [seed as u32, (seed >> 32) as u32];
    for _ in 0..10 {
        let p0 = (M0 as u64) * (c[0] as u64);
        let p1 = (M1 as u64) * (c[2] as u64);
        c = [
            ((p1 >> 32) as u32) ^ c[1] ^ k[0],
            p1 as u32,
            ((p0 >> 32) as u32) ^ c[3] ^ k[1],
            p0 as u32,
        ];
        k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
    }
    c
}

/// Size in bytes of a saved generator state.
pub const STATE_BYTES: usize = 24;

impl Generator {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Generator {
            seed,
            counter: 0,
            buffer: [0; 4],
            used: 4,
        }
    }

    /// The seed this generator started from.
    pub fn initial_seed(&self) -> u64 {
        self.seed
    }

    /// Restarts the stream from `seed`.
    pub fn manual_seed(&mut self, seed: u64) {
        *self = Generator::new(seed);
    }

    /// The full state (seed, block counter, words used of the current block) as bytes.
    pub fn get_state(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STATE_BYTES);
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.counter.to_le_bytes());
        out.extend_from_slice(&(self.used as u64).to_le_bytes());
        out
    }

    /// Restores a state from [`Generator::get_state`].
    pub fn set_state(&mut self, state: &[u8]) -> Result<()> {
        let bytes: [u8; STATE_BYTES] = state.try_into().map_err(|_| {
            Error::argument(
                "Generator::set_state",
                format!(
                    "a generator state is {STATE_BYTES} bytes, got {}",
                    state.len()
                ),
                Some("pass bytes returned by get_state()"),
            )
        })?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let (seed, counter, used) = (word(0), word(1), word(2));
        if used > 4 || (used < 4 && counter == 0) {
            return Err(Error::argument(
                "Generator::set_state",
                "the state bytes are not a generator state",
                Some("pass bytes returned by get_state()"),
            ));
        }
        let buffer = if used < 4 {
            philox(counter - 1, seed)
        } else {
            [0; 4]
        };
        *self = Generator {
            seed,
            counter,
            buffer,
            used: used as usize,
        };
        Ok(())
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        if self.used == 4 {
            self.buffer = philox(self.counter, self.seed);
            self.counter = self.counter.wrapping_add(1);
            self.used = 0;
        }
        let v = self.buffer[self.used];
        self.used += 1;
        v
    }

    /// A uniform integer in `0..n` (`n > 0`), without modulo bias: 32 random bits when `n`
    /// fits them, else 64, redrawn while they fall in the incomplete last block.
    pub fn next_below(&mut self, n: u64) -> u64 {
        if n <= 1 {
            return 0;
        }
        if n <= u32::MAX as u64 {
            let n32 = n as u32;
            // Accepted values form whole blocks of n: `limit + 1` is a multiple of n.
            let limit = u32::MAX - (u32::MAX % n32 + 1) % n32;
            loop {
                let v = self.next_u32();
                if v <= limit {
                    return (v % n32) as u64;
                }
            }
        }
        let limit = u64::MAX - (u64::MAX % n + 1) % n;
        loop {
            let v = ((self.next_u32() as u64) << 32) | self.next_u32() as u64;
            if v <= limit {
                return v % n;
            }
        }
    }

    /// A uniform number in `[0, 1)` with 24 random bits.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
    }

    /// A uniform number in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        let hi = (self.next_u32() as u64) << 21;
        let lo = (self.next_u32() >> 11) as u64;
        (hi | lo) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A standard normal sample (Box-Muller).
    pub fn next_normal(&mut self) -> f64 {
        let u1 = 1.0 - self.next_f64(); // (0, 1]
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

static GLOBAL: Mutex<Option<Generator>> = Mutex::new(None);

/// Locks the process-wide generator (seeded with 0 until [`manual_seed`] is called).
pub fn global_generator() -> GlobalGenerator {
    let mut g = GLOBAL.lock().unwrap_or_else(|p| p.into_inner());
    g.get_or_insert_with(|| Generator::new(0));
    GlobalGenerator(g)
}

/// A locked handle to the process-wide generator.
pub struct GlobalGenerator(MutexGuard<'static, Option<Generator>>);

impl std::ops::Deref for GlobalGenerator {
    type Target = Generator;
    fn deref(&self) -> &Generator {
        self.0
            .as_ref()
            .unwrap_or_else(|| unreachable!("initialised on lock"))
    }
}

impl std::ops::DerefMut for GlobalGenerator {
    fn deref_mut(&mut self) -> &mut Generator {
        self.0.get_or_insert_with(|| Generator::new(0))
    }
}

/// Seeds the process-wide generator, as `torch.manual_seed`.
pub fn manual_seed(seed: u64) {
    global_generator().manual_seed(seed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_state_restores() {
        let mut a = Generator::new(42);
        let mut b = Generator::new(42);
        let xs: Vec<u32> = (0..10).map(|_| a.next_u32()).collect();
        let ys: Vec<u32> = (0..10).map(|_| b.next_u32()).collect();
        assert_eq!(xs, ys);
        let state = a.get_state();
        let next: Vec<u32> = (0..8).map(|_| a.next_u32()).collect();
        a.set_state(&state).unwrap();
        let again: Vec<u32> = (0..8).map(|_| a.next_u32()).collect();
        assert_eq!(next, again);
        assert!(a.set_state(&[1, 2]).is_err());
    }

    #[test]
    fn uniform_in_range_and_normal_moments() {
        let mut g = Generator::new(7);
        let n = 20000;
        let u: Vec<f32> = (0..n).map(|_| g.next_f32()).collect();
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let z: Vec<f64> = (0..n).map(|_| g.next_normal()).collect();
        let mean = z.iter().sum::<f64>() / n as f64;
        let var = z.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }
}
