//! Every stored format tl-quant reads, and every fact of each GGUF block type, in one
//! place: the bottom layer the file reader ([`crate::ggml`]), the packers
//! ([`crate::pack`], [`crate::blocks`]) and the kernels read. A new block type is a
//! [`Format`] and a [`Blk`] variant, a row of [`FACTS`], an arm of [`unpack`] (its bytes
//! in the file) and a name in `per_type!`; the generic panels and kernels follow from the
//! facts, unless its value needs an operation they lack (a new [`Value`] or [`Scale`]:
//! MXFP4's e8m0 scale is one, docs/kernels.md "One home per block type").
//!
//! Nothing here depends on another file of the crate but the leaf `half_conv`, so nothing
//! imports in a circle.

/// How a weight matrix is stored: row-major `[out, inp]`, the GGML block types as runs of
/// blocks along each row (ggml's byte layouts; values: docs/spec/numbers.md).
#[allow(non_camel_case_types)] // the GGML names
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// f32.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// GGML Q4_0: blocks of 32, f16 `d`, 16 bytes of 4-bit codes; `w = (q - 8) d`.
    Q4_0,
    /// GGML Q4_1: blocks of 32, f16 `d` and `m`, 16 bytes of codes; `w = q d + m`.
    Q4_1,
    /// GGML Q8_0: blocks of 32, f16 `d`, 32 i8; `w = q d`.
    Q8_0,
    /// GGML Q5_0: blocks of 32, f16 `d`, 32 high bits, 16 bytes; `w = (q - 16) d`.
    Q5_0,
    /// GGML Q5_1: blocks of 32, f16 `d` and `m`, 32 high bits, 16 bytes; `w = q d + m`.
    Q5_1,
    /// GGML IQ4_NL: blocks of 32, f16 `d`, 16 bytes of 4-bit indices; `w = d T[q]`.
    IQ4_NL,
    /// GGML Q2_K: 256 weights, 16 4-bit scale/min pairs, 2-bit codes, f16 `d`, `dmin`.
    Q2_K,
    /// GGML Q3_K: 256 weights, high bits, 2-bit codes, 16 6-bit scales, f16 `d`.
    Q3_K,
    /// GGML Q4_K: 256 weights, f16 `d`, `dmin`, 8 6-bit scale/min pairs, 4-bit codes.
    Q4_K,
    /// GGML Q5_K: as Q4_K with a fifth bit per weight.
    Q5_K,
    /// GGML Q6_K: 256 weights, 4 + 2 bit codes, 16 int8 scales, f16 `d`.
    Q6_K,
    /// GGML MXFP4 (OCP microscaling FP4): blocks of 32, an e8m0 exponent byte `e`, 16
    /// bytes of 4-bit e2m1 codes; `w = T[q] 2^(e - 128)` with `T` the doubled e2m1 values.
    MXFP4,
    /// Symmetric int4 in groups of `group` columns (numbers.md `int4-g<g>-sym`).
    Int4 {
        /// Columns per scale.
        group: usize,
    },
}

/// One GGUF block of a [`Format`] as the file stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockShape {
    /// Weights per block.
    pub weights: usize,
    /// Bytes per block.
    pub bytes: usize,
    /// Byte offsets of the block's f16 scales (`d`, then `m` or `dmin`): a file whose
    /// scale is infinite or NaN is refused.
    pub f16_scales: &'static [usize],
    /// Whether the block's scale is instead an e8m0 exponent byte at offset 0 (MXFP4): a
    /// file whose exponent lets a weight overflow f32 is refused ([`E8M0_MAX`]).
    pub e8m0_scale: bool,
}

/// The largest e8m0 exponent tl reads: at 253 and above `12 * 2^(e - 128)` overflows f32
/// (and OCP's MX spec makes 255 a NaN). llama.cpp's quantizer writes at most 252
/// (`floor(log2(max|w|)) - 2 + 127` for finite f32 weights), so only a damaged or
/// hand-made file has more.
pub const E8M0_MAX: u8 = 252;

impl Format {
    /// Bytes of one stored row of `inp` values (`None` when `inp` does not split into
    /// the format's blocks).
    pub fn row_bytes(self, inp: usize) -> Option<usize> {
        match self {
            Format::F32 => inp.checked_mul(4),
            Format::F16 | Format::BF16 => inp.checked_mul(2),
            Format::Int4 { .. } => inp.is_multiple_of(2).then_some(inp / 2),
            _ => {
                let b = self.block_shape()?;
                inp.is_multiple_of(b.weights).then_some(inp / b.weights * b.bytes)
            }
        }
    }

    /// The file's block of a GGUF block type (`None` for F32, F16, BF16 and int4).
    pub fn block_shape(self) -> Option<BlockShape> {
        let f = Blk::of(self)?.facts();
        Some(BlockShape { weights: f.k, bytes: f.bytes, f16_scales: f.f16, e8m0_scale: f.scale == Scale::E8M0 })
    }

    /// Whether `--activations q8` changes a layer held in this format: it has an integer
    /// kernel ([`Facts::int8`]; tl's int4 runs as Q4_0's panels). Layers in the others
    /// compute exactly as in the exact mode.
    pub fn has_int8_kernel(self) -> bool {
        let blk = if let Format::Int4 { .. } = self { Some(Blk::Q4_0) } else { Blk::of(self) };
        blk.is_some_and(|b| b.facts().int8)
    }

    /// The format of a GGUF tensor type, by llama.cpp's name ("Q4_K", "BF16", ...), when
    /// tl-quant reads it.
    pub fn from_ggml_name(name: &str) -> Option<Format> {
        match name {
            "F32" => Some(Format::F32),
            "F16" => Some(Format::F16),
            "BF16" => Some(Format::BF16),
            _ => Blk::ALL.iter().map(|b| b.facts()).find(|f| f.name == name).map(|f| f.format),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Format::Int4 { group } => write!(f, "int4-g{group}-sym"),
            other => write!(f, "{other:?}"),
        }
    }
}

/// A GGUF block type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blk {
    Q4_0,
    Q4_1,
    Q8_0,
    Q5_0,
    Q5_1,
    Iq4Nl,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Mxfp4,
}

/// How a block stores its scale `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scale {
    /// An f16 at `f16[0]`.
    F16,
    /// An e8m0 exponent byte at offset 0, `d = 2^(e - 128)` (ggml's "half" reading: the
    /// code book holds the e2m1 values doubled).
    E8M0,
}

/// How a weight's value follows from its unsigned code `u`, its block's f16 `d` (and
/// second f16 `dm`), and its sub-block's scale `sc` and min `mn`; `a` is `d` for a type
/// without sub-block scales and `d * sc` for one with. numbers.md "GGUF blocks".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// `a (u - c)`: a code centred on `c` (Q8_0's i8 is read as the offset-binary
    /// `q + 128`, so every type's code is unsigned).
    Centered(u32),
    /// `u a + dm`: a stored min per block (Q4_1, Q5_1).
    Min,
    /// `a u - dm mn`: a min per sub-block, times the block's `dmin` (the K types).
    SubMin,
    /// `d T[u]`: a code book.
    Table(&'static [i8; 16]),
}

/// How a block keeps its sub-block scales (and mins), one row of a panel block's bytes
/// each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scales {
    /// One scale, the block's `d`.
    None,
    /// A signed byte per sub-block: Q3_K's 6-bit scale minus 32, Q6_K's i8.
    I8,
    /// A byte per sub-block, the scale in its low and the min in its high nibble (Q2_K).
    Nibbles,
    /// A scale byte per sub-block, then a min byte per sub-block (Q4_K and Q5_K's 6-bit
    /// pairs, unpacked from the file's 12 bytes).
    Pairs,
}

/// The facts of one block type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Facts {
    /// llama.cpp's name.
    pub name: &'static str,
    pub format: Format,
    /// Weights per block.
    pub k: usize,
    /// Weights per sub-block scale (`k` with [`Scales::None`]).
    pub sub: usize,
    /// Bytes per block in the file.
    pub bytes: usize,
    /// Offsets of the f16 scales in the file's block, `d` first.
    pub f16: &'static [usize],
    /// How the block's `d` is stored.
    pub scale: Scale,
    pub value: Value,
    pub scales: Scales,
    /// Bits per code.
    pub bits: u32,
    /// Bits of each code a panel keeps apart, in words of high bits after the low words
    /// (the types whose low bits fill a word evenly; Q6_K keeps whole 6-bit codes, 0).
    pub hi_bits: u32,
    /// Whether the int8-activation mode has an integer kernel for the type
    /// ([`crate::int8`]; the others stay exact in that mode).
    pub int8: bool,
}

/// IQ4_NL's code book (ggml-common.h `kvalues_iq4nl`).
const IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// MXFP4's code book: the e2m1 values (sign bit 3, two exponent bits, one mantissa bit)
/// doubled so they are integers (ggml-common.h `kvalues_mxfp4`); the scale halves back.
const MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// One table row.
#[allow(clippy::too_many_arguments)]
const fn row(
    name: &'static str,
    format: Format,
    k: usize,
    sub: usize,
    bytes: usize,
    f16: &'static [usize],
    value: Value,
    scales: Scales,
    bits: u32,
    hi_bits: u32,
    int8: bool,
) -> Facts {
    let scale = if f16.is_empty() { Scale::E8M0 } else { Scale::F16 };
    Facts { name, format, k, sub, bytes, f16, scale, value, scales, bits, hi_bits, int8 }
}

/// Every block type's facts (ggml-common.h's `block_*` structs), in [`Blk`]'s order:
/// name, format, weights per block and per sub-block scale, bytes per block, f16 scale
/// offsets (none: an e8m0 exponent byte first, [`Scale::E8M0`]), value, sub-block scales,
/// bits per code, bits a panel keeps apart, and whether it has an integer kernel.
const FACTS: [Facts; Blk::ALL.len()] = {
    use Format as F;
    use Scales as S;
    use Value as V;
    [
        row("Q4_0", F::Q4_0, 32, 32, 18, &[0], V::Centered(8), S::None, 4, 0, true),
        row("Q4_1", F::Q4_1, 32, 32, 20, &[0, 2], V::Min, S::None, 4, 0, true),
        row("Q8_0", F::Q8_0, 32, 32, 34, &[0], V::Centered(128), S::None, 8, 0, true),
        row("Q5_0", F::Q5_0, 32, 32, 22, &[0], V::Centered(16), S::None, 5, 1, true),
        row("Q5_1", F::Q5_1, 32, 32, 24, &[0, 2], V::Min, S::None, 5, 1, true),
        row("IQ4_NL", F::IQ4_NL, 32, 32, 18, &[0], V::Table(&IQ4NL), S::None, 4, 0, false),
        row("Q2_K", F::Q2_K, 256, 16, 84, &[80, 82], V::SubMin, S::Nibbles, 2, 0, false),
        row("Q3_K", F::Q3_K, 256, 16, 110, &[108], V::Centered(4), S::I8, 3, 1, false),
        row("Q4_K", F::Q4_K, 256, 32, 144, &[0, 2], V::SubMin, S::Pairs, 4, 0, true),
        row("Q5_K", F::Q5_K, 256, 32, 176, &[0, 2], V::SubMin, S::Pairs, 5, 1, true),
        row("Q6_K", F::Q6_K, 256, 16, 210, &[208], V::Centered(32), S::I8, 6, 0, true),
        row("MXFP4", F::MXFP4, 32, 32, 17, &[], V::Table(&MXFP4), S::None, 4, 0, false),
    ]
};

// FACTS is indexed by the discriminant: each row must be its type's.
const _: () = {
    let mut i = 0;
    while i < Blk::ALL.len() {
        assert!(Blk::ALL[i] as usize == i);
        i += 1;
    }
};

impl Blk {
    /// Every block type.
    pub(crate) const ALL: [Blk; 12] = [
        Blk::Q4_0,
        Blk::Q4_1,
        Blk::Q8_0,
        Blk::Q5_0,
        Blk::Q5_1,
        Blk::Iq4Nl,
        Blk::Q2K,
        Blk::Q3K,
        Blk::Q4K,
        Blk::Q5K,
        Blk::Q6K,
        Blk::Mxfp4,
    ];

    /// The block type's facts ([`FACTS`]). The kernels call it with a constant type
    /// (`per_type!`) and rely on LLVM folding every fact into their loops: a row read from
    /// a constant table folds in one step, where an 11-arm match inlined at every use grew
    /// the tile functions until LLVM stopped inlining the intrinsics into them.
    #[inline(always)]
    pub(crate) const fn facts(self) -> Facts {
        FACTS[self as usize]
    }

    /// The block type of a format, if it is one.
    pub(crate) fn of(format: Format) -> Option<Blk> {
        Blk::ALL.into_iter().find(|b| b.facts().format == format)
    }

    /// Weights per block.
    #[inline(always)]
    pub(crate) const fn k(self) -> usize {
        self.facts().k
    }

    /// Weights per sub-block scale.
    #[inline(always)]
    pub(crate) const fn sub(self) -> usize {
        self.facts().sub
    }

    /// Whether the block has a second f16 (`m` or `dmin`).
    #[inline(always)]
    pub(crate) const fn has_dm(self) -> bool {
        matches!(self.facts().value, Value::Min | Value::SubMin)
    }
}

/// `$body` with `$c` a constant equal to `$f`, one match arm per block type kept in
/// [`crate::blocks`]' generic panels: the kernels there are `inline(always)` and take the
/// type as a value, so each arm compiles its own loop with the layout, the loop counts
/// and the per-type branches folded away. Without it the type is a run-time value in the
/// innermost loop (docs/kernels.md: a decode that took 2x Q4_0's time on Q4_K). Q4_0, Q4_1
/// and Q8_0 have panels of their own ([`crate::pack`]) and never reach it.
macro_rules! per_type {
    ($f:expr, $c:ident => $body:expr) => {
        $crate::format::per_type!(@ $f, $c, $body, Q5_0 Q5_1 Iq4Nl Q2K Q3K Q4K Q5K Q6K Mxfp4)
    };
    (@ $f:expr, $c:ident, $body:expr, $($t:ident)*) => {{
        use $crate::format::Blk;
        match $f {
            $(Blk::$t => {
                const $c: Blk = Blk::$t;
                $body
            })*
            other => unreachable!("{other:?} has panels of its own"),
        }
    }};
}
pub(crate) use per_type;

/// `$body` with `$b` a constant equal to `$f`'s discriminant, one match arm per block type
/// with an integer kernel ([`Facts::int8`]): the int8 kernel compiles its loops once per
/// type with the facts folded in (a const generic, which a `Blk` cannot be). The list is
/// the column's: the assertion below keeps the two equal.
macro_rules! per_int_type {
    ($f:expr, $b:ident => $body:expr) => {
        $crate::format::per_int_type!(@ $f, $b, $body, Q4_0 Q4_1 Q8_0 Q5_0 Q5_1 Q4K Q5K Q6K)
    };
    (@ $f:expr, $b:ident, $body:expr, $($t:ident)*) => {{
        use $crate::format::Blk;
        match $f {
            $(Blk::$t => {
                const $b: usize = Blk::$t as usize;
                $body
            })*
            other => unreachable!("{other:?} has no integer kernel"),
        }
    }};
}
pub(crate) use per_int_type;

// `per_int_type!`'s list and the `int8` column name the same types.
const _: () = {
    let listed = [Blk::Q4_0, Blk::Q4_1, Blk::Q8_0, Blk::Q5_0, Blk::Q5_1, Blk::Q4K, Blk::Q5K, Blk::Q6K];
    let (mut i, mut n) = (0, 0);
    while i < listed.len() {
        assert!(listed[i].facts().int8);
        i += 1;
    }
    i = 0;
    while i < Blk::ALL.len() {
        n += Blk::ALL[i].facts().int8 as usize;
        i += 1;
    }
    assert!(n == listed.len());
};

/// One block, unpacked. `d` and `dm` are f16 bit patterns (`dm`: the second f16, `m` or
/// `dmin`, else 0; `d`: the e8m0 byte of a [`Scale::E8M0`] type, [`scale_value`]); `sc[s]`, `mn[s]` the scale and min of sub-block `s` as [`value`] uses
/// them (Q3_K: the 6-bit scale minus 32; Q6_K: the int8); `u[k]` the unsigned code of
/// weight `k` in natural order (Q3_K: 2-bit code | high bit << 2; Q5_x: nibble | high bit
/// << 4; Q6_K: nibble | 2 high bits << 4; Q8_0: the i8 plus 128).
pub(crate) struct Unpacked {
    pub d: u16,
    pub dm: u16,
    pub sc: [i8; 16],
    pub mn: [u8; 16],
    pub u: [u8; 256],
}

impl Unpacked {
    /// All zeros.
    pub(crate) fn zero() -> Unpacked {
        Unpacked { d: 0, dm: 0, sc: [0; 16], mn: [0; 16], u: [0; 256] }
    }
}

/// The f16 bit pattern at byte `at`.
pub(crate) fn h(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// Q4_K / Q5_K: scale and min `j` (0..8) from the 12 packed 6-bit bytes (`get_scale_min_k4`).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Read one block of `f` (`b` holds exactly `f.facts().bytes`): the file's bytes, the one
/// place that knows where each type keeps its codes.
#[allow(clippy::needless_range_loop)] // codes, scales and bytes indexed together
pub(crate) fn unpack(f: Blk, b: &[u8], o: &mut Unpacked) {
    let facts = f.facts();
    o.d = match facts.scale {
        Scale::F16 => h(b, facts.f16[0]),
        Scale::E8M0 => b[0] as u16,
    };
    o.dm = if f.has_dm() { h(b, facts.f16[1]) } else { 0 };
    match f {
        Blk::Q8_0 => {
            for (u, &q) in o.u.iter_mut().zip(&b[2..34]) {
                *u = q ^ 0x80; // q + 128 (Value::Centered(128))
            }
        }
        Blk::Q4_0 | Blk::Q4_1 | Blk::Q5_0 | Blk::Q5_1 | Blk::Iq4Nl | Blk::Mxfp4 => {
            let (qh, qs) = match f {
                Blk::Q5_0 => (u32::from_le_bytes([b[2], b[3], b[4], b[5]]), &b[6..22]),
                Blk::Q5_1 => (u32::from_le_bytes([b[4], b[5], b[6], b[7]]), &b[8..24]),
                Blk::Q4_1 => (0, &b[4..20]),
                Blk::Mxfp4 => (0, &b[1..17]),
                _ => (0, &b[2..18]),
            };
            // Byte j: weight j in the low nibble, j + 16 in the high; bit k of qh is weight
            // k's fifth bit.
            for j in 0..16 {
                o.u[j] = (qs[j] & 15) | (((qh >> j) & 1) << 4) as u8;
                o.u[j + 16] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
            }
        }
        Blk::Q2K => {
            let (scales, qs) = (&b[0..16], &b[16..80]);
            for s in 0..16 {
                o.sc[s] = (scales[s] & 15) as i8;
                o.mn[s] = scales[s] >> 4;
            }
            // Per 128 weights, 32 bytes; shift 2j picks the j-th group of 32 (16 from
            // bytes 0..16, then 16 from bytes 16..32).
            for k in 0..256 {
                let (n, j, l) = (k / 128, (k % 128) / 32, k % 32);
                o.u[k] = (qs[32 * n + l] >> (2 * j)) & 3;
            }
        }
        Blk::Q3K => {
            let (hm, qs, sb) = (&b[0..32], &b[32..96], &b[96..108]);
            for s in 0..16 {
                let lo = (sb[s % 8] >> (4 * (s / 8))) & 15;
                let hi = (sb[8 + s % 4] >> (2 * (s / 4))) & 3;
                o.sc[s] = (lo | hi << 4) as i8 - 32;
            }
            for k in 0..256 {
                let (n, j, l) = (k / 128, (k % 128) / 32, k % 32);
                let low = (qs[32 * n + l] >> (2 * j)) & 3;
                let high = (hm[l] >> (4 * n + j)) & 1;
                o.u[k] = low | high << 2;
            }
        }
        Blk::Q4K | Blk::Q5K => {
            let sb = &b[4..16];
            for s in 0..8 {
                let (sc, mn) = scale_min_k4(s, sb);
                o.sc[s] = sc as i8;
                o.mn[s] = mn;
            }
            let (qh, qs) = if f == Blk::Q5K { (&b[16..48], &b[48..176]) } else { (&b[0..0], &b[16..144]) };
            // Per 64 weights, 32 bytes: low nibbles first, then high nibbles; Q5_K's fifth
            // bit of weight (c, half, l) is bit 2c + half of qh[l].
            for k in 0..256 {
                let (c, half, l) = (k / 64, (k % 64) / 32, k % 32);
                let nib = (qs[32 * c + l] >> (4 * half)) & 15;
                let high = if f == Blk::Q5K { (qh[l] >> (2 * c + half)) & 1 } else { 0 };
                o.u[k] = nib | high << 4;
            }
        }
        Blk::Q6K => {
            let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
            for s in 0..16 {
                o.sc[s] = sc[s] as i8;
            }
            // Per 128 weights: 64 low bytes, 32 high bytes; quarter q of the 128 takes
            // nibble q / 2 of ql[l + 32 (q % 2)] and bits 2q of qh[l].
            for k in 0..256 {
                let (n, q, l) = (k / 128, (k % 128) / 32, k % 32);
                let nib = (ql[64 * n + l + 32 * (q % 2)] >> (4 * (q / 2))) & 15;
                let high = (qh[32 * n + l] >> (2 * q)) & 3;
                o.u[k] = nib | high << 4;
            }
        }
    }
}

/// The f32 scale `d` of a block from [`Unpacked::d`]: the f16 widened, or `2^(e - 128)`
/// for an e8m0 byte (exact for every byte: the smallest, `2^-128`, is an f32 subnormal).
#[inline(always)]
pub(crate) fn scale_value(facts: &Facts, d: u16) -> f32 {
    match facts.scale {
        Scale::F16 => crate::half_conv::f16_to_f32(d),
        Scale::E8M0 => e8m0_half(d as u8),
    }
}

/// `2^(e - 128)` from its bits (ggml-impl.h `ggml_e8m0_to_fp32_half`): subnormal below
/// `e = 2`, else the exponent field `e - 1`.
#[inline(always)]
pub(crate) fn e8m0_half(e: u8) -> f32 {
    f32::from_bits(if e < 2 { 0x0020_0000 << e } else { (e as u32 - 1) << 23 })
}

/// The f32 value of a weight of a type with `facts` (docs/spec/numbers.md "GGUF blocks",
/// [`Value`]), from its block's widened `d`, `dm` and its sub-block's `sc`, `mn` and its
/// code `u`.
#[inline(always)]
pub(crate) fn value(facts: &Facts, d: f32, dm: f32, sc: i8, mn: u8, u: u8) -> f32 {
    let a = if matches!(facts.scales, Scales::None) { d } else { d * sc as f32 };
    match facts.value {
        Value::Centered(c) => a * (u as i32 - c as i32) as f32,
        Value::Min => u as f32 * a + dm,
        Value::SubMin => a * u as f32 - dm * mn as f32,
        Value::Table(t) => d * t[u as usize & 15] as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_of_the_table_is_its_types() {
        for b in Blk::ALL {
            let f = b.facts();
            assert_eq!(Blk::of(f.format), Some(b));
            assert_eq!(f.format.to_string(), f.name);
            assert_eq!(Format::from_ggml_name(f.name), Some(f.format));
        }
    }
}
