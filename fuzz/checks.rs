//! Each fuzz target's property, written once: the targets in fuzz_targets/ call these on
//! the fuzzer's input, and serve/tests/fuzz_regressions.rs calls them on the stable
//! toolchain over the seeds and every input a fuzzer ever crashed on (both include this
//! file by `#[path]`). Errors are fine; a panic, a hang, an allocation the input does not
//! justify, or a failed assertion here is a finding.
#![allow(dead_code)] // each target uses one function

use std::path::Path;

use tl_core::{ChatTemplate, Gguf, Message, SafeTensors, WeightStore};
use tl_core::{KvBackend, StateGeometry, NO_BLOCK};
use tl_kv::{fnv1a64, HybridPool, KvGeometry, KvPool, TRAILER_BYTES};
use tl_quant::{Format, Linear};
use tl_serve::api::{content_text, Body};

/// The safetensors reader: open, then every listed tensor at its own shape (widened to
/// f32, as stored bytes, raw) and at a wrong one.
pub fn safetensors(path: &Path) {
    let Ok(st) = SafeTensors::open(path) else { return };
    for name in st.names() {
        let Some(info) = st.info(&name) else { continue };
        let _ = st.f32(&name, &info.shape);
        let _ = st.stored(&name, &info.shape);
        let _ = st.raw(&name, info.dtype.clone(), &info.shape);
        let _ = st.f32(&name, &[1, 2, 3]);
    }
    let _ = st.metadata("format");
}

/// config.json parsing with its refusals (core fields, then the registered
/// architecture's own typed config).
pub fn config(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tl_core::ModelConfig::from_json(text);
    }
}

/// The GGUF reader and store: the container plus the registered architecture's
/// translation (names, config), the tokenizer and chat template from the metadata, and
/// every tensor's block data.
pub fn gguf(path: &Path) {
    let _ = tl_core::load::open_gguf(path);
    let Ok(g) = Gguf::open(path) else { return };
    let _ = tl_core::tokenizer::gguf_tokenizer_json(&g);
    let _ = ChatTemplate::from_gguf(&g);
    for name in g.names() {
        let Some(info) = g.info(&name) else { continue };
        let widened = g.f32(&name, &info.shape);
        let stored = g.stored(&name, &info.shape);
        // The native path: the blocks kept as stored widen to the f32 path's values, bit
        // for bit, and run through the kernel.
        let (Ok(stored), &[rows, cols]) = (stored, &info.shape[..]) else { continue };
        let ty = match &info.dtype {
            tl_core::DType::F32 => "F32",
            tl_core::DType::F16 => "F16",
            tl_core::DType::BF16 => "BF16",
            tl_core::DType::Other(t) => t.as_str(),
            tl_core::DType::U8 => continue,
        };
        let Some(format) = Format::from_ggml_name(ty) else { continue };
        let Ok(l) = Linear::from_stored(format, &stored.bytes, rows, cols) else {
            assert!(widened.is_err(), "{name}: kept refused, widened accepted");
            continue;
        };
        let w = widened.expect("kept accepted, widened refused");
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&l.dequantize()), bits(&w), "{name}: kept and widened values differ");
        // An empty matrix ([0, n] or [n, 0]: the file may claim any n with no bytes behind
        // it) has nothing to multiply; its x or y alone could be gigabytes.
        if rows == 0 || cols == 0 {
            continue;
        }
        let mut y = vec![0.0f32; rows];
        l.forward(&vec![1.0; cols], 1, &mut y).expect("forward");
    }
}

/// The KV export envelope into a 4-block pool. The first byte picks whether the trailer
/// checksum is fixed up (so mutations get past it, bit 0), the geometry (bit 1), an f16 or
/// a q8 pool (bit 2: envelope versions 1 and 2) and prefix caching (bit 3).
/// After an error no block is taken; after a success exactly the returned ones are.
pub fn kv_import(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else { return };
    let mut buf = rest.to_vec();
    if sel & 1 == 1 && buf.len() >= TRAILER_BYTES {
        let n = buf.len() - TRAILER_BYTES;
        let sum = fnv1a64(&buf[..n]);
        buf[n..].copy_from_slice(&sum.to_le_bytes());
    }
    let geometry = KvGeometry { n_layers: 1 + (sel >> 1 & 1) as u32, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };
    let mut pool = if sel & 4 == 0 {
        KvPool::with_prefix_cache(geometry, 4, sel & 8 == 0).expect("pool")
    } else {
        KvPool::q8(geometry, 4, sel & 8 == 0).expect("q8 pool")
    };
    if sel & 16 != 0 {
        // A hybrid pool (version 3: pages, state slots and holes; selector bit 4).
        let state = StateGeometry { n_layers: 1, floats: 2 };
        let mut pool = HybridPool::new(pool, state, 2).expect("hybrid pool");
        match pool.import(&buf) {
            Ok(ids) => {
                let taken = ids.iter().filter(|&&id| id != NO_BLOCK).count();
                assert_eq!(pool.n_in_use() + 2 - pool.n_free_slots(), taken);
            }
            Err(_) => assert_eq!((pool.n_free(), pool.n_free_slots()), (4, 2), "a failed import took a block"),
        }
        return;
    }
    match pool.import(&buf) {
        Ok(ids) => assert_eq!(pool.n_in_use(), ids.len()),
        Err(_) => assert_eq!(pool.n_free(), 4, "a failed import took a block"),
    }
    pool.check_invariants().expect("invariants");
}

/// A hostile chat template: the input is `template \0 content`; compile the template and
/// render a conversation holding the content. The output stays within the bound.
pub fn chat_template(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (source, content) = text.split_once('\0').unwrap_or((&text, "hello"));
    let tokens = vec![("bos_token".to_string(), "<s>".to_string()), ("eos_token".to_string(), "</s>".to_string())];
    let Ok(t) = ChatTemplate::new(source, tokens) else { return };
    let msgs = [Message::new("system", "be brief"), Message::new("user", content), Message::new("assistant", content)];
    if let Ok(out) = t.render(&msgs, true) {
        assert!(out.len() <= tl_core::chat::MAX_OUTPUT_BYTES, "output past the bound");
    }
}

/// The server's request body: JSON into the request type, every field's checks (`plan`)
/// for chat and completions, and message content. An accepted plan has 1..=16 choices
/// and fits the context.
pub fn request(data: &[u8]) {
    let Ok(b) = serde_json::from_slice::<Body>(data) else { return };
    for chat in [true, false] {
        if let Ok(plan) = b.plan(vec![1, 2, 3], chat, Some(2048), 16) {
            assert!(!plan.requests().is_empty() && plan.requests().len() <= 16);
            assert!(plan.requests().iter().all(|r| r.max_tokens >= 1 && r.max_tokens + 3 <= 2048));
        }
    }
    for m in b.messages.iter().flatten() {
        let _ = content_text(&m.content);
    }
}

/// The same bytes as an Anthropic Messages body (`/v1/messages` and its `count_tokens`):
/// translated into the chat body, then that body's turns, tools and plan. An accepted
/// body has turns, at most `MAX_STOP` stop strings and a `max_tokens` of at least 1 (the
/// one asked for: Messages never picks its own).
pub fn messages_request(data: &[u8]) {
    for count in [false, true] {
        let Ok(t) = tl_serve::messages::translate(data, count) else { continue };
        let b = &t.body;
        let msgs = b.messages.as_deref().unwrap_or_default();
        assert!(!msgs.is_empty());
        assert!(!count || b.max_tokens.is_none_or(|m| m >= 1));
        assert!(count || b.max_tokens.is_some_and(|m| m >= 1));
        if let Some(tl_serve::api::Stop::Many(v)) = &b.stop {
            assert!(v.len() <= tl_serve::messages::MAX_STOP);
        }
        let _ = tl_serve::prompt::turns(msgs);
        let _ = tl_serve::tools::parse(b.tools.as_ref(), b.tool_choice.as_ref(), b.parallel_tool_calls.as_ref());
        if let Ok(plan) = b.plan(vec![1, 2, 3], true, Some(2048), 16) {
            assert_eq!(plan.requests().len(), 1);
            assert!(plan
                .requests()
                .iter()
                .all(|r| Some(r.max_tokens as i64) == b.max_tokens || b.max_tokens.is_none()));
        }
    }
}

/// The same bytes as an OpenAI Responses body (`/v1/responses`), alone and after a stored
/// conversation (a `previous_response_id` chain's items): translated into the chat body,
/// then that body's turns, tools, response format and plan. An accepted body has turns,
/// keeps the chain's items before its own, and a `max_output_tokens`, when given, of at
/// least 1; its plan is one request.
pub fn responses_request(data: &[u8]) {
    let chain = [
        serde_json::json!({"type": "message", "role": "user", "content": "hi"}),
        serde_json::json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
                           "arguments": "{}", "status": "completed"}),
    ];
    for history in [&chain[..0], &chain[..]] {
        let Ok(t) = tl_serve::responses::translate(data, history) else { continue };
        let b = &t.body;
        let msgs = b.messages.as_deref().unwrap_or_default();
        assert!(!msgs.is_empty());
        assert!(t.items.len() > history.len() && t.items[..history.len()] == *history);
        assert!(b.max_tokens.is_none_or(|m| m >= 1));
        let _ = tl_serve::prompt::turns(msgs);
        let _ = tl_serve::tools::parse(b.tools.as_ref(), b.tool_choice.as_ref(), b.parallel_tool_calls.as_ref());
        if let Ok(plan) = b.plan(vec![1, 2, 3], true, Some(2048), 16) {
            assert_eq!(plan.requests().len(), 1);
            assert!(plan
                .requests()
                .iter()
                .all(|r| Some(r.max_tokens as i64) == b.max_tokens || b.max_tokens.is_none()));
        }
    }
}

/// A JSON schema from a stranger, the way `response_format` brings it: through the
/// server's parsing into a grammar, compiled by the engine's llguidance compiler over a
/// byte vocabulary, then walked for up to 64 tokens. Errors are fine (a bad schema is a
/// 400); a panic or a hang is not.
pub fn json_schema(data: &[u8]) {
    use std::sync::{Arc, OnceLock};
    static COMPILER: OnceLock<tl_engine::GrammarCompiler> = OnceLock::new();
    let Ok(schema) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let rf = serde_json::json!({"type": "json_schema", "json_schema": {"name": "fuzz", "schema": schema}});
    let Ok(Some(g)) = tl_serve::structured::response_format(Some(&rf)) else { return };
    let c =
        COMPILER.get_or_init(|| tl_engine::GrammarCompiler::new(Arc::new(tl_core::Tokenizer::Byte), 258, Some(257)));
    if let Ok(n) = c.check(&g, 64) {
        assert!(n <= 64);
    }
}

/// The same bytes as a `/v1/embeddings`, a `/v1/rerank` and a `/v1/score` body. An accepted
/// embeddings body has 1..=MAX_INPUTS inputs, none empty, and a `dimensions` of at least
/// 1; an accepted rerank body has a query, at least one document, none empty, and a
/// `top_n` of at least 1. The ranking of the documents (scored by the cosine of their
/// bytes with the query's) is sorted best first, ties by index, distinct indices, cut to
/// `top_n`, every score in [-1, 1]. The base64 of the input's bytes as f32s has OpenAI's
/// length.
pub fn embed_request(data: &[u8]) {
    use tl_serve::embeddings::{self, Input, MAX_INPUTS};
    if let Ok(b) = embeddings::parse(data) {
        assert!(!b.inputs.is_empty() && b.inputs.len() <= MAX_INPUTS);
        for x in &b.inputs {
            match x {
                Input::Text(s) => assert!(!s.is_empty()),
                Input::Tokens(t) => assert!(!t.is_empty()),
            }
        }
        assert!(b.dimensions.is_none_or(|d| d >= 1));
    }
    if let Ok(r) = tl_serve::rerank::parse(data) {
        assert!(!r.query.is_empty() && !r.documents.is_empty() && r.documents.len() < MAX_INPUTS);
        assert!(r.documents.iter().all(|d| !d.is_empty()));
        assert!(r.top_n.is_none_or(|n| n >= 1));
        let vec = |s: &str| s.bytes().map(|b| f32::from(b) - 100.0).collect::<Vec<f32>>();
        let q = vec(&r.query);
        let scores: Vec<f64> = r.documents.iter().map(|d| tl_serve::rerank::cosine(&q, &vec(d))).collect();
        let ranked = tl_serve::rerank::rank(&scores, r.top_n);
        assert_eq!(ranked.len(), r.top_n.unwrap_or(usize::MAX).min(scores.len()));
        let mut seen = std::collections::HashSet::new();
        for w in ranked.windows(2) {
            assert!(w[0].1.total_cmp(&w[1].1).then(w[1].0.cmp(&w[0].0)).is_gt());
        }
        for &(i, s) in &ranked {
            assert!(seen.insert(i) && scores[i].to_bits() == s.to_bits());
            assert!((-1.0 - 1e-9..=1.0 + 1e-9).contains(&s), "{s}");
        }
    }
    // The same bytes as a /v1/score body: an accepted one pairs one text_1 with every
    // text_2, or two lists of one length in order; no text empty.
    if let Ok(sc) = tl_serve::score::parse(data) {
        assert!(!sc.pairs.is_empty() && sc.pairs.len() <= MAX_INPUTS);
        assert!(sc.pairs.iter().all(|(a, b)| !a.is_empty() && !b.is_empty()));
    }
    let floats: Vec<f32> = data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
    assert_eq!(embeddings::base64_f32(&floats).len(), (floats.len() * 4).div_ceil(3) * 4);
}

/// A MODEL reference (the first line) picked from a repository's file list (the other
/// lines): parsing and picking refuse or answer; what they pick is in the list.
pub fn model_ref(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut lines = text.split('\n');
    let reference = lines.next().unwrap_or_default();
    let files: Vec<String> = lines.map(str::to_string).collect();
    let _ = tl_hub::catalog::find(reference);
    let Some(Ok(r)) = tl_hub::reference::parse_hf(reference) else { return };
    assert!(r.repo.contains('/') && !r.repo.contains(".."), "{reference}: repo {}", r.repo);
    match tl_hub::hf::select(&r, &files) {
        Ok(tl_hub::hf::Selection::File(f)) => assert!(files.contains(&f), "{reference}: picked {f}, not listed"),
        Ok(tl_hub::hf::Selection::Dir(fs)) => {
            assert!(fs.iter().all(|f| files.contains(f)), "{reference}: picked {fs:?}, not all listed")
        }
        Err(e) => assert!(!e.to_string().contains('\n') || files.iter().any(|f| f.contains('\n')), "{e}"),
    }
}

/// The tiny Llama a LoRA input is read for (arch-llama's tiny-llama: 2 layers, d 64, 4
/// heads of 16, 2 KV heads, MLP 128).
const LORA_BASE: &str = r#"{"tl_arch": "llama", "tl_tokenizer": "byte", "architectures": ["LlamaForCausalLM"],
  "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 320,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": true}"#;

/// A LoRA adapter from a stranger: the first byte picks a GGUF adapter (even) or a PEFT
/// directory (odd: `adapter_config.json \0 adapter_model.safetensors`), read for
/// [`LORA_BASE`] and bound to its projections. An accepted adapter adapts only those
/// projections, each with `A` `[r, in]` and `B` `[out, r]` of its shape and a finite scale.
pub fn lora_adapter(dir: &Path, data: &[u8]) {
    let base = tl_core::ModelConfig::from_json(LORA_BASE).expect("the base config parses");
    let mut targets = Vec::new();
    for l in 0..2 {
        for (m, inp, out) in [
            ("self_attn.q_proj", 64, 64),
            ("self_attn.k_proj", 64, 32),
            ("self_attn.v_proj", 64, 32),
            ("self_attn.o_proj", 64, 64),
            ("mlp.gate_proj", 64, 128),
            ("mlp.up_proj", 64, 128),
            ("mlp.down_proj", 128, 64),
        ] {
            targets.push(tl_core::Adaptable { module: format!("model.layers.{l}.{m}"), inp, out });
        }
    }
    let Some((first, rest)) = data.split_first() else { return };
    let path = if first & 1 == 0 {
        let p = dir.join("adapter.gguf");
        std::fs::write(&p, rest).expect("write");
        p
    } else {
        let p = dir.join("peft");
        std::fs::create_dir_all(&p).expect("mkdir");
        let cut = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::fs::write(p.join("adapter_config.json"), &rest[..cut]).expect("write");
        std::fs::write(p.join("adapter_model.safetensors"), rest.get(cut + 1..).unwrap_or_default()).expect("write");
        p
    };
    let Ok(raw) = tl_core::adapter_read::read(&path, &base) else { return };
    let Ok(a) = tl_core::Adapter::bind("fuzz", raw, &targets) else { return };
    for (m, l) in a.modules() {
        let t = targets.iter().find(|t| t.module == m).expect("an adapted module is one of the base's");
        assert_eq!((l.a.inp(), l.b.out(), l.b.inp()), (t.inp, t.out, l.rank()), "{m}");
        assert!(l.scale.is_finite(), "{m}: scale {}", l.scale);
    }
}
