//! Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//!
//! A draw is a pure function of (seed, stream, step, node, slot): no hidden sequential state,
//! so a stream's output is identical whatever else shares a batch and however many threads
//! run. `Generator` only remembers which `step` comes next.

const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = (a as u64) * (b as u64);
    ((p >> 32) as u32, p as u32)
}

/// Philox4x32 with 10 rounds.
#[inline]
pub fn philox4x32(mut ctr: [u32; 4], mut key: [u32; 2]) -> [u32; 4] {
    for _ in 0..10 {
        let (hi0, lo0) = mulhilo(M0, ctr[0]);
        let (hi1, lo1) = mulhilo(M1, ctr[2]);
        ctr = [hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0];
        key = [key[0].wrapping_add(W0), key[1].wrapping_add(W1)];
    }
    ctr
}

/// SplitMix64 finaliser: decorrelates nearby seeds and stream ids before they become keys.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 53-bit uniform in (0, 1]: never 0, so `u * q <= p` can't accept a zero-probability token.
#[inline]
fn to_unit(hi: u32, lo: u32) -> f64 {
    let bits = ((hi as u64) << 21) ^ (lo as u64 >> 11);
    ((bits & ((1u64 << 53) - 1)) as f64 + 1.0) * (1.0 / (1u64 << 53) as f64)
}

/// The stateful handle: (seed, stream) fix the key, `step` counts calls that drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Generator {
    pub seed: u64,
    pub stream: u64,
    pub step: u64,
}

impl Generator {
    pub fn new(seed: u64, stream: u64) -> Self {
        Self {
            seed,
            stream,
            step: 0,
        }
    }

    /// An independent stream: a fork's stream id hashes the parent's id with `stream_id`, so
    /// forks of forks never collide with their parent's siblings by construction of the tree.
    pub fn fork(&self, stream_id: u64) -> Self {
        Self::new(
            self.seed,
            mix64(self.stream ^ mix64(stream_id.wrapping_add(1))),
        )
    }

    /// Draws for one call: takes the current step and advances it.
    pub fn next_step(&mut self) -> StepRng {
        let s = StepRng::new(self.seed, self.stream, self.step);
        self.step = self.step.wrapping_add(1);
        s
    }
}

/// Uniforms for a single step, addressed by (node, slot).
#[derive(Clone, Copy, Debug)]
pub struct StepRng {
    key: [u32; 2],
    step: [u32; 2],
}

impl StepRng {
    pub fn new(seed: u64, stream: u64, step: u64) -> Self {
        let k = mix64(seed ^ mix64(stream));
        Self {
            key: [k as u32, (k >> 32) as u32],
            step: [step as u32, (step >> 32) as u32],
        }
    }

    /// Uniform in (0, 1] for draw `slot` at tree node `node`.
    #[inline]
    pub fn uniform(&self, node: u32, slot: u32) -> f64 {
        let r = philox4x32([node, slot, self.step[0], self.step[1]], self.key);
        to_unit(r[0], r[1])
    }
}

/// Slot numbers inside one node, fixed so that equivalent algorithms consume identical draws
/// (the coarse verifier with singleton groups reproduces the exact one bit for bit).
pub mod slot {
    /// Accept test of the child of rank r uses slot `ACCEPT + r`.
    pub const ACCEPT: u32 = 0;
    /// The node's final draw: the correction or bonus token.
    pub const EMIT: u32 = 0x8000_0000;
    /// The coarse verifier's draw of a group for the drafted token.
    pub const GROUP: u32 = 0x8000_0001;
    /// The coarse verifier's draw of a token inside the residual group.
    pub const MEMBER: u32 = 0x8000_0002;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn philox_known_answer() {
        // Random123 known-answer vectors for philox4x32-10.
        assert_eq!(
            philox4x32([0, 0, 0, 0], [0, 0]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32(
                [0xffff_ffff, 0xffff_ffff, 0xffff_ffff, 0xffff_ffff],
                [0xffff_ffff, 0xffff_ffff]
            ),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
    }

    /// Counts of `n` values in 32 equal bins of (0, 1].
    fn unit_histogram(n: u32, draw: impl Fn(u32) -> f64) -> Vec<usize> {
        let mut counts = vec![0usize; 32];
        for i in 0..n {
            let u = draw(i);
            assert!(u > 0.0 && u <= 1.0);
            counts[((u * 32.0).ceil() as usize).clamp(1, 32) - 1] += 1;
        }
        counts
    }

    #[test]
    fn uniforms_in_half_open_unit_interval() {
        // The whole law (32 bins), not just the mean: a broken mapping with the right mean
        // (the average of two uniforms: triangular) must fail the same check, and so must
        // a generator whose draw ignores the element index (one value repeated).
        use crate::testlaw::law_ok;
        let s = StepRng::new(1, 2, 3);
        let flat = vec![1.0 / 32.0; 32];
        assert!(law_ok(&unit_histogram(100_000, |i| s.uniform(i, 0)), &flat));
        let other = StepRng::new(1, 2, 4);
        assert!(law_ok(
            &unit_histogram(100_000, |i| other.uniform(i, 1)),
            &flat
        ));
        let triangular = unit_histogram(100_000, |i| 0.5 * (s.uniform(i, 0) + s.uniform(i, 1)));
        assert!(!law_ok(&triangular, &flat));
        assert!(!law_ok(
            &unit_histogram(100_000, |_| s.uniform(7, 0)),
            &flat
        ));
    }

    #[test]
    fn steps_and_forks_differ() {
        let mut g = Generator::new(7, 0);
        let a = g.next_step().uniform(0, 0);
        let b = g.next_step().uniform(0, 0);
        assert_ne!(a, b);
        assert_eq!(g.step, 2);
        let f1 = g.fork(1);
        let f2 = g.fork(2);
        assert_ne!(f1.stream, f2.stream);
        assert_eq!(g.fork(1), f1);
    }
}
