//! The counter-based random stream shared by the CPU and Vulkan backends: SplitMix64, whose
//! i-th output (i from 0) is `mix(seed + (i + 1) * GAMMA)`, so any draw can be computed
//! directly from its index. A uniform in [0, 1) is the output's high 24 bits times 2^-24,
//! exactly representable in f32.
//!
//! It sits below both backends because both implement it bit for bit (the CPU's `gumbel`, the
//! Vulkan shader `kernels/glsl/gumbel.comp`), and models draw their noise from it.

/// The stream's increment (the golden-ratio constant of SplitMix64).
pub const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finaliser (Steele, Lea and Flood 2014; the constants of `java.util.SplittableRandom`).
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Output `i` of the stream started at `seed`.
pub fn splitmix64(seed: u64, i: u64) -> u64 {
    mix(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)))
}

/// Uniform `i` in [0, 1): the top 24 bits of output `i`, times 2^-24.
pub fn uniform(seed: u64, i: u64) -> f32 {
    (splitmix64(seed, i) >> 40) as f32 * (1.0 / 16_777_216.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_sequential_generator() {
        // The published sequential form: state += GAMMA; return mix(state).
        let seed = 1234567u64;
        let mut state = seed;
        for i in 0..1000 {
            state = state.wrapping_add(GAMMA);
            assert_eq!(splitmix64(seed, i), mix(state));
        }
    }

    #[test]
    fn known_values() {
        // First outputs for seed 0 of the reference C implementation (Vigna, splitmix64.c).
        assert_eq!(splitmix64(0, 0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0, 1), 0x6E78_9E6A_A1B9_65F4);
        for i in 0..10_000 {
            let u = uniform(99, i);
            assert!((0.0..1.0).contains(&u));
        }
    }
}
