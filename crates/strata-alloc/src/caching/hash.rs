//! A fast hasher for the maps keyed by block address.
//!
//! The standard `RandomState` (SipHash) costs tens of nanoseconds per lookup, a large share of
//! a cached allocation. Addresses need no protection against chosen collisions; what they need
//! is spreading: they are multiples of 512, so a plain multiplicative hash (as Fx) would leave
//! the low bits, which pick the bucket, all zero. A folded 64x64->128-bit multiply mixes every
//! input bit into both halves.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Odd constant with well-spread bits (the 64-bit golden ratio).
const K: u64 = 0x9e37_79b9_7f4a_7c15;

/// Folded-multiply hasher for integer keys.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct AddrHasher {
    hash: u64,
}

impl AddrHasher {
    #[inline]
    fn add(&mut self, x: u64) {
        let p = u128::from(self.hash ^ x).wrapping_mul(u128::from(K));
        self.hash = (p as u64) ^ ((p >> 64) as u64);
    }
}

impl Hasher for AddrHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut buf = [0u8; 8];
            buf[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(buf));
        }
    }

    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }

    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
}

/// A `HashMap` hashed with [`AddrHasher`].
pub(crate) type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, BuildHasherDefault};

    #[test]
    fn aligned_addresses_spread_over_low_bits() {
        let b = BuildHasherDefault::<AddrHasher>::default();
        let mut low = std::collections::HashSet::new();
        for i in 0..256usize {
            low.insert(b.hash_one(0x7f00_0000_0000 + i * 512) & 0xff);
        }
        assert!(low.len() > 128, "only {} distinct low bytes", low.len());
    }

    #[test]
    fn map_works() {
        let mut m: AddrMap<usize, usize> = AddrMap::default();
        for i in 0..1000 {
            m.insert(i * 512, i);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.remove(&(999 * 512)), Some(999));
        assert_eq!(m.get(&512), Some(&1));
    }
}
