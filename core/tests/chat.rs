//! Chat templates rendered with minijinja equal transformers' own renderings
//! (tests/data/chat_templates.json, written by scripts/fixtures/smollm2/chat_templates.py).

use serde_json::Value;
use tl_core::{ChatTemplate, Message};

#[test]
fn chat_templates_render_as_hugging_face_does() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/chat_templates.json")).unwrap();
    let data: Value = serde_json::from_str(&text).unwrap();
    let tokens = vec![("bos_token".to_string(), "<s>".to_string()), ("eos_token".to_string(), "</s>".to_string())];
    let cases = data["cases"].as_array().unwrap();
    assert!(cases.len() >= 9);
    let mut errors = 0;
    for case in cases {
        let name = case["template"].as_str().unwrap();
        let tmpl = ChatTemplate::new(data["templates"][name].as_str().unwrap(), tokens.clone()).unwrap();
        let conv = case["conversation"].as_str().unwrap();
        let messages: Vec<Message> = data["conversations"][conv]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
            .collect();
        let got = tmpl.render(&messages, case["add_generation_prompt"].as_bool().unwrap());
        match (&case["text"], &case["error"]) {
            (Value::String(want), _) => assert_eq!(&got.unwrap(), want, "{name} / {conv}"),
            (_, Value::String(msg)) => {
                let e = got.unwrap_err().to_string();
                assert!(e.contains(msg.as_str()), "{name} / {conv}: {e}");
                errors += 1;
            }
            _ => panic!("case without text or error"),
        }
    }
    assert_eq!(errors, 1, "the raise_exception case");
}

#[test]
fn chat_template_syntax_errors_are_errors() {
    let e = ChatTemplate::new("{% for m in messages %}{{ m.content }}", Vec::new()).err().unwrap();
    assert!(e.to_string().contains("chat template"), "{e}");
}

/// Fuzz finding: a namespace stored in itself, then printed or passed to `tojson`,
/// recursed until the stack overflowed (the process aborted). Now an error naming it.
#[test]
fn a_namespace_that_holds_itself_is_an_error_not_a_stack_overflow() {
    use tl_core::{ChatTemplate, Message};
    let msgs = [Message::new("user", "hi")];
    for body in ["{{ ns.n }}", "{{ ns | tojson }}", "{{ [ns, ns] }}", "{% set ns.m = ns %}{{ ns.n }}"] {
        let src = format!("{{% set ns = namespace(n=0) %}}{{% set ns.n = ns %}}{body}");
        let t = ChatTemplate::new(&src, vec![]).expect("compiles");
        let e = t.render(&msgs, true).expect_err(&src).to_string();
        assert!(e.contains("namespace that holds itself"), "{src}: {e}");
    }
    // Ordinary nesting still prints.
    let t = ChatTemplate::new("{{ messages | tojson }}{{ [[1, [2]], {'a': [3]}] }}", vec![]).expect("compiles");
    assert!(t.render(&msgs, true).expect("renders").contains(r#""content": "hi""#));
}

/// Fuzz finding: minijinja-contrib's `str.count("")` never returns (its loop finds the
/// empty needle at the same place forever). It counts as Python does now.
#[test]
fn str_count_with_an_empty_needle_returns() {
    use tl_core::{ChatTemplate, Message};
    let t = ChatTemplate::new("{{ 'abc'.count('') }} {{ 'aaaa'.count('aa') }} {{ 'héé'.count('é') }}", vec![])
        .expect("compiles");
    assert_eq!(t.render(&[Message::new("user", "x")], false).expect("renders"), "4 2 2");
}
