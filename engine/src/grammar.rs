//! Constrained decoding with llguidance: the token trie built from tl's own tokenizer, a
//! grammar compiled once per request at admission, and one matcher per sequence that gives
//! sampling.md's step-3a allowed set at every position.
//!
//! The trie is built from the bytes each id decodes to (special tokens as 0xFF + their
//! name, llguidance's convention), not through `toktrie_hf_tokenizers`, which pins an
//! older `tokenizers`. The parser factory is built on the first constrained request, so a
//! server that never sees one pays nothing.

use std::sync::{Arc, OnceLock};

use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use tl_core::Tokenizer;

use crate::error::EngineError;

/// What a constrained request's output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// A JSON schema (Draft 2020-12, as llguidance reads it). Unless the schema's own
    /// `"x-guidance"` says otherwise, whitespace is fixed (`", "` between items, `": "`
    /// after keys, none elsewhere), so a model cannot run away in whitespace.
    JsonSchema(Value),
    /// A grammar in llguidance's Lark dialect.
    Lark(String),
    /// A regular expression the whole output must match.
    Regex(String),
}

/// A grammar and the request field it came from (named in every error).
#[derive(Clone, Debug, PartialEq)]
pub struct Grammar {
    /// The grammar.
    pub spec: GrammarSpec,
    /// The request field to blame (`"response_format"`, `"tools"`, ...).
    pub field: &'static str,
}

/// What [`GrammarCompiler::allows`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// Some token of the text is not allowed where it stands.
    Refused,
    /// Every token is allowed, and more must follow.
    Prefix,
    /// Every token is allowed, and the output may end here.
    Complete,
}

/// Bounds on one grammar: llguidance's defaults, with a smaller grammar size (a request
/// body is at most a few megabytes anyway) so compilation stays in the milliseconds.
fn limits() -> ParserLimits {
    ParserLimits { max_grammar_size: 200_000, ..ParserLimits::default() }
}

/// tl's tokenizer as llguidance's tokenizer environment.
struct TlTokEnv {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for TlTokEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s).ok().and_then(|t| self.tok.encode(t).ok()) {
            Some(ids) => ids,
            None => self.trie.greedy_tokenize(s),
        }
    }
}

/// The bytes of every id of `tok` below `vocab` (llguidance's trie layout): what the id
/// decodes to, or 0xFF + its name for a special token (one the text never contains).
pub fn token_bytes(tok: &Tokenizer, vocab: usize) -> Vec<Vec<u8>> {
    (0..vocab as u32)
        .map(|id| {
            let bytes = tok.decode_bytes(&[id]).unwrap_or_default();
            if tok.is_special(id) || bytes.is_empty() {
                let name = match tok {
                    Tokenizer::Hf(t) => t.inner().id_to_token(id),
                    Tokenizer::Byte => None,
                };
                let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                marked.extend_from_slice(name.unwrap_or_else(|| format!("<[{id}]>")).as_bytes());
                marked
            } else {
                bytes
            }
        })
        .collect()
}

/// The tokenizer's own vocabulary size (the model's logits row may be longer: padding ids
/// past it are never allowed).
fn tokenizer_vocab(tok: &Tokenizer, model_vocab: usize) -> usize {
    match tok {
        Tokenizer::Byte => model_vocab,
        Tokenizer::Hf(t) => t.inner().get_vocab_size(true).min(model_vocab),
    }
}

/// The grammar compiler of one model (llguidance's parser factory over the model's token
/// trie, built on first use). The engine holds one; the fuzz target drives one directly.
pub struct GrammarCompiler {
    tok: Arc<Tokenizer>,
    vocab: usize,
    eos: Option<u32>,
    factory: OnceLock<Result<Arc<ParserFactory>, String>>,
}

impl GrammarCompiler {
    /// A compiler for `tok`'s vocabulary (at most `model_vocab` ids), ending constrained
    /// outputs with `eos`.
    pub fn new(tok: Arc<Tokenizer>, model_vocab: usize, eos: Option<u32>) -> GrammarCompiler {
        let vocab = tokenizer_vocab(&tok, model_vocab);
        GrammarCompiler { tok, vocab, eos, factory: OnceLock::new() }
    }

    /// Compile `g` and walk it for up to `steps` tokens, each time taking the lowest
    /// allowed id (what the fuzz target checks: no panic, no hang, errors as `Err`).
    /// Returns how many tokens the walk consumed before the grammar stopped.
    pub fn check(&self, g: &Grammar, steps: usize) -> Result<usize, EngineError> {
        let mut m = self.compile(g, 1)?.pop().ok_or_else(|| EngineError::Internal("no matcher".into()))?;
        let bad = |e: String| EngineError::BadRequest { field: g.field, reason: format!("grammar: {e}") };
        for k in 0..steps {
            if m.is_stopped() {
                return Ok(k);
            }
            let mask = m.compute_mask().map_err(|e| bad(e.to_string()))?;
            let Some(id) = mask.first_bit_set() else { return Ok(k) };
            m.consume_token(id as u32).map_err(|e| bad(e.to_string()))?;
        }
        Ok(steps)
    }

    /// How `text` (tokenized as a prompt is) fares under `g`: what tests of a grammar
    /// check without a model.
    pub fn allows(&self, g: &Grammar, text: &str) -> Result<Allowed, EngineError> {
        let mut m = self.compile(g, 1)?.pop().ok_or_else(|| EngineError::Internal("no matcher".into()))?;
        let ids =
            self.tok.encode(text).map_err(|e| EngineError::BadRequest { field: g.field, reason: e.to_string() })?;
        let bad = |e: String| EngineError::BadRequest { field: g.field, reason: format!("grammar: {e}") };
        let n = m.validate_tokens(&ids).map_err(|e| bad(e.to_string()))?;
        if n < ids.len() {
            return Ok(Allowed::Refused);
        }
        m.consume_tokens(&ids).map_err(|e| bad(e.to_string()))?;
        Ok(if m.is_accepting().map_err(|e| bad(e.to_string()))? { Allowed::Complete } else { Allowed::Prefix })
    }

    fn factory(&self) -> Result<&Arc<ParserFactory>, EngineError> {
        let built = self.factory.get_or_init(|| {
            let eos = self.eos.ok_or("the model has no end-of-sequence token to end a constrained output")?;
            let bytes = token_bytes(&self.tok, self.vocab);
            let trie = TokTrie::from(&TokRxInfo::new(self.vocab as u32, eos), &bytes);
            let env: TokEnv = Arc::new(TlTokEnv { trie, tok: Arc::clone(&self.tok) });
            let mut f = ParserFactory::new_simple(&env).map_err(|e| format!("llguidance: {e}"))?;
            f.quiet();
            *f.limits_mut() = limits();
            Ok(Arc::new(f))
        });
        built.as_ref().map_err(|e| EngineError::Internal(e.clone()))
    }

    /// Compile `g` into `n` independent matchers (one per choice): a bad grammar is a
    /// [`EngineError::BadRequest`] on `g.field` with llguidance's message.
    pub(crate) fn compile(&self, g: &Grammar, n: usize) -> Result<Vec<Matcher>, EngineError> {
        let factory = self.factory()?;
        let bad = |reason: String| EngineError::BadRequest { field: g.field, reason };
        let top = match &g.spec {
            GrammarSpec::JsonSchema(schema) => TopLevelGrammar::from_json_schema(fixed_whitespace(schema)),
            GrammarSpec::Lark(s) => TopLevelGrammar::from_lark(s.clone()),
            GrammarSpec::Regex(r) => TopLevelGrammar::from_regex(r),
        };
        // llguidance catches its own panics inside the matcher; the compile is guarded too,
        // so no input can take the engine down.
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| factory.create_parser(top)))
            .map_err(|_| bad("the grammar compiler failed on this input".into()))?
            .map_err(|e| bad(format!("invalid grammar: {e}")))?;
        let first = Matcher::new(Ok(parser));
        if let Some(e) = first.get_error() {
            return Err(bad(format!("invalid grammar: {e}")));
        }
        let mut out = Vec::with_capacity(n);
        for _ in 1..n {
            out.push(first.deep_clone());
        }
        out.push(first);
        Ok(out)
    }
}

/// The schema with llguidance's whitespace options set to fixed separators, unless the
/// schema sets `"x-guidance"` itself (a non-object schema, `true` say, is left alone).
fn fixed_whitespace(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Some(obj) = s.as_object_mut() {
        obj.entry("x-guidance").or_insert_with(
            || serde_json::json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "}),
        );
    }
    s
}
