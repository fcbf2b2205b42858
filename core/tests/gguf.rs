//! The GGUF weight store: HF names and shapes, Q/K rows back in HF order, block types
//! dequantized as the format defines them, config from metadata, clear refusals.

mod gguf_writer;

use gguf_writer::{f32_tensor, llama_cpp_permute, write, Meta, T};
use half::{bf16, f16};
use tl_core::{DType, Gguf, WeightStore};

const D: usize = 8; // hidden
const H: usize = 2; // heads (head_dim 4)
const HKV: usize = 1;
const FF: usize = 12;
const V: usize = 10;

fn llama_meta() -> Vec<(&'static str, Meta)> {
    vec![
        ("general.architecture", Meta::Str("llama")),
        ("llama.block_count", Meta::U32(1)),
        ("llama.context_length", Meta::U32(64)),
        ("llama.embedding_length", Meta::U32(D as u32)),
        ("llama.feed_forward_length", Meta::U32(FF as u32)),
        ("llama.attention.head_count", Meta::U32(H as u32)),
        ("llama.attention.head_count_kv", Meta::U32(HKV as u32)),
        ("llama.rope.freq_base", Meta::F32(100000.0)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
        ("llama.rope.dimension_count", Meta::U32((D / H) as u32)),
        ("tokenizer.ggml.tokens", Meta::Strs((0..V).map(|i| format!("t{i}")).collect())),
        ("tokenizer.ggml.bos_token_id", Meta::U32(1)),
        ("tokenizer.ggml.eos_token_id", Meta::U32(2)),
    ]
}

/// Distinct values: row r, column c -> r * 100 + c (+ a tag per tensor).
fn pattern(rows: usize, cols: usize, tag: f32) -> Vec<f32> {
    (0..rows * cols).map(|i| (i / cols) as f32 * 100.0 + (i % cols) as f32 + tag).collect()
}

fn tiny_llama(with_output: bool) -> (Vec<T>, Vec<f32>, Vec<f32>) {
    let q = pattern(D, D, 0.25);
    let k = pattern(D / H * HKV, D, 0.5);
    let mut t = vec![
        f32_tensor("token_embd.weight", &[V, D], &pattern(V, D, 0.0)),
        f32_tensor("blk.0.attn_norm.weight", &[D], &pattern(1, D, 0.1)),
        f32_tensor("blk.0.attn_q.weight", &[D, D], &llama_cpp_permute(&q, D, D, H)),
        f32_tensor("blk.0.attn_k.weight", &[D / H * HKV, D], &llama_cpp_permute(&k, D / H * HKV, D, HKV)),
        f32_tensor("blk.0.attn_v.weight", &[D / H * HKV, D], &pattern(D / H * HKV, D, 0.75)),
        f32_tensor("blk.0.attn_output.weight", &[D, D], &pattern(D, D, 0.125)),
        f32_tensor("blk.0.ffn_gate.weight", &[FF, D], &pattern(FF, D, 0.2)),
        f32_tensor("blk.0.ffn_up.weight", &[FF, D], &pattern(FF, D, 0.3)),
        f32_tensor("blk.0.ffn_down.weight", &[D, FF], &pattern(D, FF, 0.4)),
        f32_tensor("blk.0.ffn_norm.weight", &[D], &pattern(1, D, 0.6)),
        f32_tensor("output_norm.weight", &[D], &pattern(1, D, 0.7)),
    ];
    if with_output {
        t.push(f32_tensor("output.weight", &[V, D], &pattern(V, D, 0.9)));
    }
    (t, q, k)
}

#[test]
fn gguf_store_speaks_hugging_face() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let (tensors, q, k) = tiny_llama(false);
    write(&path, &llama_meta(), &tensors);
    let g = Gguf::open(&path).unwrap();

    let mut want: Vec<String> = [
        "model.embed_tokens.weight",
        "model.norm.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    want.sort();
    assert_eq!(g.names(), want);
    assert_eq!(g.info("model.layers.0.mlp.down_proj.weight").unwrap().shape, vec![D, FF]);
    assert_eq!(g.info("model.layers.0.self_attn.k_proj.weight").unwrap().shape, vec![4, D]);
    assert_eq!(g.f32("model.embed_tokens.weight", &[V, D]).unwrap(), pattern(V, D, 0.0));
    assert_eq!(g.f32("model.layers.0.mlp.down_proj.weight", &[D, FF]).unwrap(), pattern(D, FF, 0.4));
    // Q (over H heads) and K (over the KV heads) come back in HF row order; V never moved.
    assert_eq!(g.f32("model.layers.0.self_attn.q_proj.weight", &[D, D]).unwrap(), q);
    assert_eq!(g.f32("model.layers.0.self_attn.k_proj.weight", &[4, D]).unwrap(), k);
    assert_eq!(g.f32("model.layers.0.self_attn.v_proj.weight", &[4, D]).unwrap(), pattern(4, D, 0.75));
    // A wrong shape is refused, naming the tensor.
    let e = g.f32("model.embed_tokens.weight", &[D, V]).unwrap_err().to_string();
    assert!(e.contains("model.embed_tokens.weight") && e.contains("m.gguf"), "{e}");

    let c = g.config_json().unwrap();
    assert_eq!(c["tl_arch"], "llama");
    assert_eq!(c["tl_tokenizer"], "hf");
    assert_eq!(c["hidden_size"], D);
    assert_eq!(c["intermediate_size"], FF);
    assert_eq!(c["num_hidden_layers"], 1);
    assert_eq!(c["num_attention_heads"], H);
    assert_eq!(c["num_key_value_heads"], HKV);
    assert_eq!(c["head_dim"], D / H);
    assert_eq!(c["vocab_size"], V);
    assert_eq!(c["max_position_embeddings"], 64);
    assert_eq!(c["rms_norm_eps"].as_f64().unwrap(), 1e-5); // the decimal, not f32's 9.99999974e-6
    assert_eq!(c["rope_theta"].as_f64().unwrap(), 100000.0);
    assert_eq!(c["tie_word_embeddings"], true);
    assert_eq!(c["bos_token_id"], 1);
    assert_eq!(c["eos_token_id"], 2);
    assert_eq!(g.metadata("llama.block_count").as_deref(), Some("1"));
    assert_eq!(g.metadata("general.architecture").as_deref(), Some("llama"));
    assert_eq!(g.metadata("quant"), None);

    // With output.weight the head is its own tensor.
    let (tensors, _, _) = tiny_llama(true);
    write(&path, &llama_meta(), &tensors);
    let g = Gguf::open(&path).unwrap();
    assert_eq!(g.config_json().unwrap()["tie_word_embeddings"], false);
    assert_eq!(g.f32("lm_head.weight", &[V, D]).unwrap(), pattern(V, D, 0.9));
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
    let mut meta = llama_meta();
    meta.retain(|(k, _)| !k.starts_with("llama.attention.head_count"));
    meta.push(("llama.attention.head_count", Meta::U32(1)));
    write(&path, &meta, &tensors);
    let g = Gguf::open(&path).unwrap();
    let p = "model.layers.0.";
    assert_eq!(g.f32(&format!("{p}mlp.up_proj.weight"), &[1, 32]).unwrap(), want41);
    assert_eq!(g.f32(&format!("{p}mlp.gate_proj.weight"), &[1, 32]).unwrap(), want40);
    assert_eq!(g.f32(&format!("{p}mlp.down_proj.weight"), &[1, 32]).unwrap(), want80);
    assert_eq!(g.f32(&format!("{p}self_attn.o_proj.weight"), &[1, 32]).unwrap(), halves);
    assert_eq!(g.f32(&format!("{p}self_attn.v_proj.weight"), &[1, 32]).unwrap(), halves);
    assert_eq!(g.info(&format!("{p}mlp.up_proj.weight")).unwrap().dtype, DType::Other("Q4_1".into()));

    // raw: the stored bytes under the stored type; another type or a permuted Q is refused.
    let up = format!("{p}mlp.up_proj.weight");
    assert_eq!(g.raw(&up, DType::Other("Q4_1".into()), &[1, 32]).unwrap(), &q41[..]);
    assert!(g.raw(&up, DType::F32, &[1, 32]).unwrap_err().to_string().contains("mlp.up_proj"));
    let e = g.raw(&format!("{p}self_attn.q_proj.weight"), DType::Other("Q4_1".into()), &[2, 32]).unwrap_err();
    assert!(e.to_string().contains("permuted"), "{e}");
}

#[test]
fn gguf_refuses_what_it_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    let (tensors, _, _) = tiny_llama(false);

    // Another architecture.
    let mut meta = llama_meta();
    meta[0] = ("general.architecture", Meta::Str("gpt2"));
    write(&path, &meta, &tensors);
    let e = Gguf::open(&path).err().unwrap().to_string();
    assert!(e.contains("bad.gguf") && e.contains("general.architecture") && e.contains("gpt2"), "{e}");

    // A quantization Candle cannot read (IQ4_NL, type 20): the error names the tensor.
    let mut t2 = tiny_llama(false).0;
    t2.push(T { name: "blk.0.mystery.weight".into(), shape: vec![1, 32], ty: 20, data: vec![0; 18] });
    write(&path, &llama_meta(), &t2);
    let e = Gguf::open(&path).err().unwrap().to_string();
    assert!(e.contains("blk.0.mystery.weight") && e.contains("IQ4_NL") && e.contains("bad.gguf"), "{e}");

    // A file cut short inside the data: the tensor that runs past the end is named.
    let mut bytes = gguf_writer::bytes(&llama_meta(), &tensors);
    bytes.truncate(bytes.len() - 8);
    std::fs::write(&path, &bytes).unwrap();
    let e = Gguf::open(&path).err().unwrap().to_string();
    assert!(e.contains("output_norm.weight") && e.contains("past the end"), "{e}");

    // Not a GGUF file at all, and a missing file.
    std::fs::write(&path, b"not a gguf file at all, really").unwrap();
    assert!(Gguf::open(&path).err().unwrap().to_string().contains("bad.gguf"));
    let e = Gguf::open(&dir.path().join("none.gguf")).err().unwrap().to_string();
    assert!(e.contains("none.gguf"), "{e}");

    // Metadata the forward cannot honour is refused when the config is made.
    let mut meta = llama_meta();
    meta.push(("llama.rope.scaling.type", Meta::Str("linear")));
    write(&path, &meta, &tensors);
    let e = Gguf::open(&path).unwrap().config_json().unwrap_err().to_string();
    assert!(e.contains("llama.rope.scaling.type"), "{e}");
    let mut meta = llama_meta();
    meta.retain(|(k, _)| *k != "llama.block_count");
    write(&path, &meta, &tensors);
    let e = Gguf::open(&path).unwrap().config_json().unwrap_err().to_string();
    assert!(e.contains("llama.block_count") && e.contains("bad.gguf"), "{e}");
}
