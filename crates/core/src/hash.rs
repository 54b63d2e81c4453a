//! A fast hasher for the engine's internal hash maps.
//!
//! Point lookups in the store and the lock table hash short keys (a TPC-C key is 2 to 4
//! integers of 9 bytes, a lock id is one `u64`) millions of times a second; SipHash, the
//! standard library's default, costs more than the lookup itself there. This is the multiply-
//! rotate hash of Firefox and rustc (`FxHasher`): fast, deterministic (no random seed, so runs
//! replay), and not resistant to collision attacks — keys are chosen by clients, so a hostile
//! client could slow down its own partition's lookups; correctness does not depend on it.
//! Nothing iterates these maps to produce output: every ordered walk uses an ordered structure.
//!
//! `finish` rotates the state by 26 bits, as rustc-hash 2 does. The multiply carries entropy
//! only upwards, so without it the low bits — the ones a hash table picks its bucket with —
//! depend only on the low bytes of each word, and an encoded key's varying bytes (the low-order
//! bytes of big-endian integers) fall in the high ones: TPC-C order-line keys would land in a
//! tiny fraction of the buckets, and every point read of the store
//! (`MvccStore::versions_of`) would probe a long chain.

use std::hash::{BuildHasherDefault, Hasher};

/// See the module doc.
#[derive(Clone, Copy, Default, Debug)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(i as u64);
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash.rotate_left(26)
    }
}

/// `HashMap<K, V, FxBuild>`: a map hashed with [`FxHasher`].
pub type FxBuild = BuildHasherDefault<FxHasher>;
/// A `HashMap` hashed with [`FxHasher`].
pub type FxHashMap<K, V> = std::collections::HashMap<K, V, FxBuild>;
/// A `HashSet` hashed with [`FxHasher`].
pub type FxHashSet<T> = std::collections::HashSet<T, FxBuild>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hash;

    fn hash_of(v: impl Hash) -> u64 {
        let mut h = FxHasher::default();
        v.hash(&mut h);
        h.finish()
    }

    #[test]
    fn equal_inputs_hash_equal_and_nearby_keys_differ() {
        let k = |i: i64| crate::Key::ints(&[1, 2, i]);
        assert_eq!(hash_of(k(7)), hash_of(k(7)));
        let hashes: std::collections::BTreeSet<u64> = (0..1000).map(|i| hash_of(k(i))).collect();
        assert_eq!(hashes.len(), 1000, "keys differing in their last bytes get different hashes");
    }

    #[test]
    fn encoded_keys_spread_over_the_low_bits_a_table_indexes_by() {
        // 65,536 TPC-C-shaped keys (warehouse, district, order, line) against 2^16 buckets
        // picked by the low 16 bits, as hashbrown picks them. Random hashes fill ~63% of the
        // buckets; the state without the final rotation filled under 1%.
        let buckets: std::collections::BTreeSet<u64> = (0..65_536i64)
            .map(|i| {
                hash_of(crate::Key::ints(&[1 + i % 2, 1 + i / 2 % 10, 1 + i / 20 % 3000, 1 + i / 60_000])) & 0xFFFF
            })
            .collect();
        assert!(buckets.len() > 65_536 / 2, "only {} of 65536 buckets used", buckets.len());
        // Sequential lock ids (one u64 each) spread too.
        let ids: std::collections::BTreeSet<u64> = (0..65_536u64).map(|i| hash_of(i) & 0xFFFF).collect();
        assert!(ids.len() > 65_536 / 2, "only {} of 65536 buckets used", ids.len());
    }

    #[test]
    fn map_works_as_a_map() {
        let mut m: FxHashMap<crate::Key, i64> = FxHashMap::default();
        for i in 0..100 {
            m.insert(crate::Key::ints(&[i]), i);
        }
        assert!((0..100).all(|i| m[&crate::Key::ints(&[i])] == i));
    }
}
