//! The stable hash that assigns values to buckets.
//!
//! Bucket numbers are part of stored PartitionKeys, so the function must give the same answer
//! in every process, on every platform and with every Rust version, forever: `std`'s
//! `DefaultHasher` promises none of that. The hash is 64-bit FNV-1a over the UTF-8 bytes,
//! followed by MurmurHash3's 64-bit finalizer (`fmix64`). FNV-1a alone mixes its last bytes
//! into the high bits poorly — short sequential values such as `event-1`, `event-2` would
//! crowd into a few buckets — and the finalizer spreads every input bit over every output
//! bit. The hash is reduced to a bucket with a multiply-shift (`(hash × buckets) >> 64`),
//! which gives every bucket an equal share of the hash space. Changing any step would move
//! stored entries to other partitions; all of them are pinned by unit tests.

/// FNV-1a's 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The stable 64-bit hash of `bytes`: FNV-1a (for each byte, XOR it in, then multiply by
/// the FNV prime, wrapping), then MurmurHash3's `fmix64` finalizer. Stable across processes,
/// platforms and Rust versions.
///
/// # Example
/// ```
/// use tablekit_logtail::spread::stable_hash;
/// assert_eq!(stable_hash(b"a"), 0x82a2_a958_a9be_ce5b); // pinned: never changes
/// ```
pub fn stable_hash(bytes: &[u8]) -> u64 {
    fmix64(fnv1a64(bytes))
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// MurmurHash3's 64-bit finalizer: xor-shifts and multiplications that make every output bit
/// depend on every input bit.
fn fmix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// The bucket (`0..buckets`) of `value`: `(stable_hash(value) × buckets) >> 64`.
/// Stable like [`stable_hash`].
/// `buckets` of 0 is treated as 1.
pub fn bucket_of(value: &str, buckets: u32) -> u32 {
    let product = u128::from(stable_hash(value.as_bytes())) * u128::from(buckets.max(1));
    // The product of a u64 and a u32 shifted right by 64 is below the u32.
    u32::try_from(product >> 64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_published_test_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn hashes_are_pinned() {
        // If this test fails, stored data would move: do not change the function.
        let got: Vec<u64> = ["", "a", "foobar", "000123"]
            .iter()
            .map(|v| stable_hash(v.as_bytes()))
            .collect();
        assert_eq!(got, PINNED_HASHES);
    }

    const PINNED_HASHES: [u64; 4] = [
        0xefd0_1f60_ba99_2926,
        0x82a2_a958_a9be_ce5b,
        0x2c22_1949_22d1_672b,
        0x31f2_eaba_99e3_212e,
    ];

    #[test]
    fn buckets_are_pinned() {
        // If this test fails, stored data would move: do not change the function.
        let got: Vec<u32> = ["", "a", "foobar", "000123", "employee-42", "東京"]
            .iter()
            .map(|v| bucket_of(v, 16))
            .collect();
        assert_eq!(got, PINNED_16);
        assert_eq!(bucket_of("anything", 1), 0);
        assert_eq!(bucket_of("anything", 0), 0);
    }

    const PINNED_16: [u32; 6] = [14, 8, 2, 3, 14, 11];

    #[test]
    fn sequential_values_spread_evenly() {
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            counts[bucket_of(&format!("event-{i}"), 16) as usize] += 1;
        }
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(
            min >= Some(&800) && max <= Some(&1_200),
            "uneven buckets: {counts:?}"
        );
    }
}
