//! Reading a decoder's tensors (Hugging Face Llama names). Every matrix becomes one `tl_quant::Linear`, held as
//! `EngineConfig.weights` says: in the file's own format (`native`: F32/F16/BF16 and every
//! GGUF block type tl-quant reads, Q4_0 .. Q8_0, IQ4_NL, Q2_K .. Q6_K and MXFP4), widened to f32 (`f32`), or
//! with the projections quantized to int4 at load (`int4`). An int4 checkpoint's
//! projections stay int4. Native and f32 give the same logits bit for bit.

use tl_core::{BuildCtx, DType, ModelError, WeightError, WeightStore, Weights};
use tl_quant::{Activations, Format, Linear, QLinear, QuantError};

/// How the seven projections are stored or converted.
#[derive(Clone, Copy)]
enum ProjFormat {
    /// `<name>.weight`, widened to f32.
    Float,
    /// `<name>.weight`, kept as stored.
    Native,
    /// `<name>.weight`, widened and quantized at load with this group.
    QuantizeAtLoad(usize),
    /// `<name>.qweight` + `<name>.scales` from an int4 checkpoint with this group.
    Int4File(usize),
}

fn quant_err(store: &dyn WeightStore, name: &str, e: QuantError) -> ModelError {
    ModelError::Weights(WeightError::Tensor {
        path: store.path().to_path_buf(),
        name: name.to_string(),
        reason: e.to_string(),
    })
}

/// The group of an `"int4-g<g>-sym"` metadata value.
fn parse_quant_tag(store: &dyn WeightStore, tag: &str) -> Result<usize, ModelError> {
    tag.strip_prefix("int4-g")
        .and_then(|r| r.strip_suffix("-sym"))
        .and_then(|g| g.parse::<usize>().ok())
        .filter(|&g| g > 0)
        .ok_or_else(|| {
            ModelError::Weights(WeightError::Format {
                path: store.path().to_path_buf(),
                reason: format!("metadata quant = {tag:?}: expected \"int4-g<group>-sym\""),
            })
        })
}

fn le_u16s(bytes: &[u8]) -> Vec<u16> {
    bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()
}

fn projection(
    store: &dyn WeightStore,
    base: &str,
    out: usize,
    inp: usize,
    fmt: ProjFormat,
) -> Result<Linear, ModelError> {
    let weight = format!("{base}.weight");
    match fmt {
        ProjFormat::Int4File(group) => {
            let qname = format!("{base}.qweight");
            let sname = format!("{base}.scales");
            if !inp.is_multiple_of(group) || !group.is_multiple_of(2) {
                return Err(quant_err(store, &qname, QuantError::BadGroup { group, inp }));
            }
            let qweight = store.raw(&qname, DType::U8, &[out, inp / 2])?.to_vec();
            let scales = le_u16s(store.raw(&sname, DType::F16, &[out, inp / group])?);
            store.done_with(&qname);
            store.done_with(&sname);
            let q = QLinear::from_parts(out, inp, group, qweight, scales).map_err(|e| quant_err(store, &qname, e))?;
            Linear::from_int4(&q).map_err(|e| quant_err(store, &qname, e))
        }
        ProjFormat::QuantizeAtLoad(group) => {
            let w = store.f32(&weight, &[out, inp])?;
            store.done_with(&weight);
            let q = QLinear::quantize(&w, out, inp, group).map_err(|e| quant_err(store, &weight, e))?;
            Linear::from_int4(&q).map_err(|e| quant_err(store, &weight, e))
        }
        ProjFormat::Float => matrix(store, &weight, out, inp, false),
        ProjFormat::Native => matrix(store, &weight, out, inp, true),
    }
}

/// The kernel format of a stored type, when the kernels read it as it is.
fn native_format(dtype: &DType) -> Option<Format> {
    match dtype {
        DType::F32 => Some(Format::F32),
        DType::F16 => Some(Format::F16),
        DType::BF16 => Some(Format::BF16),
        DType::Other(t) => Format::from_ggml_name(t),
        DType::U8 => None,
    }
}

/// A `[out, inp]` matrix: as stored when `native` and the kernels read its type, else
/// widened to f32.
fn matrix(store: &dyn WeightStore, name: &str, out: usize, inp: usize, native: bool) -> Result<Linear, ModelError> {
    let format = store.info(name).and_then(|i| native_format(&i.dtype));
    let lin = match format {
        Some(format) if native => {
            let stored = store.stored(name, &[out, inp])?;
            Linear::from_stored(format, &stored.bytes, out, inp)
        }
        _ => Linear::new_f32(store.f32(name, &[out, inp])?, out, inp),
    };
    store.done_with(name);
    lin.map_err(|e| quant_err(store, name, e))
}

/// A family's view of its checkpoint under the engine's weight mode
/// (`EngineConfig.weights`): projections native, widened to f32 or int4 (an int4
/// checkpoint's own group wins), the embedding and LM head never int4, vectors (norms,
/// biases) as f32. A family's loader fetches its own tensors with it (Gemma's four norms
/// per layer, Qwen3's q/k norms) exactly as `load` fetches Llama's.
pub struct Loader<'a> {
    store: &'a dyn WeightStore,
    fmt: ProjFormat,
    /// Embedding and LM head kept as stored (everything but `--weights f32`).
    native: bool,
    /// How the projections (and the LM head) treat their input rows; routers stay exact.
    act: Activations,
}

impl<'a> Loader<'a> {
    /// The loader for `ctx`'s checkpoint and engine settings; an int4 checkpoint whose
    /// `quant` metadata is not `"int4-g<group>-sym"` is an error.
    pub fn new(ctx: &BuildCtx<'a>) -> Result<Loader<'a>, ModelError> {
        let store = ctx.weights;
        let fmt = match (store.metadata("quant"), ctx.engine.weights) {
            // An int4 file cannot be requantized without loss; its own group wins.
            (Some(tag), _) => ProjFormat::Int4File(parse_quant_tag(store, &tag)?),
            (None, Weights::Int4 { group }) => ProjFormat::QuantizeAtLoad(group),
            (None, Weights::F32) => ProjFormat::Float,
            (None, Weights::Native) => ProjFormat::Native,
        };
        Ok(Loader { store, fmt, native: ctx.engine.weights != Weights::F32, act: ctx.engine.activations })
    }

    /// The checkpoint.
    pub fn store(&self) -> &'a dyn WeightStore {
        self.store
    }

    /// The `[out, inp]` projection `<base>.weight` (or an int4 checkpoint's
    /// `<base>.qweight` and `<base>.scales`) under the weight mode.
    pub fn proj(&self, base: &str, out: usize, inp: usize) -> Result<Linear, ModelError> {
        Ok(projection(self.store, base, out, inp, self.fmt)?.with_activations(self.act))
    }

    /// Rows `rows` of the `[out, inp]` projection `<base>.weight`, as a `[rows.len(), inp]`
    /// projection under the weight mode (a stored row is whole in every format, so the
    /// rows are cut from the stored bytes): Qwen3.5's `q_proj`, query and gate rows
    /// interleaved per head. An int4 checkpoint's packed projection is refused.
    pub fn proj_rows(&self, base: &str, rows: &[usize], out: usize, inp: usize) -> Result<Linear, ModelError> {
        let name = format!("{base}.weight");
        let bad = |reason: String| {
            ModelError::Weights(WeightError::Tensor {
                path: self.store.path().to_path_buf(),
                name: name.clone(),
                reason,
            })
        };
        if let Some(&r) = rows.iter().find(|&&r| r >= out) {
            return Err(bad(format!("row {r} of a {out}-row projection")));
        }
        let lin = match self.fmt {
            ProjFormat::Int4File(_) => return Err(bad("rows of an int4 checkpoint's packed projection".into())),
            ProjFormat::QuantizeAtLoad(group) => {
                let w = self.store.f32(&name, &[out, inp])?;
                let picked: Vec<f32> = rows.iter().flat_map(|&r| w[r * inp..(r + 1) * inp].iter().copied()).collect();
                let q =
                    QLinear::quantize(&picked, rows.len(), inp, group).map_err(|e| quant_err(self.store, &name, e))?;
                Linear::from_int4(&q).map_err(|e| quant_err(self.store, &name, e))?
            }
            ProjFormat::Float | ProjFormat::Native => {
                let format = self
                    .store
                    .info(&name)
                    .and_then(|i| native_format(&i.dtype))
                    .ok_or_else(|| bad("a stored type the kernels do not read".into()))?;
                let size = format.row_bytes(inp).ok_or_else(|| bad(format!("rows of {inp} do not fit {format:?}")))?;
                let stored = self.store.stored(&name, &[out, inp])?;
                let bytes: Vec<u8> =
                    rows.iter().flat_map(|&r| stored.bytes[r * size..(r + 1) * size].iter().copied()).collect();
                return self.rebuilt(&name, format, &bytes, rows.len(), inp);
            }
        };
        Ok(lin.with_activations(self.act))
    }

    /// The `[out, inp]` matrix `name` that is never int4 (embedding, LM head): as stored
    /// unless everything is widened to f32.
    pub fn matrix(&self, name: &str, out: usize, inp: usize) -> Result<Linear, ModelError> {
        Ok(matrix(self.store, name, out, inp, self.native)?.with_activations(self.act))
    }

    /// A mixture of experts' router `[E, d]`: as [`Loader::matrix`], but always with
    /// exact activations (int8 rows could choose other experts, and it is a small product).
    pub fn router(&self, name: &str, out: usize, inp: usize) -> Result<Linear, ModelError> {
        matrix(self.store, name, out, inp, self.native)
    }

    /// Columns `cols` of matrix `e` of the stacked `[S, A, B]` tensor `name` (stored F32,
    /// F16 or BF16, row-major), as a `[cols.len(), A]` matrix (row `r` is column
    /// `cols[r]`): a transposed, sliced copy of the stored values, kept in the stored type
    /// unless everything is widened to f32 (gpt-oss's fused `gate_up_proj` `[E, d, 2I]`
    /// with gate and up interleaved, and `down_proj` `[E, I, d]`).
    pub fn stacked_columns(
        &self,
        name: &str,
        (s, a, b): (usize, usize, usize),
        e: usize,
        cols: &[usize],
    ) -> Result<Linear, ModelError> {
        // The float types only: a block type's rows cannot be cut into columns.
        let info = self.store.info(name).filter(|i| matches!(i.dtype, DType::F32 | DType::F16 | DType::BF16));
        let Some((dtype, format)) = info.and_then(|i| native_format(&i.dtype).map(|f| (i.dtype, f))) else {
            return Err(ModelError::Weights(WeightError::Tensor {
                path: self.store.path().to_path_buf(),
                name: name.into(),
                reason: "a stacked expert tensor must be stored as F32, F16 or BF16".into(),
            }));
        };
        let size = format.row_bytes(1).unwrap_or(4); // bytes per element of a float type
        let raw = self.store.raw(name, dtype, &[s, a, b])?;
        if e >= s || cols.iter().any(|&c| c >= b) {
            return Err(ModelError::Weights(WeightError::Tensor {
                path: self.store.path().to_path_buf(),
                name: name.into(),
                reason: format!("matrix {e} of {s}, or a column past its {b}"),
            }));
        }
        let mut bytes = Vec::with_capacity(cols.len() * a * size);
        for &c in cols {
            for r in 0..a {
                let at = ((e * a + r) * b + c) * size;
                bytes.extend_from_slice(&raw[at..at + size]);
            }
        }
        self.rebuilt(name, format, &bytes, cols.len(), a)
    }

    /// A `[out, inp]` layer over bytes the loader rebuilt from tensor `name` (a slice or
    /// re-layout of its stored values), kept in `format` unless everything is widened to
    /// f32, with the engine's activation mode.
    fn rebuilt(&self, name: &str, format: Format, bytes: &[u8], out: usize, inp: usize) -> Result<Linear, ModelError> {
        let lin = if self.native {
            Linear::from_stored(format, bytes, out, inp)
        } else {
            tl_quant::dequantize(format, bytes, out, inp).and_then(|w| Linear::new_f32(w, out, inp))
        };
        lin.map(|l| l.with_activations(self.act)).map_err(|err| quant_err(self.store, name, err))
    }

    /// Rows `rows` of matrix `e` of a hub MXFP4 pair (gpt-oss's checkpoints, transformers'
    /// `Mxfp4Config` layout): `<base>_blocks` `[S, R, C/32, 16]` u8, two e2m1 codes a byte
    /// (weight `2j` in the low nibble of byte `j`, `2j + 1` in the high one), and
    /// `<base>_scales` `[S, R, C/32]` u8, an e8m0 exponent per block of 32 (`2^(e - 127)`
    /// times the e2m1 value: numbers.md's MXFP4). Rebuilt as GGUF MXFP4 blocks (the same
    /// values; ggml keeps weights `j` and `j + 16` in byte `j`), kept as such unless
    /// everything is widened to f32.
    pub fn mxfp4_rows(
        &self,
        base: &str,
        (s, r, c): (usize, usize, usize),
        e: usize,
        rows: &[usize],
    ) -> Result<Linear, ModelError> {
        let (bn, sn) = (format!("{base}_blocks"), format!("{base}_scales"));
        let bad = |name: &str, reason: String| {
            ModelError::Weights(WeightError::Tensor {
                path: self.store.path().to_path_buf(),
                name: name.into(),
                reason,
            })
        };
        if !c.is_multiple_of(32) || e >= s || rows.iter().any(|&row| row >= r) {
            return Err(bad(&bn, format!("matrix {e} of {s}, rows below {r}, {c} columns in blocks of 32")));
        }
        let nb = c / 32;
        let blocks = self.store.raw(&bn, DType::U8, &[s, r, nb, 16])?;
        let scales = self.store.raw(&sn, DType::U8, &[s, r, nb])?;
        let mut bytes = Vec::with_capacity(rows.len() * nb * 17);
        for &row in rows {
            for b in 0..nb {
                let at = (e * r + row) * nb + b;
                let src = &blocks[at * 16..(at + 1) * 16];
                let code = |i: usize| (src[i / 2] >> (4 * (i % 2))) & 15;
                bytes.push(scales[at]);
                bytes.extend((0..16).map(|j| code(j) | code(j + 16) << 4));
            }
        }
        self.rebuilt(&bn, Format::MXFP4, &bytes, rows.len(), c)
    }

    /// The `(len,)` vector `name` (a norm weight, a bias), widened to f32.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        Ok(self.store.f32(name, &[len])?)
    }
}
