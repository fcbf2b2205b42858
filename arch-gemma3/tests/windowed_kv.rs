//! Windowed layers give their KV pages back (docs/kv.md, issue 33 part 2), end to end
//! through the real forward: a Gemma 3 270M-shaped model (the tiny fixture's weights
//! stretched to 18 layers, every sixth global, window 512, blocks of 16) holds about
//! what its layers can see, and giving the pages back changes no bit of any logit.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tl_arch_gemma3 as _;
use tl_core::{EngineConfig, ForwardBatch, KvConfig, ModelRunner, Weights};
use tl_kv as _;

const LAYERS: usize = 18;
const WINDOW: usize = 512;
const B: u32 = 16;

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny-gemma3")
}

/// Gemma 3 270M's layer pattern over the tiny fixture's weights: layer `i` copies the
/// fixture's layer 0 (windowed) or 2 (global), so every tensor is a real one.
fn gemma3_270m_shaped() -> tempfile::TempDir {
    let src = fixture();
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(src.join("config.json")).unwrap()).unwrap();
    let global = |i: usize| (i + 1).is_multiple_of(6);
    let kinds: Vec<&str> =
        (0..LAYERS).map(|i| if global(i) { "full_attention" } else { "sliding_attention" }).collect();
    cfg["num_hidden_layers"] = json!(LAYERS);
    cfg["layer_types"] = json!(kinds);
    cfg["sliding_window"] = json!(WINDOW);
    cfg["max_position_embeddings"] = json!(16384);
    std::fs::write(dir.path().join("config.json"), serde_json::to_vec(&cfg).unwrap()).unwrap();

    // safetensors: u64 header length, the JSON header, the data.
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let data = &bytes[8 + n..];
    let mut names: Vec<(String, String)> = Vec::new(); // (new name, fixture name)
    for (name, _) in header.as_object().unwrap().iter().filter(|(k, _)| *k != "__metadata__") {
        match name.strip_prefix("model.layers.0.") {
            Some(rest) => {
                for i in 0..LAYERS {
                    let from = if global(i) { 2 } else { 0 };
                    names.push((format!("model.layers.{i}.{rest}"), format!("model.layers.{from}.{rest}")));
                }
            }
            None if !name.starts_with("model.layers.") => names.push((name.clone(), name.clone())),
            None => {}
        }
    }
    let (mut out_header, mut out_data) = (serde_json::Map::new(), Vec::new());
    for (new, old) in names {
        let t = &header[&old];
        let off = t["data_offsets"].as_array().unwrap();
        let (s, e) = (off[0].as_u64().unwrap() as usize, off[1].as_u64().unwrap() as usize);
        let start = out_data.len();
        out_data.extend_from_slice(&data[s..e]);
        let entry = json!({"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [start, out_data.len()]});
        out_header.insert(new, entry);
    }
    let h = serde_json::to_vec(&Value::Object(out_header)).unwrap();
    let mut file = (h.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(&h);
    file.extend_from_slice(&out_data);
    std::fs::write(dir.path().join("model.safetensors"), file).unwrap();
    dir
}

fn load(dir: &Path, kv: &str, blocks: u32) -> ModelRunner {
    let cfg = EngineConfig {
        prefill_chunk: 512,
        threads: 2,
        weights: Weights::Native,
        kv: KvConfig { backend: kv.into(), block_tokens: B, n_blocks: Some(blocks), ..KvConfig::default() },
        ..EngineConfig::default()
    };
    ModelRunner::load(dir, &cfg).expect("load")
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n).map(|i| ((i * 7919 + 13) % 300) as u32).collect()
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// The done-when line: a sequence of 8,192 tokens holds at most 1.1x the layer-positions
/// its layers can see (3 global layers x 8,192 + 15 windowed x 512); one page per block of
/// every layer (no groups) held 4.57x.
#[test]
fn an_8k_gemma3_270m_sequence_holds_at_most_1_1x_what_its_layers_see() {
    const N: usize = 8192;
    let dir = gemma3_270m_shaped();
    let mut r = load(dir.path(), "f16-slab", (N as u32).div_ceil(B));
    let layout = r.kv_layout().clone();
    assert_eq!((layout.n_groups(), layout.group_layers()), (6, 3), "{layout:?}");
    let mut seq = r.sequence();
    r.feed(&mut seq, &prompt(N)).expect("feed");
    let held_pages = r.pool().lock().unwrap().n_in_use();
    let held = held_pages * layout.group_layers() as usize * B as usize;
    let visible: usize = layout.groups().iter().map(|g| g.layers.len() * g.window.unwrap_or(N).min(N)).sum();
    let ratio = held as f64 / visible as f64;
    let before = (LAYERS * N) as f64 / visible as f64;
    eprintln!(
        "windowed-kv: {N} tokens hold {held} layer-positions ({held_pages} pages), the layers see {visible}: \
         ratio {ratio:.3} (one page per block of every layer: {before:.2})"
    );
    assert!(ratio <= 1.1, "held {held} layer-positions for {visible} visible: {ratio:.3}");
    assert!((before - 4.57).abs() < 0.01, "{before}");
    drop(seq);
    assert_eq!(r.pool().lock().unwrap().n_in_use(), 0, "the sequence's pages did not all go back");
}

/// A prompt over two windows long, then decode steps: a sequence that gives its windowed
/// pages back (`Sequence::feed`) returns every logit with the bits of one that keeps
/// every page (a full table, the same chunks), on the f16 and the q8 cache.
#[test]
fn giving_windowed_pages_back_changes_no_bit() {
    let dir = gemma3_270m_shaped();
    for kv in ["f16-slab", "q8-slab"] {
        let mut r = load(dir.path(), kv, 256);
        let (p, steps) = (prompt(2 * WINDOW + 77), 6);
        let total = p.len() + steps;

        // Every page kept: a full table of (rows, G) entries, never trimmed.
        let full = r.pool().lock().unwrap().alloc(r.table_len(total)).unwrap();
        let mut want = Vec::new();
        let mut start = 0;
        for piece in p.chunks(512) {
            want.push(r.forward(&ForwardBatch::single(piece, start, &full)).unwrap().data);
            start += piece.len();
        }
        let mut fed = Vec::new();
        for k in 0..steps {
            let t = tl_testkit::argmax(want.last().unwrap());
            fed.push(t);
            want.push(r.forward(&ForwardBatch::single(&[t], p.len() + k, &full)).unwrap().data);
        }
        let kept_pages = full.len();
        tl_testkit::release(&r, &full);

        // Given back as the window passes.
        let mut seq = r.sequence();
        let mut got = Vec::new();
        for piece in p.chunks(512) {
            got.push(r.feed(&mut seq, piece).unwrap());
        }
        let held = r.pool().lock().unwrap().n_in_use();
        for &t in &fed {
            got.push(r.feed(&mut seq, &[t]).unwrap());
        }
        assert_eq!(want.len(), got.len());
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(bits(w), bits(g), "{kv}: step {i}'s logits differ once windowed pages went back");
        }
        assert!(held < kept_pages * 2 / 3, "{kv}: {held} pages held after the prompt, {kept_pages} kept in full");
        // Rewinding into the given-back part starts over; a rewind inside the window keeps.
        assert_eq!(seq.truncate(total - 3).unwrap(), total - 3);
        assert_eq!(seq.truncate(10).unwrap(), 0);
        drop(seq);
        assert_eq!(r.pool().lock().unwrap().n_in_use(), 0);
    }
}
