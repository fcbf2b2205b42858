//! The forward's invariances (batch, chunk, threads), the pool bookkeeping around it, and
//! the batches it refuses.

mod common;

// Name the plugin crate so its registrations ("llama") are linked.
use tl_arch_llama as _;

use common::*;
use tl_core::{ForwardBatch, ForwardSeq, ModelRunner, Weights};

/// A prompt from the HF reference (40 tokens) and a few more ids past the bytes.
fn tokens() -> Vec<u32> {
    let mut t = reference("tiny-llama")[3].ids.clone();
    t.extend([300, 257, 1, 319]);
    t
}

#[test]
fn incremental_decode_equals_full_prefill() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let toks = tokens();
    let full = run_in_steps(&mut r, &toks, &[toks.len()]);
    let tol = 1e-4 * max_abs(&full);
    for (name, steps) in [("chunks", vec![5, 3, 7, 1, 11]), ("one token a step", vec![1; toks.len()])] {
        let ours = run_in_steps(&mut r, &toks, &steps);
        let diff = max_abs_diff(&ours, &full);
        eprintln!("{name}: max diff from one prefill {diff:.3e} (tolerance {tol:.3e})");
        assert!(diff <= tol, "{name}: last logits differ from one prefill by {diff} > {tol}");
    }
}

/// Four sequences, each a list of steps (token runs); positions continue across steps.
fn schedule() -> Vec<Vec<Vec<u32>>> {
    let t = tokens();
    let runs = |sizes: &[usize], from: usize| -> Vec<Vec<u32>> {
        let mut at = from;
        sizes
            .iter()
            .map(|&n| {
                let run = t[at..at + n].to_vec();
                at += n;
                run
            })
            .collect()
    };
    vec![runs(&[7, 3, 1, 1], 0), runs(&[2, 5, 1, 1], 9), runs(&[13, 1, 4, 1], 3), runs(&[1, 1, 1, 6], 20)]
}

/// Every step's logits and hidden rows of every sequence, running the schedule either
/// each sequence alone, or all sequences together in one step (in a rotating order).
fn run_schedule(r: &mut ModelRunner, together: bool) -> Vec<Vec<(Vec<u32>, Vec<u32>)>> {
    let sched = schedule();
    let d = r.hidden_size();
    let tables: Vec<Vec<u32>> = sched.iter().map(|s| alloc(r, s.iter().map(Vec::len).sum())).collect();
    let mut starts = vec![0usize; sched.len()];
    let mut out = vec![Vec::new(); sched.len()];
    for step in 0..sched[0].len() {
        let order: Vec<usize> = (0..sched.len()).map(|i| (i + step) % sched.len()).collect();
        let groups: Vec<Vec<usize>> = if together { vec![order] } else { order.into_iter().map(|i| vec![i]).collect() };
        for g in groups {
            let seqs = g
                .iter()
                .map(|&i| ForwardSeq { tokens: &sched[i][step], start: starts[i], blocks: &tables[i], adapter: None })
                .collect();
            let res = r.forward_hidden(&ForwardBatch { seqs }).expect("forward");
            let hidden = res.hidden.expect("hidden states");
            let mut row0 = 0;
            for (k, &i) in g.iter().enumerate() {
                let n = sched[i][step].len();
                out[i].push((bits(res.logits.row(k)), bits(&hidden[row0 * d..(row0 + n) * d])));
                row0 += n;
            }
        }
        for (i, s) in sched.iter().enumerate() {
            starts[i] += s[step].len();
        }
    }
    for t in &tables {
        release(r, t);
    }
    out
}

#[test]
fn batched_forward_equals_single() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let alone = run_schedule(&mut r, false);
    let together = run_schedule(&mut r, true);
    for (i, (a, b)) in alone.iter().zip(&together).enumerate() {
        for (step, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(x.0 == y.0, "sequence {i} step {step}: logits differ in a batch");
            assert!(x.1 == y.1, "sequence {i} step {step}: hidden states differ in a batch");
        }
    }
}

/// A step large enough to take the parallel paths of the Candle ops (RMSNorm over more
/// than 32 rows, elementwise ops over 64K+ values: 600 rows x intermediate 128), so a
/// kernel whose per-row arithmetic depended on the split would show here.
#[test]
fn a_large_step_equals_its_sequences_alone() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let d = r.hidden_size();
    let seqs: Vec<Vec<u32>> = (0..3u32).map(|s| (0..200u32).map(|k| (s * 7919 + k * 31) % 320).collect()).collect();
    let tables: Vec<Vec<u32>> = seqs.iter().map(|t| alloc(&r, t.len())).collect();
    let batch = ForwardBatch {
        seqs: seqs
            .iter()
            .zip(&tables)
            .map(|(t, b)| ForwardSeq { tokens: t, start: 0, blocks: b, adapter: None })
            .collect(),
    };
    let together = r.forward_hidden(&batch).expect("forward");
    let hidden = together.hidden.expect("hidden states");
    for (i, (t, b)) in seqs.iter().zip(&tables).enumerate() {
        let alone = r.forward_hidden(&ForwardBatch::single(t, 0, b)).expect("forward");
        assert!(bits(together.logits.row(i)) == bits(alone.logits.row(0)), "sequence {i}: logits differ in a batch");
        let rows = &hidden[i * 200 * d..(i + 1) * 200 * d];
        assert!(bits(rows) == bits(&alone.hidden.expect("hidden")), "sequence {i}: hidden states differ in a batch");
    }
    for t in &tables {
        release(&r, t);
    }
}

#[test]
fn threads_do_not_change_logits() {
    let one = run_schedule(&mut load("tiny-llama", 1, Weights::Native), true);
    let two = run_schedule(&mut load("tiny-llama", 2, Weights::Native), true);
    assert!(one == two, "1 and 2 threads give different logits or hidden states");
}

#[test]
fn run_once_returns_its_blocks() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let toks = tokens();
    let d = r.hidden_size();
    let n_blocks = r.pool().lock().expect("pool lock").n_blocks() as usize;
    for len in [1, 4, 5, 17, toks.len()] {
        let (hidden, logits) = r.run_once(&toks[..len]).expect("run_once");
        assert_eq!((hidden.len(), logits.len()), (len * d, r.config().vocab_size));
        assert_eq!(bits(&logits), bits(&run_in_steps(&mut r, &toks[..len], &[])));
        let pool = r.pool();
        let pool = pool.lock().expect("pool lock");
        assert_eq!((pool.n_free(), pool.n_in_use(), pool.n_cached()), (n_blocks, 0, 0), "after run_once of {len}");
    }
}

/// Every K and V slab of `ids`, all layers.
fn snapshot(r: &ModelRunner, ids: &[u32]) -> Vec<Vec<u16>> {
    let pool = r.pool();
    let pool = pool.lock().expect("pool lock");
    let layers = pool.geometry().n_layers;
    let mut out = Vec::new();
    for &id in ids {
        out.push(vec![pool.fill(id).expect("fill") as u16]);
        for l in 0..layers {
            for is_v in [false, true] {
                out.push(pool.slab(id, l, is_v).expect("slab").to_vec());
            }
        }
    }
    out
}

#[test]
fn forward_refuses_bad_batches() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let toks = tokens();
    let (vocab, max_pos) = (r.config().vocab_size as u32, r.config().max_position_embeddings.expect("a context"));
    let b = r.block_tokens();
    // A sequence with 6 tokens in the cache; its next 3 tokens are a valid part of every
    // bad batch below, so a forward that wrote before checking would change its blocks.
    let a = alloc(&r, 9);
    r.forward(&ForwardBatch::single(&toks[..6], 0, &a)).expect("prefill");
    let good = ForwardSeq { tokens: &toks[6..9], start: 6, blocks: &a, adapter: None };
    let c = alloc(&r, 12);
    // Past the context: start at max_pos - 1, two tokens, a table long enough to hold
    // them (earlier entries may repeat; only the written ones must be distinct).
    let end = max_pos + 1;
    let written = alloc(&r, 2 * b);
    let mut long = vec![c[0]; end.div_ceil(b)];
    let first = (max_pos - 1) / b;
    long[first..].copy_from_slice(&written[..end.div_ceil(b) - first]);
    let free = {
        let pool = r.pool();
        let pool = pool.lock().expect("pool lock");
        (0..pool.n_blocks()).find(|&id| pool.refs(id).ok() == Some(0)).expect("a free block")
    };
    let n_blocks = r.pool().lock().expect("pool lock").n_blocks();
    let bad_token = [1, vocab, 2];
    let (unallocated, outside) = ([free], [n_blocks + 3]);
    let cases: Vec<(&str, ForwardSeq)> = vec![
        ("short block table", ForwardSeq { tokens: &toks[..9], start: 0, blocks: &c[..2], adapter: None }),
        (
            "position past max_position_embeddings",
            ForwardSeq { tokens: &toks[..2], start: max_pos - 1, blocks: &long, adapter: None },
        ),
        ("token id >= vocab", ForwardSeq { tokens: &bad_token, start: 0, blocks: &c, adapter: None }),
        ("empty sequence", ForwardSeq { tokens: &[], start: 0, blocks: &c, adapter: None }),
        ("block not allocated", ForwardSeq { tokens: &toks[..3], start: 0, blocks: &unallocated, adapter: None }),
        ("block id outside the pool", ForwardSeq { tokens: &toks[..3], start: 0, blocks: &outside, adapter: None }),
    ];
    let mut ids: Vec<u32> = a.iter().chain(&c).chain(&written).copied().collect();
    ids.sort();
    let before = snapshot(&r, &ids);
    for (what, bad) in cases {
        for seqs in [vec![good, bad], vec![bad, good]] {
            let res = r.forward(&ForwardBatch { seqs });
            assert!(res.is_err(), "{what}: accepted");
            assert!(snapshot(&r, &ids) == before, "{what}: a KV slab changed");
            assert_eq!(r.pool().lock().expect("pool lock").refs(free).expect("refs"), 0, "{what}");
        }
    }
    assert!(r.forward(&ForwardBatch { seqs: vec![] }).is_err(), "an empty batch was accepted");
    // The good sequence alone runs, and then it does write.
    r.forward(&ForwardBatch { seqs: vec![good] }).expect("the good sequence alone");
    assert!(snapshot(&r, &ids) != before);
}

#[test]
fn untied_model_without_lm_head_is_refused() {
    // tiny-llama's weights (no lm_head.weight) under a config that does not tie them.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("untied-tiny-llama");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = fixture("tiny-llama");
    std::fs::copy(src.join("model.safetensors"), dir.join("model.safetensors")).expect("copy weights");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).expect("config")).expect("JSON");
    cfg["tie_word_embeddings"] = false.into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).expect("write config");
    let err = ModelRunner::load(&dir, &engine(0, Weights::Native)).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("lm_head.weight")), "{err:?}");
}

/// Logits of every position (perplexity's option) are batch-invariant like the rest:
/// row `t` of a scored prompt, and of the same prompt batched beside another, has the
/// bits of the last-token logits of the prefix `0..=t` run on its own.
#[test]
fn every_position_logits_equal_each_prefix_alone() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let p = &reference("tiny-llama")[3].ids;
    let all = r.score(p).expect("score");
    assert_eq!(all.rows(), p.len());
    for t in 0..p.len() {
        let alone = run_in_steps(&mut r, &p[..=t], &[]);
        assert!(bits(all.row(t)) == bits(&alone), "position {t}: all-position logits differ from the prefix alone");
    }
    let other: Vec<u32> = (0..9u32).map(|k| k * 37 % 320).collect();
    let (ta, tb) = (alloc(&r, other.len()), alloc(&r, p.len()));
    let batch = ForwardBatch {
        seqs: vec![
            ForwardSeq { tokens: &other, start: 0, blocks: &ta, adapter: None },
            ForwardSeq { tokens: p, start: 0, blocks: &tb, adapter: None },
        ],
    };
    let both = r.forward_all(&batch).expect("forward_all");
    assert_eq!(both.rows(), other.len() + p.len());
    for t in 0..p.len() {
        assert!(bits(both.row(other.len() + t)) == bits(all.row(t)), "position {t} differs in a batch");
    }
    release(&r, &ta);
    release(&r, &tb);
}

/// A speculative verify step asks for the last `tails[i]` rows of each sequence: each row
/// has the bits of that position's row scored on its own, beside a prefill chunk that
/// asks for its last row only; a tail of 0 or past the chunk is refused.
#[test]
fn tail_logits_equal_each_position_alone() {
    let mut r = load("tiny-llama", 0, Weights::Native);
    let p = &reference("tiny-llama")[3].ids;
    let all = r.score(p).expect("score");
    let other: Vec<u32> = (0..9u32).map(|k| k * 37 % 320).collect();
    let other_alone = r.score(&other).expect("score other");
    let (ta, tb) = (alloc(&r, other.len()), alloc(&r, p.len()));
    let batch = ForwardBatch {
        seqs: vec![
            ForwardSeq { tokens: &other, start: 0, blocks: &ta, adapter: None },
            ForwardSeq { tokens: p, start: 0, blocks: &tb, adapter: None },
        ],
    };
    let k = 4.min(p.len());
    let tails = r.forward_tails(&batch, &[1, k]).expect("forward_tails");
    assert_eq!(tails.rows(), 1 + k);
    assert!(bits(tails.row(0)) == bits(other_alone.row(other.len() - 1)), "the plain row differs");
    for j in 0..k {
        let t = p.len() - k + j;
        assert!(bits(tails.row(1 + j)) == bits(all.row(t)), "tail row {j} (position {t}) differs");
    }
    for bad in [[1, 0], [1, p.len() + 1]] {
        let err = r.forward_tails(&batch, &bad).err().map(|e| e.to_string());
        assert!(err.as_deref().is_some_and(|e| e.contains("logit rows")), "{bad:?}: {err:?}");
    }
    assert!(r.forward_tails(&batch, &[1]).is_err(), "one tail for two sequences");
    release(&r, &ta);
    release(&r, &tb);
}
