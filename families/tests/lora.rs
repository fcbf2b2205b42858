//! LoRA adapters (docs/spec/numbers.md, "Adapters") on the tiny fixtures of several
//! families: PEFT adapters made by peft equal transformers + peft float32
//! (families/tests/fixtures/lora, scripts/fixtures/make_lora_adapters.py), the GGUF
//! adapters llama.cpp's converter made of them give the PEFT numbers bit for bit, each row
//! keeps its bits whatever shares its step (other adapters, none, other scales), and bad
//! adapters are refused naming the file and the tensor or field.

use std::path::{Path, PathBuf};

use serde_json::Value;
use tl_core::{Activations, Adapter, Applied, ForwardBatch, ForwardSeq, ModelRunner, Weights};
use tl_families as _;
use tl_testkit::{alloc, argmax, bits, load_path, load_with, max_abs_diff, release, tolerance};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo").to_path_buf()
}

fn fixture(name: &str) -> PathBuf {
    repo().join("families/tests/fixtures/lora").join(name)
}

/// A prompt's ids, peft's last logits, greedy tokens and their margins.
type RefPrompt = (Vec<u32>, Vec<f32>, Vec<u32>, Vec<f64>);

struct Reference {
    base: PathBuf,
    prompts: Vec<RefPrompt>,
}

fn reference(name: &str) -> Reference {
    let text = std::fs::read_to_string(fixture(name).join("reference.json")).expect("reference.json");
    let json: Value = serde_json::from_str(&text).expect("JSON");
    let u32s = |v: &Value| v.as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect();
    let f64s =
        |v: &Value| v.as_array().expect("numbers").iter().map(|x| x.as_f64().expect("number")).collect::<Vec<_>>();
    let prompts = json["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| {
            let logits = f64s(&p["last_logits"]).into_iter().map(|x| x as f32).collect();
            (u32s(&p["ids"]), logits, u32s(&p["greedy"]["tokens"]), f64s(&p["greedy"]["margins"]))
        })
        .collect();
    Reference { base: repo().join(json["base"].as_str().expect("base")), prompts }
}

/// `tokens` as one sequence with `adapter`, in steps of `steps` tokens (the last takes the
/// rest); the last step's logits.
fn run(r: &mut ModelRunner, tokens: &[u32], adapter: Option<Applied<'_>>, steps: &[usize]) -> Vec<f32> {
    let blocks = alloc(r, tokens.len());
    let (mut start, mut sizes, mut last) = (0, steps.iter().copied(), Vec::new());
    while start < tokens.len() {
        let n = sizes.next().unwrap_or(tokens.len() - start).min(tokens.len() - start);
        let seq = ForwardSeq { tokens: &tokens[start..start + n], start, blocks: &blocks, adapter };
        last = r.forward(&ForwardBatch { seqs: vec![seq] }).expect("forward").data;
        start += n;
    }
    release(r, &blocks);
    last
}

fn greedy(r: &mut ModelRunner, prompt: &[u32], adapter: Applied<'_>, steps: usize) -> Vec<u32> {
    let blocks = alloc(r, prompt.len() + steps);
    let one = |r: &mut ModelRunner, tokens: &[u32], start| {
        let seq = ForwardSeq { tokens, start, blocks: &blocks, adapter: Some(adapter) };
        r.forward(&ForwardBatch { seqs: vec![seq] }).expect("forward").data
    };
    let mut logits = one(r, prompt, 0);
    let mut out = Vec::new();
    for k in 0..steps {
        out.push(argmax(&logits));
        if k + 1 < steps {
            logits = one(r, &out[k..k + 1], prompt.len() + k);
        }
    }
    release(r, &blocks);
    out
}

fn applied(a: &Adapter) -> Applied<'_> {
    Applied { adapter: a, scale: 1.0 }
}

#[test]
fn peft_adapters_equal_transformers_and_peft() {
    for name in ["llama-all", "llama-rs", "qwen2-all", "qwen3-odd"] {
        let refs = reference(name);
        let mut r = load_path(&refs.base, 2, Weights::Native);
        let adapter = r.load_adapter(name, &fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        for (ids, want, greedy_ref, margins) in &refs.prompts {
            let ours = run(&mut r, ids, Some(applied(&adapter)), &[]);
            let (diff, tol) = (max_abs_diff(&ours, want), tolerance(want));
            eprintln!("{name} {} tokens: max |ours - peft| = {diff:.3e} (tolerance {tol:.3e})", ids.len());
            assert!(diff <= tol, "{name}: max |ours - peft| = {diff} > {tol}");
            // The base model's numbers are not the adapter's: the adapter was applied.
            let base = run(&mut r, ids, None, &[]);
            assert!(max_abs_diff(&base, want) > 10.0 * tol, "{name}: the adapter changed nothing");
            let ours = greedy(&mut r, ids, applied(&adapter), greedy_ref.len());
            let same = ours.iter().zip(greedy_ref).take_while(|(a, b)| a == b).count();
            // Only a near tie may part the runs.
            assert!(same == ours.len() || margins[same] < tol as f64, "{name}: greedy parts at step {same}");
            assert!(same > 0, "{name}: the first greedy token differs");
        }
    }
}

#[test]
fn a_gguf_adapter_gives_the_peft_adapters_bits() {
    for name in ["llama-all", "qwen2-all"] {
        let refs = reference(name);
        let mut r = load_path(&refs.base, 2, Weights::Native);
        let peft = r.load_adapter("peft", &fixture(name)).expect("PEFT");
        let gguf = r.load_adapter("gguf", &fixture(name).join("adapter.gguf")).expect("GGUF");
        assert_eq!(peft.digest(), gguf.digest(), "{name}: the same numbers have one digest");
        for (ids, ..) in &refs.prompts {
            let a = run(&mut r, ids, Some(applied(&peft)), &[]);
            let b = run(&mut r, ids, Some(applied(&gguf)), &[]);
            assert_eq!(bits(&a), bits(&b), "{name}: GGUF adapter != PEFT adapter");
        }
    }
}

/// Each sequence's rows in a step of four adapters (two scales of one) and none: the bits
/// it has alone, prefilled in one step or in chunks, on 1 or 2 threads, and decoding.
#[test]
fn a_row_keeps_its_bits_beside_other_adapters() {
    rows_keep_their_bits(Activations::Exact);
}

/// The same with int8 activations (`--activations q8`): the base products take quantized
/// rows, the adapter's never do (numbers.md), and no row depends on the others.
#[test]
fn a_row_keeps_its_bits_beside_other_adapters_with_q8_activations() {
    rows_keep_their_bits(Activations::Q8);
}

fn rows_keep_their_bits(activations: Activations) {
    let refs = reference("llama-all");
    let mut r = load_with(&refs.base, 2, activations);
    let all = r.load_adapter("all", &fixture("llama-all")).expect("llama-all");
    let rs = r.load_adapter("rs", &fixture("llama-rs")).expect("llama-rs");
    let choices = [Some(applied(&all)), None, Some(applied(&rs)), Some(Applied { adapter: &all, scale: 0.5 })];
    let prompts: Vec<&[u32]> = refs.prompts.iter().map(|p| p.0.as_slice()).collect();
    let alone: Vec<Vec<f32>> = prompts.iter().zip(&choices).map(|(p, &a)| run(&mut r, p, a, &[])).collect();
    // The half scale is a different number: a test that would pass with the scale ignored fails here.
    assert_ne!(bits(&alone[0]), bits(&alone[3]), "scale 0.5 = scale 1");
    for (i, p) in prompts.iter().enumerate() {
        assert_eq!(bits(&run(&mut r, p, choices[i], &[1, 2, 3])), bits(&alone[i]), "prompt {i} chunked");
    }
    let mut one = load_with(&refs.base, 1, activations);
    let all1 = one.load_adapter("all", &fixture("llama-all")).expect("llama-all");
    assert_eq!(bits(&run(&mut one, prompts[0], Some(applied(&all1)), &[])), bits(&alone[0]), "1 thread");

    // All four in one step, then three decode steps together, against each alone.
    let tables: Vec<Vec<u32>> = prompts.iter().map(|p| alloc(&r, p.len() + 3)).collect();
    let seqs = prompts
        .iter()
        .zip(&tables)
        .zip(&choices)
        .map(|((p, b), &adapter)| ForwardSeq { tokens: p, start: 0, blocks: b, adapter })
        .collect();
    let together = r.forward(&ForwardBatch { seqs }).expect("together");
    let mut next: Vec<Vec<u32>> = Vec::new();
    for (i, want) in alone.iter().enumerate() {
        assert_eq!(bits(together.row(i)), bits(want), "prompt {i} in a mixed step");
        next.push(vec![argmax(want)]);
    }
    let mut decoded = vec![Vec::new(); prompts.len()];
    for step in 0..3 {
        let seqs = (0..prompts.len())
            .map(|i| ForwardSeq {
                tokens: &next[i],
                start: prompts[i].len() + step,
                blocks: &tables[i],
                adapter: choices[i],
            })
            .collect();
        let out = r.forward(&ForwardBatch { seqs }).expect("decode");
        for i in 0..prompts.len() {
            decoded[i].push(out.row(i).to_vec());
            next[i] = vec![argmax(out.row(i))];
        }
    }
    for t in &tables {
        release(&r, t);
    }
    for (i, p) in prompts.iter().enumerate() {
        let mut tokens = p.to_vec();
        for (k, row) in decoded[i].iter().enumerate() {
            tokens.push(if k == 0 { argmax(&alone[i]) } else { argmax(&decoded[i][k - 1]) });
            assert_eq!(bits(&run(&mut r, &tokens, choices[i], &[])), bits(row), "prompt {i} decode step {k}");
        }
    }
}

/// `dir`'s adapter with every A and B value rounded to `dtype` ("F16" or "BF16") and
/// written as `stored` ("F16", "BF16" or "F32": the rounded values widened), into `out`.
fn rounded_copy(dir: &Path, out: &Path, dtype: &str, stored: &str) {
    let st = std::fs::read(dir.join("adapter_model.safetensors")).expect("read");
    let file = safetensors::SafeTensors::deserialize(&st).expect("safetensors");
    let round = |x: f32| match dtype {
        "F16" => half::f16::from_f32(x).to_f32(),
        _ => half::bf16::from_f32(x).to_f32(),
    };
    let mut tensors = Vec::new();
    for (name, view) in file.tensors() {
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}: the fixture is F32");
        let vals = view.data().chunks_exact(4).map(|c| round(f32::from_le_bytes([c[0], c[1], c[2], c[3]])));
        let (dt, bytes): (_, Vec<u8>) = match stored {
            "F16" => (safetensors::Dtype::F16, vals.flat_map(|x| half::f16::from_f32(x).to_le_bytes()).collect()),
            "BF16" => (safetensors::Dtype::BF16, vals.flat_map(|x| half::bf16::from_f32(x).to_le_bytes()).collect()),
            _ => (safetensors::Dtype::F32, vals.flat_map(f32::to_le_bytes).collect()),
        };
        tensors.push((name, view.shape().to_vec(), dt, bytes));
    }
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, shape, dt, b)| {
            (n.clone(), safetensors::tensor::TensorView::new(*dt, shape.clone(), b).expect("view"))
        })
        .collect();
    std::fs::create_dir_all(out).expect("mkdir");
    safetensors::serialize_to_file(views, None, &out.join("adapter_model.safetensors")).expect("write");
    std::fs::copy(dir.join("adapter_config.json"), out.join("adapter_config.json")).expect("config");
}

/// An adapter stored in F16 (or BF16) is held as stored, half the bytes of the same
/// values stored in F32 (held in f32), and gives exactly their bits: the 2-byte and the
/// f32 products compute on the same values.
#[test]
fn an_f16_or_bf16_adapter_is_held_as_stored_with_the_f32_bits() {
    let refs = reference("llama-all");
    let mut r = load_path(&refs.base, 2, Weights::Native);
    let d = tempfile::tempdir().expect("tempdir");
    for dtype in ["F16", "BF16"] {
        let (narrow, wide) = (d.path().join(format!("{dtype}-as-{dtype}")), d.path().join(format!("{dtype}-as-F32")));
        rounded_copy(&fixture("llama-all"), &narrow, dtype, dtype);
        rounded_copy(&fixture("llama-all"), &wide, dtype, "F32");
        let a = r.load_adapter("narrow", &narrow).expect("narrow");
        let b = r.load_adapter("wide", &wide).expect("wide");
        assert_eq!(a.digest(), b.digest(), "{dtype}: the same values, one digest");
        assert!(a.bytes() * 2 <= b.bytes() + 64 * 1024, "{dtype}: {} bytes held vs F32's {}", a.bytes(), b.bytes());
        for (ids, ..) in &refs.prompts {
            let x = run(&mut r, ids, Some(applied(&a)), &[]);
            let y = run(&mut r, ids, Some(applied(&b)), &[3]);
            assert_eq!(bits(&x), bits(&y), "{dtype}: the 2-byte adapter's logits differ from its values in F32");
            let base = run(&mut r, ids, None, &[]);
            assert_ne!(bits(&x), bits(&base), "{dtype}: the adapter changed nothing");
        }
    }
}
