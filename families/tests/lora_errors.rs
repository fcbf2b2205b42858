//! Bad LoRA adapters are refused with the file and the tensor or field named, never a
//! panic and never a wrong answer: wrong rank shapes, a missing half, NaN, a truncated
//! file, a module the model does not adapt, options tl does not run, and adapters made
//! for another base (another class, another GGUF architecture, other shapes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use tl_core::{ModelRunner, Weights};
use tl_families as _;
use tl_testkit::load_path;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo").to_path_buf()
}

fn llama() -> ModelRunner {
    load_path(&repo().join("arch-llama/tests/fixtures/tiny-llama"), 1, Weights::Native)
}

fn lora(name: &str) -> PathBuf {
    repo().join("families/tests/fixtures/lora").join(name)
}

/// A PEFT directory with llama-all's config (edited by `config`) and these tensors.
fn peft_dir(
    tensors: &BTreeMap<String, (Vec<usize>, Vec<f32>)>,
    config: impl Fn(&mut serde_json::Value),
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = std::fs::read_to_string(lora("llama-all").join("adapter_config.json")).expect("config");
    let mut json: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    config(&mut json);
    std::fs::write(dir.path().join("adapter_config.json"), json.to_string()).expect("write config");
    let bytes: BTreeMap<&String, Vec<u8>> =
        tensors.iter().map(|(k, (_, v))| (k, v.iter().flat_map(|x| x.to_le_bytes()).collect())).collect();
    let views: Vec<(&String, TensorView<'_>)> = tensors
        .iter()
        .map(|(k, (shape, _))| (k, TensorView::new(Dtype::F32, shape.clone(), &bytes[k]).expect("view")))
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("adapter_model.safetensors")).expect("write");
    dir
}

const Q: &str = "base_model.model.model.layers.0.self_attn.q_proj";

fn pair(module: &str, r: usize, inp: usize, out: usize, b_rank: usize) -> BTreeMap<String, (Vec<usize>, Vec<f32>)> {
    let mut t = BTreeMap::new();
    t.insert(format!("{module}.lora_A.weight"), (vec![r, inp], vec![0.01; r * inp]));
    t.insert(format!("{module}.lora_B.weight"), (vec![out, b_rank], vec![0.01; out * b_rank]));
    t
}

/// The error of loading `path` onto `r`, which must name every one of `names`.
fn refused(r: &ModelRunner, path: &Path, names: &[&str]) {
    let e = r.load_adapter("bad", path).expect_err("refused").to_string();
    eprintln!("{e}");
    for n in names {
        assert!(e.contains(n), "{e:?} does not name {n:?}");
    }
}

#[test]
fn bad_peft_tensors_are_refused_naming_them() {
    let r = llama();
    let keep = |_: &mut serde_json::Value| {};
    // A good pair first, so the refusals below are about what each case changes.
    let good = peft_dir(&pair(Q, 4, 64, 64, 4), keep);
    r.load_adapter("good", good.path()).expect("a well-formed adapter loads");

    let d = peft_dir(&pair(Q, 4, 64, 64, 2), keep);
    refused(&r, d.path(), &["adapter_model.safetensors", &format!("{Q}.lora_B.weight"), "[64, 2]"]);

    let mut t = pair(Q, 4, 64, 64, 4);
    t.remove(&format!("{Q}.lora_B.weight"));
    let d = peft_dir(&t, keep);
    refused(&r, d.path(), &[&format!("{Q}.lora_A.weight"), "lora_B half is missing"]);

    let mut t = pair(Q, 4, 64, 64, 4);
    t.get_mut(&format!("{Q}.lora_A.weight")).expect("A").1[7] = f32::NAN;
    let d = peft_dir(&t, keep);
    refused(&r, d.path(), &[&format!("{Q}.lora_A.weight"), "NaN"]);

    // The LM head is not adapted (nor the embeddings, norms, or a mixture's experts).
    let d = peft_dir(&pair("base_model.model.lm_head", 4, 64, 320, 4), keep);
    refused(&r, d.path(), &["base_model.model.lm_head.lora_A.weight", "not one this model adapts"]);

    let mut t = pair(Q, 4, 64, 64, 4);
    t.insert("base_model.model.model.embed_tokens.weight".into(), (vec![2, 2], vec![0.0; 4]));
    let d = peft_dir(&t, keep);
    refused(&r, d.path(), &["base_model.model.model.embed_tokens.weight", "not a lora_A or lora_B"]);

    // A truncated file: the header promises more bytes than there are.
    let d = peft_dir(&pair(Q, 4, 64, 64, 4), keep);
    let file = d.path().join("adapter_model.safetensors");
    let bytes = std::fs::read(&file).expect("read");
    std::fs::write(&file, &bytes[..bytes.len() - 100]).expect("truncate");
    refused(&r, d.path(), &["adapter_model.safetensors"]);

    let d = tempfile::tempdir().expect("tempdir");
    std::fs::copy(lora("llama-all").join("adapter_config.json"), d.path().join("adapter_config.json")).expect("copy");
    refused(&r, d.path(), &["adapter_model.safetensors", "missing"]);
}

#[test]
fn options_tl_does_not_run_are_refused_naming_the_field() {
    let r = llama();
    for (field, value) in [
        ("use_dora", serde_json::json!(true)),
        ("modules_to_save", serde_json::json!(["lm_head"])),
        ("bias", serde_json::json!("all")),
        ("peft_type", serde_json::json!("IA3")),
        ("lora_alpha", serde_json::json!("sixteen")),
    ] {
        let d = peft_dir(&pair(Q, 4, 64, 64, 4), |j| j[field] = value.clone());
        refused(&r, d.path(), &["adapter_config.json", field]);
    }
}

#[test]
fn an_adapter_for_another_base_is_refused() {
    let r = llama();
    // Qwen2's tiny fixture has Llama's shapes: only the recorded class tells them apart.
    refused(&r, &lora("qwen2-all"), &["auto_mapping.base_model_class", "Qwen2ForCausalLM", "LlamaForCausalLM"]);
    refused(&r, &lora("qwen2-all").join("adapter.gguf"), &["adapter.gguf", "general.architecture", "qwen2"]);
    // Shapes of another base (Qwen3's heads are 32 wide: q_proj is 128 x 64), no class recorded.
    let qwen3 = load_path(&repo().join("arch-qwen3/tests/fixtures/tiny-qwen3"), 1, Weights::Native);
    let d = peft_dir(&pair(Q, 4, 64, 64, 4), |j| {
        j.as_object_mut().expect("object").remove("auto_mapping");
    });
    refused(&qwen3, d.path(), &[&format!("{Q}.lora_B.weight"), "[128, 4]"]);
    // A model file is not an adapter.
    refused(&r, &repo().join("arch-llama/tests/fixtures/tiny-llama3/model.gguf"), &["general.type"]);
}
