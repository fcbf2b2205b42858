//! PCG32 (pcg32_random_r, XSH-RR), the per-purpose streams and the per-choice sampling
//! streams of docs/spec/pcg32.md.

const MULT: u64 = 6364136223846793005;
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// The purpose id of the sampler's stream (also its PCG sequence id).
pub const PURPOSE_SAMPLE: u64 = 4;

/// O'Neill's PCG32: 64-bit LCG state, XSH-RR output (pcg-c-basic's `pcg32_random_r`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pcg32 {
    state: u64,
    inc: u64,
}

impl Pcg32 {
    /// `pcg32_srandom_r(seed, seq)`.
    pub fn new(seed: u64, seq: u64) -> Pcg32 {
        let mut g = Pcg32 { state: 0, inc: (seq << 1) | 1 };
        g.next_u32();
        g.state = g.state.wrapping_add(seed);
        g.next_u32();
        g
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        let old = self.state;
        self.state = old.wrapping_mul(MULT).wrapping_add(self.inc);
        let xorshifted = (((old >> 18) ^ old) >> 27) as u32;
        let rot = (old >> 59) as u32;
        xorshifted.rotate_right(rot)
    }

    /// A uniform double in [0, 1) with 53 random bits, from two outputs `a` then `b`:
    /// `((a >> 5) * 2^26 + (b >> 6)) * 2^-53`.
    pub fn uniform_f64(&mut self) -> f64 {
        let a = self.next_u32();
        let b = self.next_u32();
        ((a >> 5) as f64 * 67108864.0 + (b >> 6) as f64) * (1.0 / 9007199254740992.0)
    }
}

impl tl_core::Rng for Pcg32 {
    fn next_u32(&mut self) -> u32 {
        Pcg32::next_u32(self)
    }

    fn uniform_f64(&mut self) -> f64 {
        Pcg32::uniform_f64(self)
    }
}

/// splitmix64's finaliser.
fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The seed of the stream for `purpose`: `mix64(seed + purpose * GOLDEN)` (wrapping).
pub fn child_seed(seed: u64, purpose: u64) -> u64 {
    mix64(seed.wrapping_add(purpose.wrapping_mul(GOLDEN)))
}

/// The generator for `purpose`: `Pcg32::new(child_seed(seed, purpose), purpose)`.
pub fn stream(seed: u64, purpose: u64) -> Pcg32 {
    Pcg32::new(child_seed(seed, purpose), purpose)
}

/// The sampling generator of choice `choice` (0-based) of a request with seed `seed`, for
/// requests that ask for `n > 1` choices (docs/spec/pcg32.md, "Choices of one request"):
/// `Pcg32::new(child_seed(seed, PURPOSE_SAMPLE), PURPOSE_SAMPLE + (choice << 32))`.
///
/// Choice 0 is exactly `stream(seed, PURPOSE_SAMPLE)`, the generator of a single-choice
/// request; choice `c >= 1` has sequence id `4 + c * 2^32`, never a purpose id. Only the seed
/// and the choice index enter: not the request id, its arrival, its batch slot or its
/// neighbours, so the same seed gives the same streams in any request.
///
/// `choice` is a `u32`, so the shift never loses bits. PCG drops the top bit of a sequence
/// id (`inc = (seq << 1) | 1`), so choices `c` and `c + 2^31` share one generator; a request
/// has far fewer choices than that.
pub fn choice_stream(seed: u64, choice: u32) -> Pcg32 {
    Pcg32::new(child_seed(seed, PURPOSE_SAMPLE), PURPOSE_SAMPLE.wrapping_add((choice as u64) << 32))
}
