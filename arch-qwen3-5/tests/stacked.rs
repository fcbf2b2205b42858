//! Qwen3.5-MoE with its experts stacked, as transformers 5 holds them and the released
//! checkpoints store them (`mlp.experts.gate_up_proj` `[E, 2I, d]`, gate rows first, and
//! `mlp.experts.down_proj` `[E, d, I]`): the tiny fixture rewritten that way gives the
//! per-expert file's logits bit for bit (the same BF16 values; transformers loads both
//! layouts to the same model: tests/fixtures/README.md), and a stack short of an expert
//! is refused naming the missing expert.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

use tl_arch_qwen3_5 as _;

use common::*;
use serde_json::{json, Map, Value};
use std::path::Path;
use tl_core::Weights;

const NAME: &str = "tiny-qwen3_5-moe";
const LAYERS: usize = 4;

/// The fixture's tensors: name to (dtype, shape, bytes).
fn tensors(path: &Path) -> Map<String, Value> {
    let bytes = std::fs::read(path).expect("read");
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let header: Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).expect("header");
    let data = &bytes[8 + n..];
    header
        .into_iter()
        .filter(|(k, _)| k != "__metadata__")
        .map(|(k, v)| {
            let [b, e] = [0, 1].map(|i| v["data_offsets"][i].as_u64().expect("offset") as usize);
            (k, json!({"dtype": v["dtype"], "shape": v["shape"], "bytes": data[b..e].to_vec()}))
        })
        .collect()
}

/// A safetensors file of `tensors` (each `{dtype, shape, bytes}`).
fn write(path: &Path, tensors: &Map<String, Value>) {
    let (mut header, mut data) = (Map::new(), Vec::new());
    for (k, t) in tensors {
        let bytes: Vec<u8> = serde_json::from_value(t["bytes"].clone()).expect("bytes");
        let at = data.len();
        data.extend_from_slice(&bytes);
        header.insert(k.clone(), json!({"dtype": t["dtype"], "shape": t["shape"], "data_offsets": [at, data.len()]}));
    }
    let head = serde_json::to_vec(&header).expect("JSON");
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&head);
    out.extend_from_slice(&data);
    std::fs::write(path, out).expect("write");
}

/// The fixture with each layer's `experts` experts stacked (the rest dropped).
fn stacked(experts: usize) -> tempfile::TempDir {
    let dir = with_config(&fixture(NAME), |_| {});
    let path = dir.path().join("model.safetensors");
    let mut t = tensors(&path);
    let bytes = |t: &mut Map<String, Value>, k: String| -> (Vec<u8>, Vec<u64>) {
        let v = t.remove(&k).unwrap_or_else(|| panic!("{k}"));
        (
            serde_json::from_value(v["bytes"].clone()).expect("bytes"),
            serde_json::from_value(v["shape"].clone()).expect("shape"),
        )
    };
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}.mlp.experts");
        let (mut gate_up, mut down) = (Vec::new(), Vec::new());
        let (mut gu_shape, mut d_shape) = (vec![], vec![]);
        for e in 0..8 {
            let (g, gs) = bytes(&mut t, format!("{p}.{e}.gate_proj.weight"));
            let (u, _) = bytes(&mut t, format!("{p}.{e}.up_proj.weight"));
            let (d, ds) = bytes(&mut t, format!("{p}.{e}.down_proj.weight"));
            if e < experts {
                gate_up.extend(g.into_iter().chain(u));
                down.extend(d);
            }
            (gu_shape, d_shape) = (vec![experts as u64, 2 * gs[0], gs[1]], vec![experts as u64, ds[0], ds[1]]);
        }
        t.insert(format!("{p}.gate_up_proj"), json!({"dtype": "BF16", "shape": gu_shape, "bytes": gate_up}));
        t.insert(format!("{p}.down_proj"), json!({"dtype": "BF16", "shape": d_shape, "bytes": down}));
    }
    write(&path, &t);
    dir
}

#[test]
fn stacked_experts_give_the_per_expert_files_bits() {
    let refs = reference(NAME);
    let want = alone(&mut load(NAME, 0, Weights::Native), &refs);
    let dir = stacked(8);
    check_same_bits(&mut load_path(dir.path(), 0, Weights::Native), &refs, &want, "stacked experts");
    check_same_bits(&mut load_path(dir.path(), 0, Weights::F32), &refs, &want, "stacked experts, --weights f32");
}

#[test]
fn a_stack_short_of_an_expert_is_refused_naming_it() {
    let err = load_error(stacked(7).path());
    assert!(err.contains("model.layers.0.mlp.experts.7."), "{err}");
}
