//! The GGUF container: block types dequantized as the format defines them, tensors
//! served under GGUF names until an architecture's translation remaps them (names and a
//! row order), clear refusals. The Llama translation is tested in tl-arch-llama.

mod gguf_writer;

use gguf_writer::{f32_tensor, write, Meta, T};
use half::{bf16, f16};
use tl_core::{DType, Gguf, TensorMap, WeightStore};

fn meta() -> Vec<(&'static str, Meta)> {
    vec![("general.architecture", Meta::Str("toy")), ("toy.block_count", Meta::U32(1))]
}

/// Distinct values: row r, column c -> r * 100 + c (+ a tag per tensor).
fn pattern(rows: usize, cols: usize, tag: f32) -> Vec<f32> {
    (0..rows * cols).map(|i| (i / cols) as f32 * 100.0 + (i % cols) as f32 + tag).collect()
}

#[test]
fn gguf_serves_remapped_names_and_row_orders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let tensors =
        vec![f32_tensor("a.weight", &[4, 3], &pattern(4, 3, 0.5)), f32_tensor("b.weight", &[3], &pattern(1, 3, 0.0))];
    write(&path, &meta(), &tensors);
    let mut g = Gguf::open(&path).unwrap();
    assert_eq!(g.architecture().unwrap(), "toy");
    assert_eq!(g.names(), vec!["a.weight".to_string(), "b.weight".to_string()]);
    assert_eq!(g.metadata("toy.block_count").as_deref(), Some("1"));
    let order = vec![2u32, 0, 3, 1];
    let map = vec![
        ("a.weight".to_string(), TensorMap { name: "x.weight".into(), rows: Some(order.clone()) }),
        ("b.weight".to_string(), TensorMap { name: "b.weight".into(), rows: None }),
    ];
    g.remap(map).unwrap();
    assert_eq!(g.names(), vec!["b.weight".to_string(), "x.weight".to_string()]);
    assert_eq!(g.gguf_name("x.weight"), Some("a.weight"));
    let want: Vec<f32> =
        order.iter().flat_map(|&r| pattern(4, 3, 0.5)[r as usize * 3..r as usize * 3 + 3].to_vec()).collect();
    assert_eq!(g.f32("x.weight", &[4, 3]).unwrap(), want);
    let e = g.raw("x.weight", DType::F32, &[4, 3]).unwrap_err().to_string();
    assert!(e.contains("permuted"), "{e}");
    assert_eq!(g.f32("b.weight", &[3]).unwrap(), pattern(1, 3, 0.0));
    // A row order that is not a permutation, and a tensor left unmapped, are refused.
    let mut g = Gguf::open(&path).unwrap();
    let bad = vec![
        ("a.weight".to_string(), TensorMap { name: "x".into(), rows: Some(vec![0, 0, 1, 2]) }),
        ("b.weight".to_string(), TensorMap { name: "b".into(), rows: None }),
    ];
    assert!(g.remap(bad).unwrap_err().to_string().contains("a.weight"));
    let mut g = Gguf::open(&path).unwrap();
    let partial = vec![("a.weight".to_string(), TensorMap { name: "x".into(), rows: None })];
    assert!(g.remap(partial).unwrap_err().to_string().contains("b.weight"));
}

fn f16_bytes(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_bits().to_le_bytes()
}

#[test]
fn gguf_dequantizes_block_types_as_defined() {
    // Q4_1 (ggml type 3), one block of 32: f16 d, f16 m, 16 bytes; element j < 16 is the
    // low nibble of byte j, element j + 16 its high nibble; value = q * d + m.
    let nib: Vec<u8> = (0..32).map(|j| ((j * 7 + 3) % 16) as u8).collect();
    let mut q41 = Vec::new();
    q41.extend(f16_bytes(0.5));
    q41.extend(f16_bytes(-1.25));
    q41.extend((0..16).map(|j| nib[j] | (nib[j + 16] << 4)));
    let want41: Vec<f32> = nib.iter().map(|&q| q as f32 * 0.5 - 1.25).collect();
    // Q4_0 (type 2): f16 d, 16 bytes, value = (q - 8) * d.
    let mut q40 = Vec::new();
    q40.extend(f16_bytes(0.25));
    q40.extend((0..16).map(|j| nib[j] | (nib[j + 16] << 4)));
    let want40: Vec<f32> = nib.iter().map(|&q| (q as f32 - 8.0) * 0.25).collect();
    // Q8_0 (type 8): f16 d, 32 i8, value = q * d.
    let q8: Vec<i8> = (0..32).map(|j| (j as i8 - 16) * 7).collect();
    let mut q80 = Vec::new();
    q80.extend(f16_bytes(0.125));
    q80.extend(q8.iter().map(|&x| x as u8));
    let want80: Vec<f32> = q8.iter().map(|&x| x as f32 * 0.125).collect();
    // F16 (type 1) and BF16 (type 30), widened exactly.
    let halves: Vec<f32> = (0..32).map(|j| j as f32 * 0.375 - 5.0).collect();
    let f16d: Vec<u8> = halves.iter().flat_map(|&x| f16_bytes(x)).collect();
    let bf16d: Vec<u8> = halves.iter().flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes()).collect();

    let t = |name: &str, ty: u32, data: Vec<u8>| T { name: name.into(), shape: vec![1, 32], ty, data };
    let tensors = vec![
        t("blk.0.ffn_up.weight", 3, q41.clone()),
        t("blk.0.ffn_gate.weight", 2, q40),
        t("blk.0.ffn_down.weight", 8, q80),
        t("blk.0.attn_output.weight", 1, f16d),
        t("blk.0.attn_v.weight", 30, bf16d),
        T { name: "blk.0.attn_q.weight".into(), shape: vec![2, 32], ty: 3, data: [q41.clone(), q41.clone()].concat() },
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.gguf");
    write(&path, &meta(), &tensors);
    let g = Gguf::open(&path).unwrap();
    let p = "blk.0.";
    assert_eq!(g.f32(&format!("{p}ffn_up.weight"), &[1, 32]).unwrap(), want41);
    assert_eq!(g.f32(&format!("{p}ffn_gate.weight"), &[1, 32]).unwrap(), want40);
    assert_eq!(g.f32(&format!("{p}ffn_down.weight"), &[1, 32]).unwrap(), want80);
    assert_eq!(g.f32(&format!("{p}attn_output.weight"), &[1, 32]).unwrap(), halves);
    assert_eq!(g.f32(&format!("{p}attn_v.weight"), &[1, 32]).unwrap(), halves);
    assert_eq!(g.info(&format!("{p}ffn_up.weight")).unwrap().dtype, DType::Other("Q4_1".into()));

    // raw: the stored bytes under the stored type; another type is refused.
    let up = format!("{p}ffn_up.weight");
    assert_eq!(g.raw(&up, DType::Other("Q4_1".into()), &[1, 32]).unwrap(), &q41[..]);
    assert!(g.raw(&up, DType::F32, &[1, 32]).unwrap_err().to_string().contains("ffn_up"));
}

#[test]
fn gguf_refuses_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    let tensors = vec![
        f32_tensor("a.weight", &[2, 3], &pattern(2, 3, 0.0)),
        f32_tensor("output_norm.weight", &[3], &pattern(1, 3, 0.0)),
    ];

    // An architecture no linked crate translates: the error names the file and the key
    // (the registered ones are listed; tl-arch-llama's test checks the list).
    write(&path, &meta(), &tensors);
    let e = tl_core::load::open_gguf(&path).err().unwrap().to_string();
    assert!(e.contains("bad.gguf") && e.contains("general.architecture") && e.contains("toy"), "{e}");

    // A quantization tl does not read (IQ4_XS, type 23): the error names the tensor.
    let mut t2 = tensors.clone();
    t2.push(T { name: "blk.0.iq4nl.weight".into(), shape: vec![1, 32], ty: 20, data: vec![0; 18] });
    t2.push(T { name: "blk.0.mystery.weight".into(), shape: vec![1, 256], ty: 23, data: vec![0; 136] });
    write(&path, &meta(), &t2);
    let e = Gguf::open(&path).err().unwrap().to_string();
    assert!(e.contains("blk.0.mystery.weight") && e.contains("IQ4_XS") && e.contains("bad.gguf"), "{e}");

    // A block whose scale is not finite: an error naming the tensor, row and block.
    let mut t3 = tensors.clone();
    let mut nan = vec![0u8; 36];
    nan[18..20].copy_from_slice(&0x7E00u16.to_le_bytes());
    t3.push(T { name: "blk.0.nan.weight".into(), shape: vec![1, 64], ty: 2, data: nan });
    write(&path, &meta(), &t3);
    let g = Gguf::open(&path).unwrap();
    let e = g.f32("blk.0.nan.weight", &[1, 64]).unwrap_err().to_string();
    assert!(e.contains("blk.0.nan.weight") && e.contains("row 0 block 1") && e.contains("NaN"), "{e}");

    // A file cut short inside the data: the tensor that runs past the end is named.
    let mut bytes = gguf_writer::bytes(&meta(), &tensors);
    bytes.truncate(bytes.len() - 8);
    std::fs::write(&path, &bytes).unwrap();
    let e = Gguf::open(&path).err().unwrap().to_string();
    assert!(e.contains("output_norm.weight") && e.contains("past the end"), "{e}");

    // Not a GGUF file at all, and a missing file.
    std::fs::write(&path, b"not a gguf file at all, really").unwrap();
    assert!(Gguf::open(&path).err().unwrap().to_string().contains("bad.gguf"));
    let e = Gguf::open(&dir.path().join("none.gguf")).err().unwrap().to_string();
    assert!(e.contains("none.gguf"), "{e}");
}

#[test]
fn gguf_reads_iq4_nl_and_k_blocks_through_tl_quant() {
    // IQ4_NL (type 20, absent from Candle's list) opens, and every block type widens to
    // tl_quant::dequantize's values (the ones the kernels compute with).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks.gguf");
    let mut iq4 = f16_bytes(0.5).to_vec();
    iq4.extend((0..16u8).map(|j| j | (15 - j) << 4));
    let mut q4k = vec![0u8; 144];
    q4k[..2].copy_from_slice(&f16_bytes(0.25));
    q4k[2..4].copy_from_slice(&f16_bytes(0.125));
    for (i, b) in q4k[4..].iter_mut().enumerate() {
        *b = (i * 29 % 256) as u8;
    }
    let tensors = vec![
        f32_tensor("a.weight", &[2, 3], &pattern(2, 3, 0.0)),
        T { name: "iq4.weight".into(), shape: vec![1, 32], ty: 20, data: iq4.clone() },
        T { name: "q4k.weight".into(), shape: vec![1, 256], ty: 12, data: q4k.clone() },
    ];
    write(&path, &meta(), &tensors);
    let g = Gguf::open(&path).unwrap();
    assert_eq!(g.info("iq4.weight").unwrap().dtype, DType::Other("IQ4_NL".into()));
    // IQ4_NL: d * T[q], byte j = weights j (low nibble) and j + 16 (high nibble).
    const T4: [f32; 16] = [-127., -104., -83., -65., -49., -35., -22., -10., 1., 13., 25., 38., 53., 69., 89., 113.];
    let want: Vec<f32> = (0..32).map(|k| 0.5 * T4[if k < 16 { k } else { 15 - (k - 16) }]).collect();
    assert_eq!(g.f32("iq4.weight", &[1, 32]).unwrap(), want);
    assert_eq!(g.stored("iq4.weight", &[1, 32]).unwrap().bytes.as_ref(), &iq4[..]);
    let q = tl_quant::dequantize(tl_quant::Format::Q4_K, &q4k, 1, 256).unwrap();
    assert_eq!(g.f32("q4k.weight", &[1, 256]).unwrap(), q);
}
