//! Tokenize llama.cpp's vocabulary test cases with tl's GGUF tokenizer, for
//! scripts/check_gguf_vocabs.sh.
//!
//! `gguf_vocabs MODELS_DIR`: for every `ggml-vocab-NAME.gguf` with `.inp` (cases separated
//! by `\n__ggml_vocab_test__\n`) and `.out` (one line of ids per case, written by
//! llama.cpp's convert_hf_to_gguf_update.py from Hugging Face's
//! `tokenizer.encode(text, add_special_tokens=False)`), prints one line: how many cases
//! tl encodes to the same ids, or why it refuses the vocabulary. Exits 1 when a vocabulary
//! tl accepts encodes a case differently.

use std::path::Path;

use tl_core::{Gguf, Tokenizer};
use tl_examples as _;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: gguf_vocabs MODELS_DIR");
        std::process::exit(2);
    };
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            eprintln!("gguf_vocabs: {dir}: {e}");
            std::process::exit(2)
        })
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "gguf") && p.with_extension("gguf.out").is_file())
        .collect();
    names.sort();
    let mut failed = false;
    for path in names {
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        match check(&path) {
            Ok((same, total, first_diff)) => {
                println!(
                    "{name}: {same}/{total} identical{}",
                    first_diff.map(|d| format!("; first difference: {d}")).unwrap_or_default()
                );
                failed |= same != total;
            }
            Err(why) => println!("{name}: refused: {why}"),
        }
    }
    std::process::exit(i32::from(failed));
}

fn check(path: &Path) -> Result<(usize, usize, Option<String>), String> {
    let inp = std::fs::read_to_string(path.with_extension("gguf.inp")).map_err(|e| e.to_string())?;
    let out = std::fs::read_to_string(path.with_extension("gguf.out")).map_err(|e| e.to_string())?;
    let g = Gguf::open(path).map_err(|e| e.to_string())?;
    let tok = Tokenizer::from_gguf(&g).map_err(|e| e.to_string())?;
    let cases: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
    let want: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().filter_map(|t| t.parse().ok()).collect()).collect();
    let (mut same, mut first) = (0, None);
    for (case, want) in cases.iter().zip(&want) {
        let got = tok.encode(case).map_err(|e| e.to_string())?;
        if &got == want {
            same += 1;
        } else if first.is_none() {
            first = Some(format!("{case:?}: want {want:?}, got {got:?}"));
        }
    }
    Ok((same, cases.len().min(want.len()), first))
}
