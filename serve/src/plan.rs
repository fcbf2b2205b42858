//! The request plan: what a generation asks of the engine and how its answer is read,
//! whichever surface it came in through. Each surface checks its own body and builds a
//! [`Plan`] (api.rs for OpenAI's fields, render.rs for chat-shaped bodies: chat, Messages
//! and Responses); submit.rs alone hands a plan to the engine. So two surfaces that mean
//! the same request give the engine the same requests, and a new per-request setting is
//! one field here, read in one place ([`Plan::request`]).

use serde_json::Value;
use tl_engine::{EmbedRequest, Pooling, Request};

use crate::tools;

/// A checked generation request.
#[derive(Debug)]
pub struct Plan {
    /// Choice 0's engine request (the prompt's token ids, a chat's turns already rendered
    /// through the template with its tools; sampling, seed, limits, stops, logprobs,
    /// grammar, logit bias, speculation): choice `i` is the same with `choice: i`, so it
    /// samples from `choice_stream(seed, i)`.
    pub base: Request,
    /// Choices, `1..=16`.
    pub n: u32,
    /// Answer as a stream.
    pub stream: bool,
    /// A usage chunk at the end of a stream.
    pub include_usage: bool,
    /// The request's `kv_transfer_params` (P/D).
    pub kv_transfer: Option<Value>,
    /// The tools the answer's calls are parsed with (a chat with tools).
    pub tools: Option<tools::Active>,
    /// The reasoning split of the answer's text: `Some(open)` when it applies.
    pub think: Option<bool>,
    /// The adapter the request asked for (its `model`, its `lora`), resolved at submit.
    pub lora: crate::lora::LoraAsk,
}

impl Plan {
    /// Choice `choice`'s engine request.
    pub fn request(&self, choice: u32) -> Request {
        Request { choice, ..self.base.clone() }
    }

    /// Every choice's engine request, choice index = position.
    pub fn requests(&self) -> Vec<Request> {
        (0..self.n).map(|choice| self.request(choice)).collect()
    }
}

/// A checked embedding request (/v1/embeddings, and rerank's documents): one engine
/// sequence per prompt, pooled alike.
#[derive(Debug)]
pub struct EmbedPlan {
    /// Each input's token ids.
    pub prompts: Vec<Vec<u32>>,
    /// How each input's hidden rows are pooled.
    pub pooling: Pooling,
    /// L2-normalise each vector.
    pub normalize: bool,
    /// Keep the first `dimensions` values; `None`: all.
    pub dimensions: Option<usize>,
}

impl EmbedPlan {
    /// Every input's engine request, input index = position.
    pub fn into_requests(self) -> Vec<EmbedRequest> {
        let (pooling, normalize, dimensions) = (self.pooling, self.normalize, self.dimensions);
        self.prompts.into_iter().map(|prompt| EmbedRequest { prompt, pooling, normalize, dimensions }).collect()
    }
}
