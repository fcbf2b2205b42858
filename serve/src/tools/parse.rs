//! Reading a model's output back as calls (tools.rs has the formats): complete or not
//! yet, so that a stream can send what is certain and hold back what may still change.

use serde_json::Value;

use super::{Format, ToolChoice, CALL};

/// One call read back from the output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedCall {
    /// The function.
    pub name: String,
    /// The arguments' JSON text so far (all of it once `done`).
    pub arguments: String,
    /// The call's text is complete.
    pub done: bool,
}

/// What an output (complete or not yet) says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parsed {
    /// Text for `content` (free text before the calls, or the generic format's reply).
    pub content: String,
    /// The calls whose name is known, in order.
    pub calls: Vec<ParsedCall>,
    /// The whole call section has been read (its closing text too).
    pub closed: bool,
}

/// How a literal matches at the start of `s`.
enum Lit {
    Full,
    /// `s` ends inside the literal.
    Partial,
    No,
}

fn starts(s: &str, lit: &str) -> Lit {
    if s.starts_with(lit) {
        Lit::Full
    } else if lit.starts_with(s) {
        Lit::Partial
    } else {
        Lit::No
    }
}

/// The length of the JSON value at the start of `s`, or `None` while it is unfinished.
fn json_len(s: &str) -> Option<usize> {
    let (mut depth, mut in_str, mut esc) = (0usize, false, false);
    for (i, b) in s.bytes().enumerate() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ if depth == 0 => return None, // the arguments are always an object
            _ => {}
        }
    }
    None
}

/// The decoded prefix of a JSON string body `s` (after its opening quote), up to the last
/// complete character or escape; and whether the closing quote was seen (its end).
fn json_string_prefix(s: &str) -> (String, Option<usize>) {
    let mut end = None;
    let mut esc = false;
    for (i, b) in s.bytes().enumerate() {
        match (esc, b) {
            (true, _) => esc = false,
            (false, b'\\') => esc = true,
            (false, b'"') => {
                end = Some(i);
                break;
            }
            _ => {}
        }
    }
    let body = &s[..end.unwrap_or(s.len())];
    // Drop an unfinished escape at the end (a lone `\`, or `\uXXXX` cut short) and retry.
    for cut in 0..=body.len().min(12) {
        let Some(part) = body.get(..body.len() - cut) else { continue };
        if let Ok(Value::String(t)) = serde_json::from_str(&format!("\"{part}\"")) {
            return (t, end);
        }
    }
    (String::new(), end)
}

/// Read `text` (the output so far; `done` once it is complete) in `format` under `choice`.
/// An output that is not a call section (the model answered in text) is all content; in
/// an unfinished output a suffix that may begin the trigger is held back from `content`.
pub fn parse_output(format: Format, choice: &ToolChoice, text: &str, done: bool) -> Parsed {
    let shape = format.shape();
    let plain = |content: &str| Parsed { content: content.to_string(), ..Parsed::default() };
    if *choice == ToolChoice::None {
        return plain(text);
    }
    let lazy = *choice == ToolChoice::Auto && format != Format::Generic;
    let start = if lazy {
        match text.find(shape.trigger) {
            Some(i) => i,
            None if done => return plain(text),
            None => {
                // Hold back the longest suffix that is a prefix of the trigger.
                let keep = (1..shape.trigger.len().min(text.len() + 1))
                    .rev()
                    .find(|&n| {
                        text.is_char_boundary(text.len() - n) && shape.trigger.starts_with(&text[text.len() - n..])
                    })
                    .unwrap_or(0);
                return plain(&text[..text.len() - keep]);
            }
        }
    } else {
        0
    };
    let mut out = Parsed { content: text[..start].to_string(), ..Parsed::default() };
    let mut s = &text[start..];
    if format == Format::Generic && *choice == ToolChoice::Auto {
        let reply = "{\"response\": \"";
        match starts(s, reply) {
            Lit::Full => {
                let (t, _) = json_string_prefix(&s[reply.len()..]);
                out.content = t;
                return out;
            }
            Lit::Partial => return out,
            Lit::No => {}
        }
    }
    let mut head = format!("{}{CALL}", shape.open);
    loop {
        match starts(s, &head) {
            Lit::Full => s = &s[head.len()..],
            Lit::Partial => return out,
            Lit::No => return plain(text),
        }
        let Some(q) = s.find('"') else { return out };
        let name = s[..q].to_string();
        let key = format!("\", \"{}\": ", shape.key);
        match starts(&s[q..], &key) {
            Lit::Full => s = &s[q + key.len()..],
            Lit::Partial => return out,
            Lit::No => return plain(text),
        }
        let Some(n) = json_len(s) else {
            out.calls.push(ParsedCall { name, arguments: s.to_string(), done: false });
            return out;
        };
        out.calls.push(ParsedCall { name, arguments: s[..n].to_string(), done: true });
        s = &s[n..];
        // What follows a call: the close, or (Hermes: the close then more) the next call.
        let close = format!("}}{}", shape.close);
        if s == close {
            out.closed = true;
            return out;
        }
        let Some(next) = shape.sep.map(|sep| format!("}}{sep}{CALL}")) else {
            out.closed = s.starts_with(&close);
            return out;
        };
        match starts(s, &next) {
            Lit::Full => head = next,
            Lit::Partial => return out,
            Lit::No => {
                out.closed = s.starts_with(&close);
                return out;
            }
        }
    }
}
