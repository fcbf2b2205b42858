//! A GGUF v3 writer for tests, written from the format's definition (ggml's docs/gguf.md):
//! magic, version, tensor and metadata counts, key/values, the tensor table (dims
//! innermost first), then the data, aligned to 32 bytes.
#![allow(dead_code)]

use std::path::Path;

/// A metadata value.
pub enum Meta {
    Str(&'static str),
    String(String),
    U32(u32),
    F32(f32),
    Bool(bool),
    Strs(Vec<String>),
    I32s(Vec<i32>),
    F32s(Vec<f32>),
}

/// A tensor: GGUF name, shape outermost first (HF order), GGML type id, raw data.
#[derive(Clone)]
pub struct T {
    pub name: String,
    pub shape: Vec<usize>,
    pub ty: u32,
    pub data: Vec<u8>,
}

/// An F32 tensor.
pub fn f32_tensor(name: &str, shape: &[usize], values: &[f32]) -> T {
    assert_eq!(shape.iter().product::<usize>(), values.len());
    T { name: name.into(), shape: shape.to_vec(), ty: 0, data: values.iter().flat_map(|v| v.to_le_bytes()).collect() }
}

fn string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn value(out: &mut Vec<u8>, v: &Meta) {
    let ty = |out: &mut Vec<u8>, t: u32| out.extend(t.to_le_bytes());
    match v {
        Meta::Str(s) => {
            ty(out, 8);
            string(out, s)
        }
        Meta::String(s) => {
            ty(out, 8);
            string(out, s)
        }
        Meta::U32(x) => {
            ty(out, 4);
            out.extend(x.to_le_bytes())
        }
        Meta::F32(x) => {
            ty(out, 6);
            out.extend(x.to_le_bytes())
        }
        Meta::Bool(b) => {
            ty(out, 7);
            out.push(*b as u8)
        }
        Meta::Strs(items) => {
            ty(out, 9);
            ty(out, 8);
            out.extend((items.len() as u64).to_le_bytes());
            for s in items {
                string(out, s);
            }
        }
        Meta::I32s(items) => {
            ty(out, 9);
            ty(out, 5);
            out.extend((items.len() as u64).to_le_bytes());
            for x in items {
                out.extend(x.to_le_bytes());
            }
        }
        Meta::F32s(items) => {
            ty(out, 9);
            ty(out, 6);
            out.extend((items.len() as u64).to_le_bytes());
            for x in items {
                out.extend(x.to_le_bytes());
            }
        }
    }
}

/// The bytes of a GGUF file.
pub fn bytes(meta: &[(&str, Meta)], tensors: &[T]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend((meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        string(&mut out, k);
        value(&mut out, v);
    }
    let mut offset = 0u64;
    let mut offsets = Vec::new();
    for t in tensors {
        string(&mut out, &t.name);
        out.extend((t.shape.len() as u32).to_le_bytes());
        for &d in t.shape.iter().rev() {
            out.extend((d as u64).to_le_bytes());
        }
        out.extend(t.ty.to_le_bytes());
        out.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset += (t.data.len() as u64).div_ceil(32) * 32;
    }
    while out.len() % 32 != 0 {
        out.push(0);
    }
    let base = out.len();
    for (t, off) in tensors.iter().zip(offsets) {
        out.resize(base + off as usize, 0);
        out.extend(&t.data);
    }
    out
}

/// Write a GGUF file.
pub fn write(path: &Path, meta: &[(&str, Meta)], tensors: &[T]) {
    std::fs::write(path, bytes(meta, tensors)).unwrap();
}

/// GPT-2's byte-to-unicode table (the byte-level BPE alphabet): printable bytes stand for
/// themselves, the others for 256, 257, ... in byte order.
pub fn byte_char(b: u8) -> char {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    if printable(b as u32) {
        return char::from_u32(b as u32).unwrap();
    }
    let n = (0..b as u32).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// llama.cpp's convert_hf_to_gguf `permute`, as numpy runs it:
/// `w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols)`.
pub fn llama_cpp_permute(w: &[f32], rows: usize, cols: usize, n_head: usize) -> Vec<f32> {
    let half = rows / n_head / 2;
    let mut out = Vec::with_capacity(w.len());
    // Iterate the swapped view (n_head, half, 2, cols) in row-major order.
    for h in 0..n_head {
        for i in 0..half {
            for s in 0..2 {
                let src = (h * 2 + s) * half + i; // index in the (n_head, 2, half) view
                out.extend_from_slice(&w[src * cols..(src + 1) * cols]);
            }
        }
    }
    out
}
