//! `verify --replay FILE`: rerun a saved `serve` request and compare its `choices`.
//!
//! The file is one JSON object, `{"request": <the request body>, "response": <serve's
//! JSON answer>}` (a non-streamed `/v1/chat/completions`, `/v1/completions` or
//! `/v1/messages` or `/v1/responses` answer with its `system_fingerprint`; a Messages
//! answer's content blocks and stop reason, a Responses answer's output items and status,
//! are compared as its one choice; a `/v1/embeddings` answer's vectors and a `/v1/rerank`
//! answer's results are compared as its choices, and need no seed: they sample nothing). The response's fingerprint must be this model's and build's:
//! only then does the promise hold (docs/serving.md), and a different one is an error, not
//! a difference. The request goes through serve's own router in process, so the bytes
//! compared are the ones serve would send.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use tower::ServiceExt;

use super::{Outcome, VerifyError};
use crate::options::Options;
use crate::state::AppState;

/// A replay file, checked.
#[derive(Debug)]
pub struct Replay {
    /// The request body.
    pub request: Value,
    /// The saved answer.
    pub response: Value,
    /// `/v1/chat/completions`, `/v1/completions`, `/v1/messages`, `/v1/responses`,
    /// `/v1/embeddings` or `/v1/rerank`.
    pub endpoint: &'static str,
    /// The saved answer's `system_fingerprint`.
    pub fingerprint: String,
}

/// What the rerun showed.
#[derive(Debug)]
pub struct Rerun {
    /// Identical (the `choices` bytes), where they first depart, or not exercised (a
    /// saved answer with no choices: nothing was compared).
    pub outcome: Outcome,
    /// Choices and tokens compared, for the report line.
    pub summary: String,
}

impl Replay {
    /// Read and check `path`.
    pub fn open(path: &Path) -> Result<Replay, VerifyError> {
        let bad = |reason: String| VerifyError::Replay { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read it: {e}")))?;
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
        let shape = "expected {\"request\": <request body>, \"response\": <serve's answer>}";
        let (Some(request), Some(response)) = (v.get("request"), v.get("response")) else {
            return Err(bad(format!("no \"request\" or \"response\" field; {shape}")));
        };
        if !request.is_object() || !response.is_object() {
            return Err(bad(format!("\"request\" and \"response\" must be objects; {shape}")));
        }
        if request.get("stream").and_then(Value::as_bool) == Some(true) {
            return Err(bad("the request streams; replay needs a non-streamed request and its JSON answer".into()));
        }
        // (A Responses answer has `"error": null`.)
        if let Some(e) = response.get("error").filter(|e| !e.is_null()) {
            return Err(bad(format!("the response is an error, nothing to reproduce: {e}")));
        }
        let fingerprint = response
            .get("system_fingerprint")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("the response has no \"system_fingerprint\"".into()))?
            .to_string();
        let message = response.get("type").and_then(Value::as_str) == Some("message");
        let responses = response.get("object").and_then(Value::as_str) == Some("response");
        if responses && !response.get("output").is_some_and(Value::is_array) {
            return Err(bad("the Responses response has no \"output\" list".into()));
        }
        // The chain lives in the server that answered (in memory): a fresh one has not got it.
        if responses && request.get("previous_response_id").is_some_and(|p| !p.is_null()) {
            return Err(bad("the request continues a stored response (previous_response_id): replay needs the whole \
                 conversation in its input"
                .into()));
        }
        let embeddings = response.get("object").and_then(Value::as_str) == Some("list");
        let rerank = response.get("results").is_some_and(Value::is_array);
        if embeddings && !response.get("data").is_some_and(Value::is_array) {
            return Err(bad("the embeddings response has no \"data\" list".into()));
        }
        if embeddings || rerank {
            let endpoint = if embeddings { "/v1/embeddings" } else { "/v1/rerank" };
            return Ok(Replay { request: request.clone(), response: response.clone(), endpoint, fingerprint });
        }
        if message && !response.get("content").is_some_and(Value::is_array) {
            return Err(bad("the Messages response has no \"content\" list".into()));
        }
        if !message && !responses && !response.get("choices").is_some_and(Value::is_array) {
            return Err(bad("the response has no \"choices\" list".into()));
        }
        if request.get("seed").and_then(Value::as_i64).is_none() {
            return Err(bad("the request has no integer \"seed\": an unseeded answer cannot be reproduced".into()));
        }
        let endpoint = match (response.get("object").and_then(Value::as_str), request.get("messages")) {
            _ if message => "/v1/messages",
            _ if responses => "/v1/responses",
            (Some("chat.completion"), _) | (None, Some(_)) => "/v1/chat/completions",
            (Some("text_completion"), _) | (None, None) => "/v1/completions",
            (Some(o), _) => return Err(bad(format!("the response's object {o:?} is not a completion"))),
        };
        Ok(Replay { request: request.clone(), response: response.clone(), endpoint, fingerprint })
    }

    /// Load the model with `opts` (the request's `model` name is taken from the file's
    /// answer), check the fingerprint, rerun the request, compare.
    pub fn run(&self, path: &Path, mut opts: Options) -> Result<Rerun, VerifyError> {
        opts.model_name = self.response.get("model").and_then(Value::as_str).map(String::from).or(opts.model_name);
        let model: PathBuf = opts.model.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| VerifyError::Request(format!("tokio runtime: {e}")))?;
        let answer = rt.block_on(async {
            let st =
                AppState::load(&opts).map_err(|e| VerifyError::Model { path: model.clone(), reason: e.to_string() })?;
            // The request's adapter (its `model` or `lora`, as serve resolves them) is part
            // of what the answer's fingerprint promises.
            let ask = crate::lora::LoraAsk {
                model: self.request.get("model").and_then(Value::as_str).map(String::from),
                lora: self.request.get("lora").cloned(),
            };
            let adapter = st.loras.resolve(&ask).map_err(VerifyError::from)?;
            let ours = tl_engine::adapted_fingerprint(&st.fingerprint, adapter.as_ref());
            if ours != self.fingerprint {
                return Err(VerifyError::Replay {
                    path: path.to_path_buf(),
                    reason: format!(
                        "saved with system_fingerprint {}, this model and build give {ours} (another model file, \
                         --weights mode, tl version, or adapter: `--lora` as serve ran): the answer is not \
                         promised to be reproducible",
                        self.fingerprint
                    ),
                });
            }
            let req = axum::http::Request::post(self.endpoint)
                .header("content-type", "application/json")
                .body(axum::body::Body::from(self.request.to_string()))
                .map_err(|e| VerifyError::Request(e.to_string()))?;
            let resp = crate::routes::router(Arc::clone(&st))
                .oneshot(req)
                .await
                .map_err(|e| VerifyError::Request(format!("serve: {e}")))?;
            let status = resp.status();
            let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
                .await
                .map_err(|e| VerifyError::Request(format!("serve's answer: {e}")))?;
            st.engine.shutdown(std::time::Duration::ZERO);
            let v: Value = serde_json::from_slice(&bytes).map_err(|e| VerifyError::Request(e.to_string()))?;
            if !status.is_success() {
                return Err(VerifyError::Request(format!("serve answered {status}: {}", v["error"]["message"])));
            }
            Ok(v)
        })?;
        Ok(compare(&choices(&self.response), &choices(&answer)))
    }
}

/// An answer's `choices`; a Messages answer's blocks and stop reason as its one choice
/// (its `id` is fresh on every answer, so it is left out; `text` is its text blocks, for
/// the report); a Responses answer's output items (their fresh `id`s left out) and status
/// likewise.
fn choices(answer: &Value) -> Value {
    // Embeddings: one choice per vector; rerank: one per result (the `id` is fresh).
    if answer.get("object").and_then(Value::as_str) == Some("list") {
        return answer["data"].clone();
    }
    if let Some(r) = answer.get("results") {
        return r.clone();
    }
    if answer.get("object").and_then(Value::as_str) == Some("response") {
        let mut items = answer["output"].as_array().cloned().unwrap_or_default();
        for i in &mut items {
            if let Some(o) = i.as_object_mut() {
                o.remove("id");
            }
        }
        let text: String = items
            .iter()
            .filter(|i| i["type"] == "message")
            .filter_map(|i| i["content"].as_array())
            .flatten()
            .filter_map(|p| p["text"].as_str())
            .collect();
        return serde_json::json!([{"output": items, "text": text, "finish_reason": answer["status"]}]);
    }
    if answer.get("type").and_then(Value::as_str) != Some("message") {
        return answer["choices"].clone();
    }
    let blocks = answer["content"].as_array().cloned().unwrap_or_default();
    let text: String = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
    serde_json::json!([{"content": blocks, "text": text, "finish_reason": answer["stop_reason"],
        "stop_sequence": answer["stop_sequence"]}])
}

/// Per token of one choice: (text, logprob, the whole entry), from either answer shape.
fn tokens(choice: &Value) -> Option<Vec<(String, Value, Value)>> {
    let lp = choice.get("logprobs").filter(|l| !l.is_null())?;
    if let Some(content) = lp.get("content").and_then(Value::as_array) {
        return Some(
            content
                .iter()
                .map(|e| (e["token"].as_str().unwrap_or("").into(), e["logprob"].clone(), e.clone()))
                .collect(),
        );
    }
    let toks = lp.get("tokens")?.as_array()?;
    let lps = lp.get("token_logprobs")?.as_array()?;
    let tops = lp.get("top_logprobs").and_then(Value::as_array);
    Some(
        toks.iter()
            .enumerate()
            .map(|(i, t)| {
                let top = tops.and_then(|v| v.get(i)).cloned().unwrap_or(Value::Null);
                let lp = lps.get(i).cloned().unwrap_or(Value::Null);
                (t.as_str().unwrap_or("").into(), lp.clone(), serde_json::json!([t, lp, top]))
            })
            .collect(),
    )
}

fn text(choice: &Value) -> &str {
    choice["message"]["content"].as_str().or_else(|| choice["text"].as_str()).unwrap_or("")
}

/// Where `now` first departs from `saved` (both `choices` lists), by choice and token.
// The serialized forms are compared, not the values: with serde_json's preserve_order a
// `Value` compares objects ignoring key order, and a replay is held to the bytes.
#[allow(clippy::cmp_owned)]
pub fn compare(saved: &Value, now: &Value) -> Rerun {
    let (a, b) = (saved.as_array().cloned().unwrap_or_default(), now.as_array().cloned().unwrap_or_default());
    let n_tokens: usize = a.iter().filter_map(tokens).map(|t| t.len()).sum();
    let summary = format!("{} choice{}, {n_tokens} tokens with logprobs", a.len(), if a.len() == 1 { "" } else { "s" });
    // Two empty lists are equal bytes, but nothing was reproduced: not a pass.
    if a.is_empty() && b.is_empty() {
        let why = "the saved answer has no choices: nothing to compare".into();
        return Rerun { outcome: Outcome::NotExercised(why), summary };
    }
    if saved.to_string() == now.to_string() {
        return Rerun { outcome: Outcome::Identical, summary };
    }
    let diff = (|| {
        if a.len() != b.len() {
            return format!("the number of choices: {} saved, {} now", a.len(), b.len());
        }
        for (c, (x, y)) in a.iter().zip(&b).enumerate() {
            if x.to_string() == y.to_string() {
                continue;
            }
            if let (Some(tx), Some(ty)) = (tokens(x), tokens(y)) {
                for (i, (p, q)) in tx.iter().zip(&ty).enumerate() {
                    if p.0 != q.0 || p.1 != q.1 {
                        return format!(
                            "choice {c}, token {i}: saved {:?} (logprob {}), now {:?} (logprob {})",
                            p.0, p.1, q.0, q.1
                        );
                    }
                    if p.2 != q.2 {
                        return format!("choice {c}, token {i} ({:?}): its top logprobs differ", p.0);
                    }
                }
                if tx.len() != ty.len() {
                    return format!(
                        "choice {c}, token {}: saved {} tokens, now {}",
                        tx.len().min(ty.len()),
                        tx.len(),
                        ty.len()
                    );
                }
            }
            if let (Some(ex), Some(ey)) = (x["embedding"].as_array(), y["embedding"].as_array()) {
                if let Some(k) = (0..ex.len().max(ey.len())).find(|&k| ex.get(k) != ey.get(k)) {
                    let at = |e: &[Value]| e.get(k).map_or("nothing".into(), Value::to_string);
                    return format!("choice {c}, embedding value {k}: saved {}, now {}", at(ex), at(ey));
                }
            }
            let (sx, sy) = (text(x), text(y));
            if sx != sy {
                let k = sx.chars().zip(sy.chars()).take_while(|(p, q)| p == q).count();
                let rest = |s: &str| s.chars().skip(k).take(20).collect::<String>();
                return format!("choice {c}, text character {k}: saved {:?}, now {:?}", rest(sx), rest(sy));
            }
            if x["finish_reason"] != y["finish_reason"] {
                return format!("choice {c}, finish_reason: saved {}, now {}", x["finish_reason"], y["finish_reason"]);
            }
            return format!("choice {c}: saved {x}, now {y}");
        }
        "the choices' bytes".into()
    })();
    Rerun { outcome: Outcome::Differs(diff), summary }
}
