//! Render every `*.jinja` in a directory with every conversation of a golden file, for
//! scripts/check_chat_templates.sh (which compares the result with transformers').
//!
//! `render_chat_templates TEMPLATE_DIR GOLDEN_JSON OUT_JSON`: GOLDEN_JSON holds
//! `{"conversations": {name: [{"role", "content"}...]}, ...}`; OUT_JSON gets
//! `{template: {conversation: {"text": ...} | {"error": ...}}}` with the generation prompt on.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use tl_core::{ChatTemplate, Message};

fn main() {
    if let Err(e) = run() {
        eprintln!("render_chat_templates: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [dir, golden, out] = args.as_slice() else {
        return Err("usage: render_chat_templates TEMPLATE_DIR GOLDEN_JSON OUT_JSON".into());
    };
    let read = |p: &str| std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"));
    let golden: Value = serde_json::from_str(&read(golden)?).map_err(|e| format!("{golden}: {e}"))?;
    let Some(convs) = golden["conversations"].as_object() else { return Err(format!("{golden}: no conversations")) };
    let mut convs_parsed = BTreeMap::new();
    for (name, msgs) in convs {
        let msgs: Vec<Message> = msgs
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| Message::new(m["role"].as_str().unwrap_or_default(), m["content"].as_str().unwrap_or_default()))
            .collect();
        convs_parsed.insert(name.clone(), msgs);
    }
    let tokens = vec![("bos_token".to_string(), "<s>".to_string()), ("eos_token".to_string(), "</s>".to_string())];
    let mut result = BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))? {
        let path = entry.map_err(|e| format!("{dir}: {e}"))?.path();
        if path.extension().is_none_or(|e| e != "jinja") {
            continue;
        }
        let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let source = read(&path.to_string_lossy())?;
        let mut per_conv = BTreeMap::new();
        for (conv, msgs) in &convs_parsed {
            let r = ChatTemplate::new(&source, tokens.clone()).and_then(|t| t.render(msgs, true));
            per_conv.insert(conv.clone(), r.map_or_else(|e| json!({"error": e.to_string()}), |t| json!({"text": t})));
        }
        result.insert(name, per_conv);
    }
    let text = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("{out}: {e}"))
}
