//! One linear layer for every weight format, kept in its stored format.

use crate::error::QuantError;
use crate::format::Format;
use crate::int4::QLinear;
use crate::int8::{self, Activations};
use crate::int8_job::{quantize_rows, IntJob};
use crate::matmul::{matmul, Path};
use crate::pack::{self, Job, Kind, Line, QK};
use crate::simd::NR;

/// A linear weight `[out, inp]` (Hugging Face layout), `y = x W^T`, held in the format it
/// was built from and repacked into 16-row panels for the kernel.
///
/// Every format widens exactly to f32 and the kernel runs the same operations on the
/// widened values, so a layer built from stored F16/BF16/Q4_0/Q4_1/Q8_0/int4 data gives
/// the same bits as [`Linear::new_f32`] over [`Linear::dequantize`].
#[derive(Clone)]
pub struct Linear {
    out: usize,
    inp: usize,
    format: Format,
    kind: Kind,
    /// `ceil(out / 16)` panels of `kind.panel_bytes(inp)` bytes.
    data: Vec<Line>,
    /// How input rows are treated ([`Linear::with_activations`]).
    act: Activations,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Linear {{ out: {}, inp: {}, format: {} }}", self.out, self.inp, self.format)
    }
}

fn elems(what: &'static str, rows: usize, cols: usize) -> Result<usize, QuantError> {
    rows.checked_mul(cols).ok_or(QuantError::ShapeOverflow { what, rows, cols })
}

impl Linear {
    fn empty(format: Format, kind: Kind, out: usize, inp: usize) -> Result<Linear, QuantError> {
        let pb = kind.panel_bytes(inp);
        let bytes = elems("w", out.div_ceil(NR), pb)?;
        Ok(Linear { out, inp, format, kind, data: pack::alloc(bytes), act: Activations::Exact })
    }

    /// An f32 layer, checking that `w` holds `out * inp` values.
    pub fn new_f32(w: Vec<f32>, out: usize, inp: usize) -> Result<Linear, QuantError> {
        Linear::from_f32(&w, out, inp)
    }

    /// An f32 layer from borrowed row-major weights.
    pub fn from_f32(w: &[f32], out: usize, inp: usize) -> Result<Linear, QuantError> {
        let n = elems("w", out, inp)?;
        if w.len() != n {
            return Err(QuantError::LengthMismatch { what: "w", expected: n, got: w.len() });
        }
        let mut l = Linear::empty(Format::F32, Kind::F32, out, inp)?;
        pack::pack_f32(w, out, inp, pack::bytes_mut(&mut l.data));
        Ok(l)
    }

    /// A layer over stored bytes (`[out, inp]` row-major in `format`, little-endian),
    /// kept in that format. [`Format::Int4`] is built with [`Linear::from_int4`].
    pub fn from_stored(format: Format, bytes: &[u8], out: usize, inp: usize) -> Result<Linear, QuantError> {
        let row = format.row_bytes(inp).ok_or(QuantError::BadBlocks { format: format.to_string(), inp })?;
        let n = elems("w", out, row)?;
        if bytes.len() != n {
            return Err(QuantError::LengthMismatch { what: "w", expected: n, got: bytes.len() });
        }
        let kind = Kind::of(format).ok_or(QuantError::BadBlocks { format: format.to_string(), inp })?;
        crate::ggml::check_scales(format, bytes, inp)?;
        let mut l = Linear::empty(format, kind, out, inp)?;
        let dst = pack::bytes_mut(&mut l.data);
        match kind {
            Kind::F32 => pack::pack_elems(bytes, 4, out, inp, dst),
            Kind::F16 | Kind::BF16 => pack::pack_elems(bytes, 2, out, inp, dst),
            Kind::Q8 => pack::pack_q8_0(bytes, out, inp, dst),
            Kind::Q4 { min } => pack::pack_q4_gguf(bytes, min, out, inp, dst),
            Kind::Blk(f) => crate::blocks::pack(f, bytes, out, inp, dst),
        }
        Ok(l)
    }

    /// A layer over int4 weights, kept packed when the group is a multiple of 32 (the
    /// kernel's block); other groups are held as their exact f32 values (same results).
    pub fn from_int4(q: &QLinear) -> Result<Linear, QuantError> {
        q.validate()?;
        if !q.group.is_multiple_of(QK) {
            let mut l = Linear::from_f32(&q.dequantize(), q.out, q.inp)?;
            l.format = Format::Int4 { group: q.group };
            return Ok(l);
        }
        let mut l = Linear::empty(Format::Int4 { group: q.group }, Kind::Q4 { min: false }, q.out, q.inp)?;
        pack::pack_int4_sym(&q.qweight, &q.scales, q.group, q.out, q.inp, pack::bytes_mut(&mut l.data));
        Ok(l)
    }

    /// Stack layers with the same input width and storage into one whose output is their
    /// outputs side by side (so q/k/v or gate/up run as one product). Every part but the
    /// last must have a multiple of 16 outputs (panels are not split).
    pub fn concat(parts: &[&Linear]) -> Result<Linear, QuantError> {
        let first = parts.first().ok_or(QuantError::Concat { reason: "no layers".into() })?;
        let pb = first.kind.panel_bytes(first.inp);
        for (i, l) in parts.iter().enumerate() {
            if l.inp != first.inp || l.kind != first.kind || l.act != first.act {
                return Err(QuantError::Concat { reason: format!("layer {i} is {l:?}, layer 0 {first:?}") });
            }
            if i + 1 < parts.len() && l.out % NR != 0 {
                return Err(QuantError::Concat {
                    reason: format!("layer {i} has {} outputs, not a multiple of {NR}", l.out),
                });
            }
        }
        let out = parts.iter().map(|l| l.out).sum();
        let mut all = Linear::empty(first.format, first.kind, out, first.inp)?.with_activations(first.act);
        let mut at = 0;
        for l in parts {
            let n = l.out.div_ceil(NR) * pb;
            pack::bytes_mut(&mut all.data)[at..at + n].copy_from_slice(&pack::bytes(&l.data)[..n]);
            at += n;
        }
        Ok(all)
    }

    /// Output features.
    pub fn out(&self) -> usize {
        self.out
    }

    /// Input features.
    pub fn inp(&self) -> usize {
        self.inp
    }

    /// The stored format.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The panels' kind and bytes (the int8 kernels' tests run them directly).
    #[cfg(test)]
    pub(crate) fn panels(&self) -> (Kind, &[u8]) {
        (self.kind, pack::bytes(&self.data))
    }

    /// Bytes the packed weights occupy.
    pub fn packed_bytes(&self) -> usize {
        std::mem::size_of_val(&self.data[..])
    }

    /// Row `r` of `W`, widened to f32, into `dst` (`inp` values): an embedding lookup.
    pub fn row(&self, r: usize, dst: &mut [f32]) -> Result<(), QuantError> {
        if r >= self.out {
            return Err(QuantError::RowOutOfRange { row: r, rows: self.out });
        }
        if dst.len() != self.inp {
            return Err(QuantError::LengthMismatch { what: "row", expected: self.inp, got: dst.len() });
        }
        pack::widen_row(self.kind, pack::bytes(&self.data), self.inp, r, dst);
        Ok(())
    }

    /// The widened weights `[out, inp]`, row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut w = vec![0.0f32; self.out * self.inp];
        if self.inp > 0 {
            for (r, row) in w.chunks_exact_mut(self.inp).enumerate() {
                pack::widen_row(self.kind, pack::bytes(&self.data), self.inp, r, row);
            }
        }
        w
    }

    /// `y = x W^T` with `x` `[m, inp]` and `y` `[m, out]`, both row-major, on the fastest
    /// instruction set this CPU has.
    ///
    /// Batch-invariant bit for bit: each `y[i][n]` is one chain of fused multiply-adds
    /// over k ascending from +0.0 (`acc = fma(x[i][k], w[n][k], acc)`), computed by one
    /// thread. So row `i` of `y` has the same bits whatever `m` is, whichever other rows
    /// share the batch, however many threads run, and on every instruction set.
    pub fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), QuantError> {
        self.forward_on(Path::best(), x, m, y)
    }

    /// The layer with its input rows treated as `act` says: [`Activations::Q8`] quantizes
    /// each row to int8 in blocks of 32 and uses integer dot products where the stored
    /// format has an integer kernel (Q8_0, Q4_0, Q4_1, int4, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K;
    /// numbers.md "q8 activations"), and changes nothing for the others.
    pub fn with_activations(mut self, act: Activations) -> Linear {
        self.act = act;
        self
    }

    /// Whether [`Activations::Q8`] changes this layer (its format has an integer kernel).
    pub fn has_int8_kernel(&self) -> bool {
        int8::supported(self.kind)
    }

    /// [`Linear::forward`] on a chosen instruction set (tests and benchmarks compare them).
    pub fn forward_on(&self, path: Path, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), QuantError> {
        if !path.available() {
            return Err(QuantError::PathUnavailable { path: format!("{path:?}") });
        }
        let xn = elems("x", m, self.inp)?;
        let yn = elems("y", m, self.out)?;
        if x.len() != xn {
            return Err(QuantError::LengthMismatch { what: "x", expected: xn, got: x.len() });
        }
        if y.len() != yn {
            return Err(QuantError::LengthMismatch { what: "y", expected: yn, got: y.len() });
        }
        if self.act == Activations::Q8 && int8::supported(self.kind) {
            let rows = quantize_rows(x, m, self.inp, self.kind, path);
            let job = IntJob {
                kind: self.kind,
                inp: self.inp,
                out: self.out,
                data: pack::bytes(&self.data),
                panel_bytes: self.kind.panel_bytes(self.inp),
                rows: &rows,
            };
            int8::matmul(&job, m, y, path);
            return Ok(());
        }
        let job = Job {
            kind: self.kind,
            inp: self.inp,
            out: self.out,
            data: pack::bytes(&self.data).as_ptr(),
            panel_bytes: self.kind.panel_bytes(self.inp),
            x: x.as_ptr(),
            y: y.as_mut_ptr(),
        };
        // SAFETY: x and y were checked to hold m rows; the panels cover `out` rows; the
        // path is available.
        unsafe { matmul(job, m, path) };
        Ok(())
    }
}

impl QLinear {
    /// `y = x W_hat^T` for `x` `[m, inp]`, `y` `[m, out]`, through a [`Linear`] built for
    /// this call (a model builds its layers once with [`Linear::from_int4`]). Bit for bit
    /// equal to an f32 layer over [`QLinear::dequantize`], and batch-invariant (see
    /// [`Linear::forward`]). Here, not in int4.rs, so the int4 format does not import the
    /// layer that imports it.
    pub fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) -> Result<(), QuantError> {
        Linear::from_int4(self)?.forward(x, m, y)
    }
}
