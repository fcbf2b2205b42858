//! Every fuzz target's property, on the stable toolchain, over the committed seeds
//! (fuzz/corpus/<target>/seed-*) and every input a fuzzer ever crashed on
//! (fuzz/regressions/<target>/*): no panic, and the target's own assertions. The bodies
//! mirror fuzz/fuzz_targets/*.rs; keep them in step.

use std::path::{Path, PathBuf};

use tl_arch_llama as _;
use tl_core::{ChatTemplate, Gguf, Message, SafeTensors, WeightStore};
use tl_kv::{fnv1a64, KvGeometry, KvPool, TRAILER_BYTES};
use tl_serve::api::{content_text, Body};

fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for dir in [root.join("corpus").join(target), root.join("regressions").join(target)] {
        let Ok(rd) = std::fs::read_dir(&dir) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let seed = p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("seed-"));
            if p.is_file() && (seed || dir.ends_with(Path::new("regressions").join(target))) {
                let bytes = std::fs::read(&p).expect("read input");
                out.push((p, bytes));
            }
        }
    }
    assert!(!out.is_empty(), "no inputs for {target}");
    out
}

fn as_file(dir: &Path, data: &[u8], ext: &str) -> PathBuf {
    let p = dir.join(format!("input.{ext}"));
    std::fs::write(&p, data).expect("write");
    p
}

#[test]
fn safetensors_inputs() {
    let d = tempfile::tempdir().expect("tempdir");
    for (name, data) in inputs("safetensors") {
        eprintln!("{}", name.display());
        if let Ok(st) = SafeTensors::open(&as_file(d.path(), &data, "safetensors")) {
            for n in st.names() {
                let Some(info) = st.info(&n) else { continue };
                let _ = st.f32(&n, &info.shape);
                let _ = st.stored(&n, &info.shape);
                let _ = st.raw(&n, info.dtype.clone(), &info.shape);
                let _ = st.f32(&n, &[1, 2, 3]);
            }
        }
    }
}

#[test]
fn config_inputs() {
    for (name, data) in inputs("config") {
        eprintln!("{}", name.display());
        if let Ok(text) = std::str::from_utf8(&data) {
            let _ = tl_core::ModelConfig::from_json(text);
        }
    }
}

#[test]
fn gguf_inputs() {
    let d = tempfile::tempdir().expect("tempdir");
    for (name, data) in inputs("gguf") {
        eprintln!("{}", name.display());
        let path = as_file(d.path(), &data, "gguf");
        // The container plus the registered architecture's translation (names, config).
        let _ = tl_core::load::open_gguf(&path);
        let Ok(g) = Gguf::open(&path) else { continue };
        let _ = tl_core::tokenizer::gguf_tokenizer_json(&g);
        let _ = ChatTemplate::from_gguf(&g);
        for n in g.names() {
            let Some(info) = g.info(&n) else { continue };
            let _ = g.f32(&n, &info.shape);
            let _ = g.stored(&n, &info.shape);
        }
    }
}

#[test]
fn kv_import_inputs() {
    for (name, data) in inputs("kv_import") {
        eprintln!("{}", name.display());
        let Some((&sel, rest)) = data.split_first() else { continue };
        let mut buf = rest.to_vec();
        if sel & 1 == 1 && buf.len() >= TRAILER_BYTES {
            let n = buf.len() - TRAILER_BYTES;
            let sum = fnv1a64(&buf[..n]);
            buf[n..].copy_from_slice(&sum.to_le_bytes());
        }
        let g = KvGeometry { n_layers: 1 + (sel >> 1 & 1) as u32, n_kv_heads: 1, head_dim: 2, block_tokens: 2 };
        let mut pool = KvPool::with_prefix_cache(g, 4, sel & 8 == 0).expect("pool");
        match pool.import(&buf) {
            Ok(ids) => assert_eq!(pool.n_in_use(), ids.len()),
            Err(_) => assert_eq!(pool.n_free(), 4, "a failed import took a block"),
        }
        pool.check_invariants().expect("invariants");
    }
}

#[test]
fn chat_template_inputs() {
    for (name, data) in inputs("chat_template") {
        eprintln!("{}", name.display());
        let text = String::from_utf8_lossy(&data);
        let (source, content) = text.split_once('\0').unwrap_or((&text, "hello"));
        let tokens = vec![("bos_token".into(), "<s>".into()), ("eos_token".into(), "</s>".into())];
        let Ok(t) = ChatTemplate::new(source, tokens) else { continue };
        let msgs =
            [Message::new("system", "be brief"), Message::new("user", content), Message::new("assistant", content)];
        if let Ok(out) = t.render(&msgs, true) {
            assert!(out.len() <= tl_core::chat::MAX_OUTPUT_BYTES);
        }
    }
}

#[test]
fn request_inputs() {
    for (name, data) in inputs("request") {
        eprintln!("{}", name.display());
        let Ok(b) = serde_json::from_slice::<Body>(&data) else { continue };
        for chat in [true, false] {
            if let Ok(plan) = b.plan(vec![1, 2, 3], chat, Some(2048), 16) {
                assert!(!plan.reqs.is_empty() && plan.reqs.len() <= 16);
                assert!(plan.reqs.iter().all(|r| r.max_tokens >= 1 && r.max_tokens + 3 <= 2048));
            }
        }
        for m in b.messages.iter().flatten() {
            let _ = content_text(&m.content);
        }
    }
}
