//! `POST /v1/chat/completions`: messages through the chat template (and tools, when the
//! request has them) into the request plan; generate.rs answers it. [`prepare`] is the
//! translation every chat-shaped surface shares (messages.rs builds the same plan from an
//! Anthropic body, so the two give the same tokens for the same request).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use tokio::time::Instant;

use crate::api::{self, ApiError, Plan};
use crate::generate;
use crate::http::{self, St};
use crate::prompt;
use crate::reasoning;
use crate::state::AppState;
use crate::tools;

/// A chat body ready to submit: its plan, the tools to parse the answer with, and the
/// reasoning split (`Some(open)`).
pub(crate) struct Prepared {
    pub(crate) plan: Plan,
    pub(crate) tools: Option<tools::Active>,
    pub(crate) think: Option<bool>,
}

/// POST /v1/chat/completions.
pub(crate) async fn chat(State(st): St, headers: HeaderMap, body: Body) -> Response {
    let r = chat_inner(&st, &headers, body).await;
    http::counted(&st, "/v1/chat/completions", r)
}

async fn chat_inner(st: &Arc<AppState>, headers: &HeaderMap, body: Body) -> Result<Response, ApiError> {
    let deadline = Instant::now() + st.limits.request_timeout;
    let bytes = http::read_bytes(st, headers, body).await?;
    let b: api::Body = http::parse_json(&bytes)?;
    http::check_model(st, &b.model)?;
    let p = prepare(st, &b, bytes)?;
    generate::generate(st, p.plan, true, deadline, p.tools, p.think).await
}

/// The prompt tokens of a chat body, as [`prepare`] renders them (with its tools, when
/// it has some), and the checked tools.
pub(crate) fn render(st: &AppState, b: &api::Body) -> Result<(Vec<u32>, Option<tools::Tools>), ApiError> {
    let msgs = prompt::messages(b)?;
    let tools = tools::parse(b.tools.as_ref(), b.tool_choice.as_ref(), b.parallel_tool_calls.as_ref())?;
    let format = st.tool_format;
    let turns = tools::prepare(format, tools.as_ref(), prompt::turns(msgs)?);
    // A native template renders the tools itself; the generic format put them in the system turn.
    let raw = tools.as_ref().filter(|_| format != tools::Format::Generic).map(|t| t.raw.as_slice());
    let prompt = prompt::render_with(&st.tok, &st.template, &turns, raw, &prompt::template_kwargs(b)?)?;
    Ok((prompt, tools))
}

/// Check a chat body and build its plan. `bytes` is what call ids hash (the body as the
/// client sent it).
pub(crate) fn prepare(st: &AppState, b: &api::Body, bytes: Bytes) -> Result<Prepared, ApiError> {
    let (prompt, tools) = render(st, b)?;
    let format = st.tool_format;
    let mut plan =
        b.plan(prompt.clone(), true, st.engine.info().max_context, generate::default_max(st, true, prompt.len()))?;
    let tool_ctx = match tools {
        Some(t) if t.choice != tools::ToolChoice::None => {
            if plan.reqs.first().is_some_and(|r| r.grammar.is_some()) {
                return Err(ApiError::bad(
                    "response_format",
                    "response_format cannot be combined with tools unless tool_choice is \"none\"",
                ));
            }
            let g = tools::grammar(format, &t);
            for r in &mut plan.reqs {
                r.grammar = g.clone();
            }
            let seed = plan.reqs.first().map_or(0, |r| r.seed);
            Some(tools::Active { format, choice: t.choice, body: bytes, seed })
        }
        _ => None,
    };
    // The reasoning split reads the answer's text; with tools the call parser reads it
    // (splitting there is left for later), so only plain answers are split.
    let think = match tool_ctx {
        Some(_) => None,
        None => {
            let tail = st.tok.decode_bytes(&prompt[prompt.len().saturating_sub(8)..]).unwrap_or_default();
            reasoning::applies(st.reasoning, st.template.source(), &String::from_utf8_lossy(&tail))
        }
    };
    Ok(Prepared { plan, tools: tool_ctx, think })
}
