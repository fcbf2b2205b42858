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
    assert!(cases.len() >= 11);
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

/// Fuzz finding: a namespace stored in itself, then printed, compared, concatenated or
/// passed to `tojson`, recursed inside minijinja until the stack overflowed (the process
/// aborted). A template that could build such a cycle is refused when it is loaded, with
/// the line of the statement.
#[test]
fn a_template_that_could_store_a_namespace_in_a_namespace_is_refused_at_load() {
    let refused = [
        ("{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns ~ '' }}", 1),
        ("{% set ns = namespace() %}\n{% set ns.l = [1, ns] %}{{ ns == ns }}", 2),
        ("{% set a = namespace() %}{% set b = namespace() %}{% set a.x = b %}{% set b.x = a %}{{ a|string }}", 1),
        // Through an alias, a loop, a filter, a conditional, `or`, a map, a call.
        ("{% set ns = namespace() %}{% set al = ns %}{% set ns.x = al %}", 1),
        ("{% set ns = namespace() %}{% for x in [ns] %}{% set ns.x = x %}{% endfor %}", 1),
        ("{% set ns = namespace() %}{% set ns.x = [ns]|first %}", 1),
        ("{% set ns = namespace() %}{% set ns.x = ns if true else 1 %}", 1),
        ("{% set ns = namespace() %}{% set ns.x = false or ns %}", 1),
        ("{% set ns = namespace() %}{% set ns.x = {'k': ns}['k'] %}", 1),
        ("{% set ns = namespace() %}{% set ns.x = dict(a=ns).a %}", 1),
        ("{% set ns = namespace() %}{% for m in [ns] %}{% set ns.x = loop.previtem %}{% endfor %}", 1),
        // A namespace built around another, a macro parameter, a later rebinding.
        ("{% set a = namespace() %}{% set b = namespace(x=a) %}{% set a.y = b.x %}", 1),
        ("{% macro m(v) %}{% set g.x = v %}{% endmacro %}{% set g = namespace() %}{{ m(g) }}", 1),
        ("{% set ns = namespace() %}{% set ns.x = y %}{% set y = ns %}", 1),
        ("{% set f = namespace %}{% set ns = f() %}{% set ns.x = ns %}", 1),
        ("{% macro m(l) %}{% set g.x = l[0] %}{% endmacro %}{% set g = namespace() %}{{ m([g]) }}", 1),
        ("{% macro m() %}{% endmacro %}{% set ns = namespace() %}{% set ns.m = m %}", 1),
        // With `namespace` shadowed (here by a parameter), `namespace()` could be anything.
        ("{% macro m(namespace) %}{% endmacro %}{% set ns = namespace() %}{% set ns.x = ns.y %}", 1),
        ("{% import 'chat' as me %}{% set ns = namespace() %}{% set ns.x = me %}", 1),
    ];
    for (src, line) in refused {
        let e = ChatTemplate::new(src, vec![]).err().unwrap_or_else(|| panic!("accepted: {src}")).to_string();
        assert!(e.contains(&format!("line {line}:")) && e.contains("namespace"), "{src}: {e}");
    }
    // What real templates do with namespaces: counters, flags, strings, lists of messages.
    let accepted = [
        "{% set ns = namespace(n=0, sys='', found=false) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}\
         {% if m.role == 'system' %}{% set ns.sys = ns.sys + m.content %}{% set ns.found = true %}{% endif %}\
         {% endfor %}{{ ns.n }}{{ ns.sys }}{{ ns.found }}",
        "{% set ns = namespace(last=messages|length - 1, multi=true) %}{% for m in messages[::-1] %}\
         {% set index = (messages|length - 1) - loop.index0 %}{% if ns.multi and m.role == 'user' %}\
         {% set ns.multi = false %}{% set ns.last = index %}{% endif %}{% endfor %}{{ ns.last }}",
        "{% set ns = namespace(msgs=[]) %}{% for m in messages %}{% set ns.msgs = ns.msgs + [m] %}{% endfor %}\
         {{ ns.msgs | tojson }}",
        "{% macro fmt(m) %}<{{ m.role }}>{{ m.content }}{% endmacro %}{% set ns = namespace(text='') %}\
         {% for m in messages %}{% set ns.text = ns.text ~ fmt(m) %}{% endfor %}{{ ns.text }}",
        "{% set a = namespace(x=1) %}{% set b = namespace(y=a.x) %}{% set a.x = b.y + 1 %}{{ a.x }}",
        // A namespace handed to a macro that updates it; a parameter named `namespace`.
        "{% macro next(state) %}{% set state.i = state.i + 1 %}{{ state.i }}{% endmacro %}\
         {% set st = namespace(i=0) %}{% for m in messages %}{{ next(st) }}{% endfor %}",
        "{% macro schema(fns, namespace='functions') %}namespace {{ namespace }}{% endmacro %}{{ schema([]) }}",
    ];
    let msgs = [Message::new("system", "s"), Message::new("user", "hi")];
    for src in accepted {
        let t = ChatTemplate::new(src, vec![]).unwrap_or_else(|e| panic!("refused: {src}: {e}"));
        t.render(&msgs, true).unwrap_or_else(|e| panic!("{src}: {e}"));
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

/// transformers' `strftime_now(format)`: today's date in the format (Llama 3.2 prints it);
/// an unknown `%` code is an error, not a panic.
#[test]
fn strftime_now_formats_today_and_refuses_bad_formats() {
    let msgs = [Message::new("user", "x")];
    let t = ChatTemplate::new("{{ strftime_now('%Y-%m-%d|%d %b %Y') }}", vec![]).expect("compiles");
    let out = t.render(&msgs, false).expect("renders");
    let (iso, human) = out.split_once('|').expect("two dates");
    let parts: Vec<&str> = iso.split('-').collect();
    assert!(parts.len() == 3 && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit())), "{out}");
    let year: u32 = parts[0].parse().expect("year");
    assert!((2024..3000).contains(&year), "{out}");
    assert!(human.ends_with(parts[0]) && human.starts_with(parts[2]), "{out}");
    let bad = ChatTemplate::new("{{ strftime_now('%Q%') }}", vec![]).expect("compiles");
    let e = bad.render(&msgs, false).expect_err("bad format").to_string();
    assert!(e.contains("strftime_now"), "{e}");
}
