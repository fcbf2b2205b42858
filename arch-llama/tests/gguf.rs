//! Llama GGUF files through core's container reader and this crate's translation: HF
//! names and shapes, Q/K rows back in HF order, config from metadata, refusals.

#[path = "../../core/tests/gguf_writer/mod.rs"]
mod gguf_writer;

use gguf_writer::{f32_tensor, llama_cpp_permute, write, Meta, T};
use tl_core::load::open_gguf;
use tl_core::{DType, WeightStore};

// Name the plugin crate so its GGUF translation ("llama") is linked.
use tl_arch_llama as _;

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
    let (g, c) = open_gguf(&path).unwrap();

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
    let (g, c) = open_gguf(&path).unwrap();
    assert_eq!(c["tie_word_embeddings"], false);
    assert_eq!(g.f32("lm_head.weight", &[V, D]).unwrap(), pattern(V, D, 0.9));
}

#[test]
fn llama_gguf_keeps_permuted_rows_out_of_raw() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    write(&path, &llama_meta(), &tiny_llama(false).0);
    let (g, _) = open_gguf(&path).unwrap();
    let q = "model.layers.0.self_attn.q_proj.weight";
    let e = g.raw(q, DType::F32, &[D, D]).unwrap_err().to_string();
    assert!(e.contains("permuted"), "{e}");
    // stored() moves whole rows: the same values f32() gives.
    let stored = g.stored(q, &[D, D]).unwrap();
    let vals: Vec<f32> = stored.bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    assert_eq!(vals, g.f32(q, &[D, D]).unwrap());
}

#[test]
fn llama_gguf_refuses_metadata_it_cannot_honour() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.gguf");
    let (tensors, _, _) = tiny_llama(false);
    let mut meta = llama_meta();
    meta.push(("llama.rope.scaling.type", Meta::Str("linear")));
    write(&path, &meta, &tensors);
    let e = open_gguf(&path).err().unwrap().to_string();
    assert!(e.contains("llama.rope.scaling.type"), "{e}");
    let mut meta = llama_meta();
    meta.retain(|(k, _)| *k != "llama.block_count");
    write(&path, &meta, &tensors);
    let e = open_gguf(&path).err().unwrap().to_string();
    assert!(e.contains("llama.block_count") && e.contains("bad.gguf"), "{e}");
    // Per-frequency RoPE divisors that are not Llama 3's (head_dim 4: two of them).
    let mut t = tensors.clone();
    t.push(f32_tensor("rope_freqs.weight", &[D / H / 2], &[1.0, 3.0]));
    write(&path, &llama_meta(), &t);
    let e = open_gguf(&path).err().unwrap().to_string();
    assert!(e.contains("rope_freqs.weight") && e.contains("llama3"), "{e}");
    // An architecture no linked crate translates: the error lists the registered ones.
    let mut meta = llama_meta();
    meta[0] = ("general.architecture", Meta::Str("gpt2"));
    write(&path, &meta, &tensors);
    let e = open_gguf(&path).err().unwrap().to_string();
    assert!(e.contains("bad.gguf") && e.contains("general.architecture") && e.contains("gpt2"), "{e}");
    assert!(e.contains("llama"), "the registered translations are not listed: {e}");
}
