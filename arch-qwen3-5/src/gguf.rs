//! Qwen3.5 GGUF files (`general.architecture` `qwen35`, and `qwen35moe` for the MoE), as
//! llama.cpp's converter writes them (conversion/qwen.py of the llama-cpp-python 0.3.36
//! sdist: `Qwen3_5TextModel` / `Qwen3_5MoeTextModel` over `_LinearAttentionVReorderBase`,
//! `Qwen3NextModel` and `Qwen2MoeModel`; llama.cpp reads them in src/models/qwen35.cpp and
//! qwen35moe.cpp). The converter widens every tensor to f32 before touching it (base.py,
//! `prepare_tensors`), so its transforms are f32 arithmetic:
//!
//! | GGUF | Hugging Face | converter | undone here |
//! | --- | --- | --- | --- |
//! | `attn_norm`, `post_attention_norm`, `output_norm`, `attn_q_norm`, `attn_k_norm` | `input_layernorm`, `post_attention_layernorm`, `model.norm`, `q_norm`, `k_norm` | `w + 1` (f32) | read as stored: the forward multiplies by `1 + w` computed the same way |
//! | `attn_qkv` `[C, d]` | `in_proj_qkv` | V rows grouped to tiled | row order ([`untile`]) |
//! | `attn_gate` `[Hv Dv, d]` | `in_proj_z` | tiled | row order |
//! | `ssm_beta`, `ssm_alpha` `[Hv, d]` | `in_proj_b`, `in_proj_a` | tiled | row order |
//! | `ssm_conv1d` `[C, K]` | `conv1d` `[C, 1, K]` | squeezed; V channels tiled | row order; read as `[C, K]` |
//! | `ssm_dt.bias` `[Hv]` | `dt_bias` | tiled | reordered at load |
//! | `ssm_a` `[Hv]` | `A_log` | `-exp(A_log)` (torch f32), tiled | reordered, used as the decay factor itself |
//! | `ssm_norm` `[Dv]` | `linear_attn.norm` | none (the gated norm is not zero-centred) | |
//! | `ssm_out` `[d, Hv Dv]` | `out_proj` | V columns tiled | float files: columns reordered at load; block formats: held as stored, the input values moved to the tiled columns |
//! | `attn_q` `[2 H D, d]`, `attn_k`, `attn_v`, `attn_output` | `q_proj` (query and gate rows per head), `k_proj`, `v_proj`, `o_proj` | none | |
//! | `ffn_gate_inp`, `ffn_{gate,up,down}_exps` `[E, ...]` | `mlp.gate`, `mlp.experts.E.*` | experts stacked | served per expert |
//! | `ffn_{gate,up,down}_shexp`, `ffn_gate_inp_shexp` `[1, d]` | `mlp.shared_expert.*`, `mlp.shared_expert_gate` | none | |
//!
//! "Tiled": with `Hk < Hv` key heads the converter reorders every per-value-head axis from
//! transformers' grouped order (value head `k r + i` reads key head `k`, `r = Hv / Hk`) to
//! `i Hk + k` (llama.cpp broadcasts key heads by repeating them); `Hk = Hv` is left alone.
//! The metadata: `qwen35.ssm.{conv_kernel, state_size (Dk), group_count (Hk),
//! time_step_rank (Hv), inner_size (Hv Dv)}`, `attention.recurrent_layers` (or
//! `full_attention_interval`), `rope.dimension_count` (the rotated part of a head;
//! `rope.dimension_sections` is interleaved MRoPE's split, the same rotation for text
//! positions, so not read), `nextn_predict_layers` (MTP blocks counted in `block_count`,
//! not run).
//!
//! Every transform but one is undone exactly, so an f32 GGUF gives the safetensors
//! checkpoint's logits bit for bit. The one: `ssm_a` is torch's float32 `exp`, which is
//! not correctly rounded and depends on the converting CPU's vector unit, while the
//! safetensors path computes `-exp(A_log)` with the decoder's own portable `exp`; the two
//! can differ in the last bits, and the file does not keep `A_log` to recompute it. The
//! GGUF's value is used as llama.cpp uses it (tests/gguf.rs measures the difference).

use serde_json::{json, Map, Value};
use tl_core::{
    BuildCtx, DType, Gguf, GgufArch, GgufRegistration, ModelError, TensorInfo, TensorMap, WeightError, Weights,
};
use tl_decoder::gguf::{expert_counts, shared_fields, MoeGguf};
use tl_decoder::{DeltaNet, DeltaShape, Loader, Proj, MLP_NAMES};
use tl_quant::{Linear, QLinear};

/// The config key the translation sets: the tensors are laid out as llama.cpp's
/// converter writes them ([`crate::Qwen35Config::llama_cpp`]).
pub const LAYOUT_KEY: &str = "tl_llama_cpp_layout";

const EXPERTS: MoeGguf = MoeGguf { module: "mlp", names: MLP_NAMES };

/// The order that undoes the converter's tiling of value heads along an axis of
/// `k_heads * per_k` heads of `dim` entries each: entry `i` as read (grouped order,
/// head `k per_k + j`) is stored entry `order[i]` (head `j k_heads + k`).
pub fn untile(k_heads: usize, per_k: usize, dim: usize) -> Vec<u32> {
    let mut order = Vec::with_capacity(k_heads * per_k * dim);
    for k in 0..k_heads {
        for j in 0..per_k {
            order.extend((0..dim).map(|e| ((j * k_heads + k) * dim + e) as u32));
        }
    }
    order
}

/// `prefix` of a dense (`qwen35`) or MoE (`qwen35moe`) file.
fn prefix(moe: bool) -> &'static str {
    if moe {
        "qwen35moe"
    } else {
        "qwen35"
    }
}

/// The DeltaNet's shape from `<prefix>.ssm.*`, each error naming its key.
fn delta_shape(file: &Gguf, p: &str) -> Result<DeltaShape, WeightError> {
    let key = |k: &str| format!("{p}.ssm.{k}");
    let v_heads = file.required(&key("time_step_rank"))? as usize;
    let inner = file.required(&key("inner_size"))? as usize;
    if v_heads == 0 || !inner.is_multiple_of(v_heads) {
        return Err(file.meta_err(&key("inner_size"), &format!("{inner} is not a multiple of {v_heads} value heads")));
    }
    let shape = DeltaShape {
        k_heads: file.required(&key("group_count"))? as usize,
        v_heads,
        k_dim: file.required(&key("state_size"))? as usize,
        v_dim: inner / v_heads,
        kernel: file.required(&key("conv_kernel"))? as usize,
    };
    // The check's reason says which of the sizes fails.
    let keys = format!("{p}.ssm.{{group_count, time_step_rank, state_size, inner_size, conv_kernel}}");
    shape.check().map_err(|e| file.meta_err(&keys, &e))?;
    Ok(shape)
}

/// Each of the first `n` layers' kind, as llama.cpp reads them: `recurrent_layers` (one
/// boolean per block, MTP blocks included) or else every `full_attention_interval`-th
/// (default 4) layer full attention.
fn layer_types(file: &Gguf, p: &str, n: usize) -> Result<Vec<&'static str>, WeightError> {
    let kind = |recurrent: bool| if recurrent { "linear_attention" } else { "full_attention" };
    let key = format!("{p}.attention.recurrent_layers");
    if let Some(v) = file.value(&key) {
        let items = match v {
            candle_core::quantized::gguf_file::Value::Array(items) => items,
            _ => return Err(file.meta_err(&key, "expected an array of booleans")),
        };
        let flags: Vec<bool> = items.iter().filter_map(|v| v.to_bool().ok()).collect();
        if flags.len() != items.len() || flags.len() < n {
            return Err(file.meta_err(&key, &format!("expected a boolean for each of {n} layers")));
        }
        return Ok(flags[..n].iter().map(|&r| kind(r)).collect());
    }
    let key = format!("{p}.full_attention_interval");
    let every = file.uint(&key)?.unwrap_or(4);
    if every == 0 {
        return Err(file.meta_err(&key, "0"));
    }
    Ok((0..n as u64).map(|i| kind((i + 1) % every != 0)).collect())
}

/// The config.json a `qwen35` / `qwen35moe` file's metadata describes: transformers'
/// `Qwen3_5TextConfig` (or the MoE's) fields, `tl_arch`, `tl_tokenizer` and [`LAYOUT_KEY`].
/// What the forward cannot honour (scaled RoPE, scaled expert weights) is refused, naming
/// the key.
pub fn config_json(file: &Gguf, moe: bool) -> Result<Value, WeightError> {
    let p = prefix(moe);
    let key = |k: &str| format!("{p}.{k}");
    let hidden = file.required(&key("embedding_length"))?;
    let heads = file.required(&key("attention.head_count"))?;
    if heads == 0 {
        return Err(file.meta_err(&key("attention.head_count"), "0"));
    }
    let kv_heads = file.uint(&key("attention.head_count_kv"))?.unwrap_or(heads);
    let head_dim = file.uint(&key("attention.key_length"))?.unwrap_or(hidden / heads);
    if file.uint(&key("attention.value_length"))?.is_some_and(|v| v != head_dim) {
        return Err(file.meta_err(&key("attention.value_length"), "differs from the key length"));
    }
    // The rotated part of each head, as transformers' `partial_rotary_factor`: a factor
    // that `int(head_dim * factor)` maps back to the same count.
    let rot = file.uint(&key("rope.dimension_count"))?.unwrap_or(head_dim);
    let factor = rot as f64 / head_dim.max(1) as f64;
    if rot == 0 || rot > head_dim || (head_dim as f64 * factor) as u64 != rot {
        return Err(file.meta_err(&key("rope.dimension_count"), &format!("{rot} of a head of {head_dim}")));
    }
    if let Some(t) = file.string(&key("rope.scaling.type"))?.filter(|t| *t != "none") {
        return Err(file.meta_err(&key("rope.scaling.type"), &format!("{t:?}: scaled RoPE is not supported")));
    }
    if file.has_gguf_tensor("rope_freqs.weight") {
        return Err(file.meta_err("rope_freqs.weight", "per-frequency RoPE factors are not supported"));
    }
    let blocks = file.required(&key("block_count"))?;
    let mtp = file.uint(&key("nextn_predict_layers"))?.unwrap_or(0);
    if mtp >= blocks {
        return Err(file.meta_err(&key("nextn_predict_layers"), &format!("{mtp} of {blocks} blocks")));
    }
    let layers = (blocks - mtp) as usize;
    let sh = delta_shape(file, p)?;
    let tokens = file.strings("tokenizer.ggml.tokens")?;
    let vocab = match &tokens {
        Some(t) => t.len() as u64,
        None => file.required(&key("vocab_size"))?,
    };
    let (class, model_type, tl_arch) = if moe {
        ("Qwen3_5MoeForCausalLM", "qwen3_5_moe_text", "qwen3_5_moe")
    } else {
        ("Qwen3_5ForCausalLM", "qwen3_5_text", "qwen3_5")
    };
    let mut cfg = Map::new();
    cfg.insert("architectures".into(), json!([class]));
    cfg.insert("model_type".into(), json!(model_type));
    cfg.insert("tl_arch".into(), json!(tl_arch));
    // Without a vocabulary in the file, token ids can only be bytes.
    cfg.insert("tl_tokenizer".into(), json!(if tokens.is_some() { "hf" } else { "byte" }));
    cfg.insert(LAYOUT_KEY.into(), json!(true));
    cfg.insert("vocab_size".into(), json!(vocab));
    cfg.insert("hidden_size".into(), json!(hidden));
    cfg.insert("num_hidden_layers".into(), json!(layers));
    cfg.insert("layer_types".into(), json!(layer_types(file, p, layers)?));
    cfg.insert("num_attention_heads".into(), json!(heads));
    cfg.insert("num_key_value_heads".into(), json!(kv_heads));
    cfg.insert("head_dim".into(), json!(head_dim));
    cfg.insert("hidden_act".into(), json!("silu"));
    let eps = file.float(&key("attention.layer_norm_rms_epsilon"))?;
    cfg.insert(
        "rms_norm_eps".into(),
        json!(eps.ok_or_else(|| file.meta_err(&key("attention.layer_norm_rms_epsilon"), "missing"))?),
    );
    let theta = file.float(&key("rope.freq_base"))?.unwrap_or(10000.0);
    cfg.insert(
        "rope_parameters".into(),
        json!({"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": factor}),
    );
    cfg.insert("linear_num_key_heads".into(), json!(sh.k_heads));
    cfg.insert("linear_num_value_heads".into(), json!(sh.v_heads));
    cfg.insert("linear_key_head_dim".into(), json!(sh.k_dim));
    cfg.insert("linear_value_head_dim".into(), json!(sh.v_dim));
    cfg.insert("linear_conv_kernel_dim".into(), json!(sh.kernel));
    if moe {
        let (count, used) = expert_counts(file, p)?;
        cfg.insert("num_experts".into(), json!(count));
        cfg.insert("num_experts_per_tok".into(), json!(used));
        cfg.insert("moe_intermediate_size".into(), json!(file.required(&key("expert_feed_forward_length"))?));
        let shared = file.required(&key("expert_shared_feed_forward_length"))?;
        cfg.insert("shared_expert_intermediate_size".into(), json!(shared));
        // llama.cpp scales the routed weights by this when set; transformers never does.
        let scale_key = key("expert_weights_scale");
        if file.float(&scale_key)?.is_some_and(|s| s != 0.0 && s != 1.0) {
            return Err(file.meta_err(&scale_key, "scaled expert weights are not supported"));
        }
    } else {
        cfg.insert("intermediate_size".into(), json!(file.required(&key("feed_forward_length"))?));
    }
    shared_fields(file, &key("context_length"), &mut cfg)?;
    Ok(Value::Object(cfg))
}

/// The name tl reads a GGUF tensor by (transformers' where the meaning is the same;
/// `linear_attn.A` for `ssm_a`, Mamba's name for `-exp(A_log)`), or `None`.
pub fn hf_name(gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let (layer, part) = gguf.strip_prefix("blk.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let hf = match part {
        "attn_norm.weight" => "input_layernorm.weight",
        "post_attention_norm.weight" => "post_attention_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "attn_qkv.weight" => "linear_attn.in_proj_qkv.weight",
        "attn_gate.weight" => "linear_attn.in_proj_z.weight",
        "ssm_beta.weight" => "linear_attn.in_proj_b.weight",
        "ssm_alpha.weight" => "linear_attn.in_proj_a.weight",
        "ssm_conv1d.weight" => "linear_attn.conv1d.weight",
        "ssm_dt.bias" => "linear_attn.dt_bias",
        "ssm_a" => "linear_attn.A",
        "ssm_norm.weight" => "linear_attn.norm.weight",
        "ssm_out.weight" => "linear_attn.out_proj.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        "ffn_gate_inp.weight" => "mlp.gate.weight",
        "ffn_gate_shexp.weight" => "mlp.shared_expert.gate_proj.weight",
        "ffn_up_shexp.weight" => "mlp.shared_expert.up_proj.weight",
        "ffn_down_shexp.weight" => "mlp.shared_expert.down_proj.weight",
        "ffn_gate_inp_shexp.weight" => "mlp.shared_expert_gate.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}"))
}

/// The name of block `mtp_block`'s tensor `gguf` (llama.cpp's converter writes the MTP head
/// as the block after the trunk's, `blk.L.nextn.*` beside the block's usual names:
/// conversion/qwen.py `_QwenMtpMixin`) as the safetensors checkpoint names it (`mtp.*`,
/// crate::mtp), or `None` for a tensor of another block.
pub fn mtp_name(gguf: &str, mtp_block: usize) -> Option<String> {
    let part = gguf.strip_prefix(&format!("blk.{mtp_block}."))?;
    let head = match part {
        "nextn.eh_proj.weight" => "mtp.fc.weight",
        "nextn.enorm.weight" => "mtp.pre_fc_norm_embedding.weight",
        "nextn.hnorm.weight" => "mtp.pre_fc_norm_hidden.weight",
        "nextn.shared_head_norm.weight" => "mtp.norm.weight",
        _ => {
            let hf = hf_name(gguf)?;
            return Some(hf.replacen(&format!("model.layers.{mtp_block}."), "mtp.layers.0.", 1));
        }
    };
    Some(head.into())
}

/// The shape a DeltaNet tensor must have (HF order) and the row order that undoes the
/// converter's tiling (`None`: as stored), or `None` for any other tensor.
fn delta_tensor(part: &str, sh: &DeltaShape, d: usize) -> Option<(Vec<usize>, Option<Vec<u32>>)> {
    let (hk, r, c) = (sh.k_heads, sh.v_heads / sh.k_heads, sh.conv_dim());
    let tiled = r > 1;
    // q and k channels stay; the value channels follow.
    let qkv = || {
        let qk = 2 * hk * sh.k_dim;
        (0..qk as u32).chain(untile(hk, r, sh.v_dim).into_iter().map(|i| i + qk as u32)).collect()
    };
    let (shape, rows) = match part {
        "attn_qkv.weight" => (vec![c, d], tiled.then(qkv)),
        "ssm_conv1d.weight" => (vec![c, sh.kernel], tiled.then(qkv)),
        "attn_gate.weight" => (vec![sh.v_heads * sh.v_dim, d], tiled.then(|| untile(hk, r, sh.v_dim))),
        "ssm_beta.weight" | "ssm_alpha.weight" => (vec![sh.v_heads, d], tiled.then(|| untile(hk, r, 1))),
        "ssm_dt.bias" | "ssm_a" => (vec![sh.v_heads], None),
        "ssm_norm.weight" => (vec![sh.v_dim], None),
        "ssm_out.weight" => (vec![d, sh.v_heads * sh.v_dim], None),
        _ => return None,
    };
    Some((shape, rows))
}

/// Qwen3.5 GGUF files: `Qwen35Gguf(false)` reads `qwen35`, `Qwen35Gguf(true)` `qwen35moe`.
struct Qwen35Gguf(bool);

impl GgufArch for Qwen35Gguf {
    fn config_json(&self, file: &Gguf) -> Result<Value, WeightError> {
        config_json(file, self.0)
    }

    /// Names as [`hf_name`]; a DeltaNet tensor's shape is checked against the `ssm.*`
    /// metadata here (its row order depends on it), the error naming the GGUF tensor.
    fn tensor(&self, file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<TensorMap, WeightError> {
        let p = prefix(self.0);
        let blocks = file.required(&format!("{p}.block_count"))?;
        let trunk = blocks.saturating_sub(file.uint(&format!("{p}.nextn_predict_layers"))?.unwrap_or(0)) as usize;
        let name = mtp_name(gguf_name, trunk).or_else(|| EXPERTS.router(gguf_name)).or_else(|| hf_name(gguf_name));
        let mut rows = None;
        if let Some(part) = gguf_name.strip_prefix("blk.").and_then(|r| r.split_once('.')).map(|(_, p)| p) {
            let p = prefix(self.0);
            let d = file.required(&format!("{p}.embedding_length"))? as usize;
            if let Some((shape, order)) = delta_tensor(part, &delta_shape(file, p)?, d) {
                if info.shape != shape {
                    return Err(WeightError::Shape {
                        path: file.path_buf(),
                        name: gguf_name.into(),
                        expected: shape,
                        actual: info.shape.clone(),
                    });
                }
                rows = order;
            }
        }
        Ok(TensorMap { name: name.unwrap_or_else(|| gguf_name.to_string()), rows })
    }

    fn stacked(&self, _file: &Gguf, gguf_name: &str, info: &TensorInfo) -> Result<Option<Vec<String>>, WeightError> {
        Ok(EXPERTS.stacked(gguf_name, info))
    }
}

inventory::submit!(GgufRegistration { architecture: "qwen35", make: || Box::new(Qwen35Gguf(false)) });
inventory::submit!(GgufRegistration { architecture: "qwen35moe", make: || Box::new(Qwen35Gguf(true)) });

fn tensor_err(w: &Loader<'_>, name: &str, reason: String) -> ModelError {
    ModelError::Weights(WeightError::Tensor { path: w.store().path().to_path_buf(), name: name.into(), reason })
}

/// A DeltaNet below `p` (`model.layers.N.linear_attn`) from the converter's layout, as
/// [`hf_name`] names it and [`GgufArch::tensor`] has put the rows back: the projections
/// and `conv1d` (`[C, K]`) are already in transformers' order; `A` (`-exp(A_log)`, used
/// as it is) and `dt_bias` are reordered here. `out_proj`'s columns are tiled when there
/// are fewer key than value heads: a float file's are put back (widened to f32), a block
/// format's stay as stored and the forward moves its input values to them instead
/// ([`DeltaNet::out_cols`]: its sums then run in the file's column order).
pub fn delta(w: &Loader<'_>, ctx: &BuildCtx<'_>, p: &str, d: usize, sh: DeltaShape) -> Result<DeltaNet, ModelError> {
    sh.check().map_err(|e| ModelError::Other(format!("{p}: {e}")))?;
    let (c, hv, vd, k) = (sh.conv_dim(), sh.v_heads, sh.v_heads * sh.v_dim, sh.kernel);
    let proj = |name: &str, out| w.proj(&format!("{p}.{name}"), out, d);
    let proj = Proj::new(vec![
        proj("in_proj_qkv", c)?,
        proj("in_proj_z", vd)?,
        proj("in_proj_b", hv)?,
        proj("in_proj_a", hv)?,
    ]);
    let raw = w.store().f32(&format!("{p}.conv1d.weight"), &[c, k])?;
    let conv = (0..k).flat_map(|t| (0..c).map(move |ch| (t, ch))).map(|(t, ch)| raw[ch * k + t]).collect();
    let (hk, r) = (sh.k_heads, hv / sh.k_heads);
    let heads = untile(hk, r, 1);
    let per_head = |name: &str| -> Result<Vec<f32>, ModelError> {
        let v = w.vector(&format!("{p}.{name}"), hv)?;
        Ok(heads.iter().map(|&i| v[i as usize]).collect())
    };
    let out_name = format!("{p}.out_proj.weight");
    let cols = untile(hk, r, sh.v_dim);
    let float = matches!(w.store().info(&out_name).map(|i| i.dtype), Some(DType::F32 | DType::F16 | DType::BF16));
    // With one value head per key head the converter left the columns alone. Otherwise a
    // float file's are moved back exactly (an f32 GGUF gives the checkpoint's bits); a block
    // format cannot move columns, so it is held as stored and the values move instead.
    let (out, out_cols) = if r > 1 && float {
        (reordered_out(w, ctx, &out_name, (d, vd), &cols)?, None)
    } else {
        (w.proj(&format!("{p}.out_proj"), d, vd)?, (r > 1).then_some(cols))
    };
    Ok(DeltaNet {
        proj,
        conv,
        neg_a: per_head("A")?,
        dt_bias: per_head("dt_bias")?,
        norm: w.vector(&format!("{p}.norm.weight"), sh.v_dim)?,
        out,
        out_cols,
        shape: sh,
    })
}

/// `out_proj` of a float file with its columns put back in transformers' order `cols`
/// (widened to f32, or quantized to int4 like every projection under `--weights int4`).
fn reordered_out(
    w: &Loader<'_>,
    ctx: &BuildCtx<'_>,
    name: &str,
    (d, vd): (usize, usize),
    cols: &[u32],
) -> Result<Linear, ModelError> {
    let stored = w.store().f32(name, &[d, vd])?;
    let mut ow = Vec::with_capacity(d * vd);
    for row in stored.chunks_exact(vd) {
        ow.extend(cols.iter().map(|&j| row[j as usize]));
    }
    w.store().done_with(name);
    match ctx.engine.weights {
        Weights::Int4 { group } => QLinear::quantize(&ow, d, vd, group).and_then(|q| Linear::from_int4(&q)),
        Weights::F32 | Weights::Native => Linear::new_f32(ow, d, vd),
    }
    .map_err(|e| tensor_err(w, name, e.to_string()))
    .map(|l| l.with_activations(ctx.engine.activations))
}
