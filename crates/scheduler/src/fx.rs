//! A fast hasher for the core's hot maps, whose keys are short names, device ids and addresses that nodes and
//! drivers pick: SipHash (std's default, built to resist keys chosen to collide) costs several times more on
//! them, and it showed in the profiles of Filter and Reserve for device gangs.

use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-rotate hasher (the Firefox hasher, as rustc's `FxHasher`): for maps read once per node or device
/// on Filter's and Reserve's path. Not for keys an attacker picks to collide: these come from nodes, drivers and
/// the scheduler's own addresses.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits, which pick the bucket, depending on the low bits of the input only:
        // names that differ past a common 8-byte prefix (`node-1234`) would share them. MurmurHash3's finalizer
        // mixes the high bits down.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// Builds [`FxHasher`]s, for `HashMap<K, V, Fx>`.
pub type Fx = BuildHasherDefault<FxHasher>;
