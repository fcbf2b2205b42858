//! Reasoning: a thinking model's `<think>…</think>` text returned apart from its answer,
//! as `reasoning_content` (llama-server's `--reasoning-format deepseek`, vLLM's reasoning
//! parsers), and counted as `reasoning_tokens`.
//!
//! The split applies only to a chat answer whose template thinks (its source mentions
//! `<think>`, as Qwen3's and DeepSeek-R1's do) or whose rendered prompt ends inside an
//! opened `<think>` (a template that forces thinking on). Every other answer, and every
//! answer under `--reasoning-format none`, is the model's text unchanged, so this changes
//! nothing for models that do not think. The split only moves text between two fields:
//! the tokens, and so the seeded determinism promise, are the engine's as before.

use std::str::FromStr;

/// The tag that opens a model's thinking.
pub const OPEN: &str = "<think>";
/// The tag that closes it.
pub const CLOSE: &str = "</think>";

/// How a thinking model's reasoning is returned (`--reasoning-format`, llama-server's
/// names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReasoningFormat {
    /// Left in the answer's `content`, tags and all.
    None,
    /// Split into `reasoning_content`; `content` is the answer after `</think>`.
    #[default]
    Deepseek,
}

impl FromStr for ReasoningFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<ReasoningFormat, String> {
        match s {
            "none" => Ok(ReasoningFormat::None),
            "deepseek" => Ok(ReasoningFormat::Deepseek),
            _ => Err(format!("reasoning-format: {s:?} is not none or deepseek")),
        }
    }
}

/// Whether a chat answer is split: the format asks for it and the template thinks or
/// the prompt opened the thinking. `Some(open)`: split, starting inside the thinking
/// when `open`.
pub fn applies(format: ReasoningFormat, template_source: &str, prompt_tail: &str) -> Option<bool> {
    if format == ReasoningFormat::None {
        return None;
    }
    let open = prompt_tail.trim_end().ends_with(OPEN);
    (open || template_source.contains(OPEN)).then_some(open)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace yet: the answer may still open with `<think>`.
    Start,
    /// Inside the thinking.
    Thinking,
    /// After `</think>`, before the answer's first non-whitespace (dropped, as
    /// llama-server does).
    Closed,
    /// The answer.
    Answer,
}

/// One choice's split, fed its text as it is released (token by token, so a tag may
/// arrive in pieces: a piece that may begin a tag is held back until it cannot).
#[derive(Clone, Debug)]
pub struct Split {
    state: State,
    /// Held text: whitespace and a possible `<think>` at the start, or a possible
    /// `</think>` at the end of the thinking.
    held: String,
    /// Tokens fed while thinking (the closing tag's included).
    reasoning_tokens: usize,
    /// Tokens fed at the start before it was known whether they think.
    start_tokens: usize,
}

/// Text released by one [`Split::push`]: the reasoning's part and the answer's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    /// Reasoning text.
    pub reasoning: String,
    /// Answer text.
    pub content: String,
}

/// The longest suffix of `text` that is a proper prefix of `tag` (a tag that may be
/// arriving in pieces), as a byte index into `text`.
fn partial_tag_at(text: &str, tag: &str) -> usize {
    (1..tag.len().min(text.len() + 1))
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && tag.starts_with(&text[text.len() - n..]))
        .map_or(text.len(), |n| text.len() - n)
}

impl Split {
    /// A split that starts inside the thinking when `open` (the prompt opened it).
    pub fn new(open: bool) -> Split {
        let state = if open { State::Thinking } else { State::Start };
        Split { state, held: String::new(), reasoning_tokens: 0, start_tokens: 0 }
    }

    /// Tokens that were part of the thinking.
    pub fn reasoning_tokens(&self) -> usize {
        self.reasoning_tokens
    }

    /// Feed one token's released text (possibly empty); returns what can be released.
    pub fn push(&mut self, text: &str) -> Parts {
        let mut out = Parts::default();
        let before = self.state;
        if before == State::Start {
            self.start_tokens += 1;
        }
        self.held.push_str(text);
        self.advance(&mut out);
        // A token counts when it was fed inside the thinking, or when it opened it.
        let opened = before == State::Start && matches!(self.state, State::Thinking | State::Closed);
        if before == State::Thinking || opened {
            self.reasoning_tokens += 1;
        }
        out
    }

    /// The end of the answer, with the text released at the end (not a token's): release
    /// it and whatever is held.
    pub fn end(&mut self, text: &str) -> Parts {
        let mut out = Parts::default();
        self.held.push_str(text);
        self.advance(&mut out);
        let rest = self.finish();
        out.reasoning.push_str(&rest.reasoning);
        out.content.push_str(&rest.content);
        out
    }

    /// Release whatever is held (the answer ended).
    pub fn finish(&mut self) -> Parts {
        let mut out = Parts::default();
        let held = std::mem::take(&mut self.held);
        match self.state {
            State::Thinking => out.reasoning = held,
            // Whitespace after `</think>` with no answer after it is dropped.
            State::Closed => {}
            State::Start | State::Answer => out.content = held,
        }
        out
    }

    fn advance(&mut self, out: &mut Parts) {
        loop {
            match self.state {
                State::Start => {
                    let t = self.held.trim_start();
                    if let Some(rest) = t.strip_prefix(OPEN) {
                        self.held = rest.to_string();
                        self.state = State::Thinking;
                        // The tokens before this one were its opening: they count as
                        // thinking (this one is counted by `push`).
                        self.reasoning_tokens += self.start_tokens.saturating_sub(1);
                        continue;
                    }
                    if OPEN.starts_with(t) {
                        return; // whitespace or a piece of `<think>`: wait
                    }
                    self.state = State::Answer;
                }
                State::Thinking => match self.held.find(CLOSE) {
                    Some(at) => {
                        out.reasoning.push_str(&self.held[..at]);
                        self.held = self.held[at + CLOSE.len()..].to_string();
                        self.state = State::Closed;
                    }
                    None => {
                        let keep = partial_tag_at(&self.held, CLOSE);
                        out.reasoning.push_str(&self.held[..keep]);
                        self.held = self.held[keep..].to_string();
                        return;
                    }
                },
                State::Closed => {
                    let t = self.held.trim_start();
                    if t.is_empty() {
                        self.held.clear();
                        return;
                    }
                    self.held = t.to_string();
                    self.state = State::Answer;
                }
                State::Answer => {
                    out.content.push_str(&self.held);
                    self.held.clear();
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `pieces` one token each; the whole reasoning, content and reasoning tokens.
    fn run(open: bool, pieces: &[&str]) -> (String, String, usize) {
        let mut s = Split::new(open);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let o = s.push(p);
            r.push_str(&o.reasoning);
            c.push_str(&o.content);
        }
        let o = s.finish();
        r.push_str(&o.reasoning);
        c.push_str(&o.content);
        (r, c, s.reasoning_tokens())
    }

    #[test]
    fn thinking_then_answer_splits_whatever_the_token_boundaries() {
        let text = "<think>\nLet me see.\n</think>\n\nThe answer is 4.";
        let want = ("\nLet me see.\n".to_string(), "The answer is 4.".to_string());
        // Whole, byte by byte, and in threes: the same split.
        let (r, c, _) = run(false, &[text]);
        assert_eq!((r, c), want);
        let bytes: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = bytes.iter().map(String::as_str).collect();
        let (r, c, n) = run(false, &pieces);
        assert_eq!((r, c), want);
        // Every character up to and including `</think>`'s last is a thinking token.
        assert_eq!(n, text.find(CLOSE).unwrap() + CLOSE.len());
        let threes: Vec<String> = text.as_bytes().chunks(3).map(|c| String::from_utf8_lossy(c).into()).collect();
        let pieces: Vec<&str> = threes.iter().map(String::as_str).collect();
        assert_eq!(run(false, &pieces).0, want.0);
    }

    #[test]
    fn an_answer_that_does_not_think_is_unchanged() {
        assert_eq!(run(false, &["  Hello", " <think> world"]), (String::new(), "  Hello <think> world".into(), 0));
        assert_eq!(run(false, &["<thi", "s is not a tag"]), (String::new(), "<this is not a tag".into(), 0));
        assert_eq!(run(false, &[" ", "\n"]), (String::new(), " \n".into(), 0));
    }

    #[test]
    fn a_prompt_that_opened_the_thinking_starts_inside_it() {
        assert_eq!(run(true, &["hmm", "</th", "ink>", "ok"]), ("hmm".into(), "ok".into(), 3));
        // Unfinished thinking (max_tokens): all reasoning, held tag pieces included.
        assert_eq!(run(true, &["a", "</thi"]), ("a</thi".into(), String::new(), 2));
    }

    #[test]
    fn the_switch_and_the_rule_for_when_it_applies() {
        assert_eq!("none".parse(), Ok(ReasoningFormat::None));
        assert_eq!("deepseek".parse(), Ok(ReasoningFormat::Deepseek));
        assert!("auto".parse::<ReasoningFormat>().is_err());
        let qwen3 = "{% if enable_thinking %}<think>{% endif %}";
        assert_eq!(applies(ReasoningFormat::Deepseek, qwen3, "<|im_start|>assistant\n"), Some(false));
        assert_eq!(applies(ReasoningFormat::Deepseek, "chatml", "assistant\n<think>\n"), Some(true));
        assert_eq!(applies(ReasoningFormat::Deepseek, "chatml", "assistant\n"), None);
        assert_eq!(applies(ReasoningFormat::None, qwen3, "<think>\n"), None);
    }
}
