//! `chat --session FILE`: a conversation saved after every turn and resumed by the next
//! `chat` with the same FILE, its KV included, so the resumed conversation is not
//! prefilled again.
//!
//! FILE is JSON (the messages, the token ids whose K/V are cached, the model's key) and
//! `FILE.kvb` the K/V itself, one KV envelope (docs/formats/kv-block.md) from
//! [`tl_core::Sequence::export`]. The JSON binds the two: the envelope's checksum and an
//! FNV-1a of the token ids, so a `.kvb` of another save, or edited ids, are refused. The
//! model key (`tl_engine::fingerprint` and the KV backend) refuses another model's KV
//! (a prefix of token ids says nothing of the weights). A refused KV is recomputed: the
//! messages are kept and the next turn prefills the whole conversation.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde_json::{json, Value};
use tl_core::{Message, Sequence};

/// What a session file gave back.
pub struct Resumed {
    /// The conversation so far.
    pub messages: Vec<Message>,
    /// The token ids and the envelope of their K/V, or why the KV was refused.
    pub kv: Result<(Vec<u32>, Vec<u8>), String>,
}

fn kv_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".kvb");
    PathBuf::from(p)
}

fn tokens_fnv(tokens: &[u32]) -> u64 {
    let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
    tl_core::fnv1a64(&bytes)
}

/// Write `path` in whole: a temporary file beside it, then a rename.
fn write_whole(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("{}", PathBuf::from(&tmp).display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("{}", path.display()))
}

/// Save the conversation and the K/V of `seq`. The `.kvb` goes first: a crash between
/// the two leaves the old JSON, whose checksum refuses the new `.kvb` (recomputed).
pub fn save(path: &Path, model: &str, messages: &[Message], seq: &Sequence) -> anyhow::Result<()> {
    let env = seq.export()?;
    let checksum = env.len().checked_sub(8).map_or(0, |n| u64::from_le_bytes(env[n..].try_into().unwrap_or([0; 8])));
    write_whole(&kv_path(path), &env)?;
    let doc = json!({
        "format": "tl-chat-session",
        "version": 1,
        "model": model,
        "messages": messages.iter().map(|m| json!({"role": m.role, "content": m.content})).collect::<Vec<_>>(),
        "tokens": seq.tokens(),
        "tokens_fnv": tokens_fnv(seq.tokens()),
        "kv_checksum": checksum,
    });
    write_whole(path, doc.to_string().as_bytes())
}

/// Read a session: `Ok(None)` when there is none yet; an error when FILE is not a
/// session at all (the conversation cannot be resumed).
pub fn load(path: &Path, model: &str) -> anyhow::Result<Option<Resumed>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("{}", path.display())),
    };
    let bad = |what: &str| anyhow::anyhow!("{}: not a chat session ({what})", path.display());
    let doc: Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
    if doc["format"] != "tl-chat-session" || doc["version"] != 1 {
        return Err(bad("format or version"));
    }
    let messages = doc["messages"]
        .as_array()
        .ok_or_else(|| bad("messages"))?
        .iter()
        .map(|m| match (m["role"].as_str(), m["content"].as_str()) {
            (Some(r), Some(c)) => Ok(Message::new(r, c)),
            _ => Err(bad("a message")),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(Some(Resumed { messages, kv: kv_of(path, &doc, model) }))
}

/// The tokens and envelope the JSON vouches for, or why not.
fn kv_of(path: &Path, doc: &Value, model: &str) -> Result<(Vec<u32>, Vec<u8>), String> {
    if doc["model"] != model {
        return Err(format!("saved by another model or KV backend ({})", doc["model"]));
    }
    let tokens: Vec<u32> = doc["tokens"]
        .as_array()
        .ok_or("no tokens")?
        .iter()
        .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()).ok_or("a token id"))
        .collect::<Result<_, _>>()?;
    if doc["tokens_fnv"].as_u64() != Some(tokens_fnv(&tokens)) {
        return Err("the token ids do not match their hash".into());
    }
    let env = std::fs::read(kv_path(path)).map_err(|e| format!("{}: {e}", kv_path(path).display()))?;
    let sum = env.len().checked_sub(8).map(|n| u64::from_le_bytes(env[n..].try_into().unwrap_or([0; 8])));
    if sum.is_none() || doc["kv_checksum"].as_u64() != sum {
        return Err("the .kvb file is not the one this session saved".into());
    }
    Ok((tokens, env))
}
