//! A cheap hasher for the simulated routers' address tables. Their keys (own addresses,
//! network numbers) come from the experiment's topology, not from packets, so the standard
//! library's flood-resistant SipHash buys nothing there, and it took a tenth of a simulated
//! dumbbell's time. A packet's destination is only looked up in these tables.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// Multiply-and-fold over the written words; `finish` folds the well-mixed high half into
/// the low bits, which the table uses to pick a bucket (addresses of one subnet differ only
/// in their last bytes).
#[derive(Debug, Default, Clone, Copy)]
pub struct AddrHasher(u64);

const MUL: u64 = 0x9e37_79b9_7f4a_7c15;

impl AddrHasher {
    fn add(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(MUL);
    }
}

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(w));
        }
    }

    fn write_u32(&mut self, v: u32) {
        self.add(u64::from(v));
    }

    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

pub type AddrMap<K, V> = HashMap<K, V, BuildHasherDefault<AddrHasher>>;
pub type AddrSet<K> = HashSet<K, BuildHasherDefault<AddrHasher>>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn bucket_bits(key: impl Hash) -> u64 {
        BuildHasherDefault::<AddrHasher>::default().hash_one(key) & 0xff
    }

    /// The 256 hosts of one /24 spread over the low bits (a table's buckets) instead of
    /// landing in a few: a plain multiply would leave the low bits equal.
    #[test]
    fn addresses_of_one_subnet_spread_over_the_low_bits() {
        let low: HashSet<u64> = (0..=255u8).map(|x| bucket_bits([10, 1, 2, x])).collect();
        assert!(low.len() > 128, "{} distinct of 256", low.len());
        let nets: HashSet<u64> = (0..=255u32)
            .map(|x| bucket_bits(0x0a01_0000 | (x << 8)))
            .collect();
        assert!(nets.len() > 128, "{} distinct of 256", nets.len());
    }
}
