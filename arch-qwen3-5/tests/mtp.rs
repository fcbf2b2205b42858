//! Qwen3.5's MTP head (src/mtp.rs) against an independent forward of it:
//! tests/fixtures/tiny-qwen3_5-mtp/mtp_reference.json, written by
//! scripts/fixtures/make_tiny_qwen3_5_mtp.py with transformers' own modules in float32 from
//! the same BF16 tensors and the trunk's hidden states as transformers computes them. The
//! head is fed those hidden states (not tl's), so only the head is under test; its K/V is
//! kept in f16 (the reference records how far that moves the logits: well inside the
//! tolerance). Also: a model without `mtp.*` is refused naming the file, and the head's
//! logits are the same bits whether its positions are fed in one step or one at a time.

#[path = "../../arch-llama/tests/common/mod.rs"]
mod common;

use tl_arch_qwen3_5 as _;

use common::*;
use tl_core::{ForwardBatch, ModelRunner, RunnerError, Weights};

const NAME: &str = "tiny-qwen3_5-mtp";

struct Case {
    ids: Vec<u32>,
    hidden: Vec<f32>,
    last_rows: usize,
    logits: Vec<Vec<f32>>,
    tolerance: f32,
}

fn cases() -> Vec<Case> {
    let text = std::fs::read_to_string(fixture(NAME).join("mtp_reference.json")).expect("mtp_reference.json");
    let json: serde_json::Value = serde_json::from_str(&text).expect("json");
    let floats = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    json["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Case {
            ids: p["ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
            hidden: floats(&p["hidden"]),
            last_rows: p["last_rows"].as_u64().unwrap() as usize,
            logits: p["logits"].as_array().unwrap().iter().map(floats).collect(),
            tolerance: p["tolerance"].as_f64().unwrap() as f32,
        })
        .collect()
}

fn head() -> ModelRunner {
    ModelRunner::load_draft_head(&fixture(NAME), &engine(1, Weights::Native)).expect("the MTP head loads")
}

/// The head's logits for the last `rows` of its `ids.len() - 1` positions (pair
/// `(hidden[p], ids[p + 1])` at position `p`): the positions before them in one step, then
/// one step each.
fn last_logits(r: &mut ModelRunner, ids: &[u32], hidden: &[f32], rows: usize) -> Vec<Vec<f32>> {
    let (t, d) = (ids.len() - 1, r.hidden_size());
    let blocks = r.alloc_table(t);
    let blocks = blocks.expect("blocks");
    let cut = t - rows;
    let mut out = Vec::new();
    if cut > 0 {
        let batch = ForwardBatch::single(&ids[1..cut + 1], 0, &blocks);
        r.forward_given(&batch, &hidden[..cut * d]).expect("head prefill");
    }
    for p in cut..t {
        let batch = ForwardBatch::single(&ids[p + 1..p + 2], p, &blocks);
        out.push(r.forward_given(&batch, &hidden[p * d..(p + 1) * d]).expect("head step").logits.data);
    }
    let pool = r.pool();
    tl_core::release_all(pool.lock().unwrap().as_mut(), blocks).unwrap();
    out
}

#[test]
fn the_mtp_head_matches_its_reference_forward() {
    let mut r = head();
    assert_eq!(r.hidden_size(), 64);
    for c in cases() {
        assert_eq!(c.hidden.len(), (c.ids.len() - 1) * 64);
        let got = last_logits(&mut r, &c.ids, &c.hidden, c.last_rows);
        let mut worst = 0.0f32;
        for (g, w) in got.iter().zip(&c.logits) {
            assert_eq!(g.len(), w.len());
            worst = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(worst, f32::max);
        }
        eprintln!("{} tokens: max abs diff {worst} (tolerance {})", c.ids.len(), c.tolerance);
        assert!(worst <= c.tolerance, "{} tokens: max |tl - reference| = {worst} > {}", c.ids.len(), c.tolerance);
    }
}

#[test]
fn the_mtp_head_gives_the_same_bits_in_one_step_or_one_position_at_a_time() {
    let mut r = head();
    let c = cases().pop().unwrap();
    let d = r.hidden_size();
    let t = c.ids.len() - 1;
    let stepwise = last_logits(&mut r, &c.ids, &c.hidden, t - 1);
    let blocks = r.alloc_table(t).unwrap();
    // One step of every position: its last row is the last position's.
    let all = r.forward_given(&ForwardBatch::single(&c.ids[1..], 0, &blocks), &c.hidden[..t * d]).unwrap();
    assert_eq!(all.logits.data, *stepwise.last().unwrap());
    assert_eq!(all.hidden.as_ref().map(Vec::len), Some(t * d), "every position's own hidden state");
}

#[test]
fn given_rows_of_the_wrong_length_are_refused() {
    let mut r = head();
    let blocks = r.alloc_table(3).unwrap();
    let err = r.forward_given(&ForwardBatch::single(&[1, 2, 3], 0, &blocks), &[0.0; 64 * 2]).unwrap_err();
    assert!(err.to_string().contains("given values"), "{err}");
}

#[test]
fn a_checkpoint_without_mtp_tensors_has_no_draft_head() {
    let Err(err) = ModelRunner::load_draft_head(&fixture("tiny-qwen3_5"), &engine(1, Weights::Native)) else {
        panic!("a checkpoint without mtp.* gave a draft head")
    };
    assert!(matches!(err, RunnerError::NoDraftHead(_)), "{err}");
    assert!(err.to_string().contains("model.safetensors"), "the error names the file: {err}");
}

/// tests/fixtures/tiny-qwen3_5-mtp/model.gguf: llama.cpp's converter (the sdist's, by
/// scripts/fixtures/make_qwen3_5_gguf.sh, MTP kept) writes the head as block 4's
/// `nextn.{eh_proj, enorm, hnorm, shared_head_norm}` and usual names, norms holding `1 + w`.
/// Read through tl's GGUF names, every head tensor is the safetensors one (norms: `1 + w`
/// in f32, as the converter adds it), and the head built from the file gives the same
/// logits, bit for bit.
#[test]
fn the_gguf_mtp_head_is_the_safetensors_head() {
    let dir = fixture(NAME);
    let st = tl_core::SafeTensors::open(&dir.join("model.safetensors")).unwrap();
    let gguf = tl_core::open_weights(&dir.join("model.gguf")).unwrap();
    use tl_core::WeightStore;
    let heads: Vec<String> = st.names().into_iter().filter(|n| n.starts_with("mtp.")).collect();
    assert_eq!(heads.len(), 15, "{heads:?}");
    for name in &heads {
        let shape = st.info(name).unwrap().shape;
        let want: Vec<f32> = st.f32(name, &shape).unwrap();
        let want: Vec<f32> = if name.ends_with("norm.weight")
            || name.ends_with("norm_embedding.weight")
            || name.ends_with("norm_hidden.weight")
        {
            want.iter().map(|w| 1.0 + w).collect()
        } else {
            want
        };
        let got = gguf.f32(name, &shape).unwrap_or_else(|e| panic!("{name} in the GGUF: {e}"));
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "{name} differs");
    }
    let c = cases().pop().unwrap();
    let mut a = head();
    let mut b = ModelRunner::load_draft_head(&dir.join("model.gguf"), &engine(1, Weights::Native)).expect("GGUF head");
    assert_eq!(last_logits(&mut a, &c.ids, &c.hidden, 3), last_logits(&mut b, &c.ids, &c.hidden, 3));
}
