//! A chat-shaped body into its plan: the turns through the chat template (with tools,
//! when the request has them), the tools' call grammar, and the reasoning split. Every
//! chat-shaped surface plans here: chat completions with its own body, Messages and
//! Responses with the chat body their request means (messages/request.rs,
//! responses/request.rs), so the three give the engine the same request, hence the same
//! tokens, for the same conversation.

use axum::body::Bytes;

use crate::api::{self, ApiError, Plan};
use crate::prompt;
use crate::reasoning;
use crate::state::AppState;
use crate::tools;

/// The default `max_tokens`: chat may fill the context; completions stop at 16 (OpenAI's).
pub(crate) fn default_max(st: &AppState, chat: bool, prompt: usize) -> usize {
    let rest = st.engine.info().max_context.map_or(4096, |c| c.saturating_sub(prompt));
    if chat {
        rest
    } else {
        rest.min(16)
    }
}

/// The prompt tokens of a chat body, as [`chat`] renders them (with its tools, when it
/// has some), and the checked tools.
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
pub(crate) fn chat(st: &AppState, b: &api::Body, bytes: Bytes) -> Result<Plan, ApiError> {
    let (prompt, tools) = render(st, b)?;
    let format = st.tool_format;
    let max = default_max(st, true, prompt.len());
    let mut plan = b.plan(prompt, true, st.engine.info().max_context, max)?;
    plan.tools = match tools {
        Some(t) if t.choice != tools::ToolChoice::None => {
            if plan.base.grammar.is_some() {
                return Err(ApiError::bad(
                    "response_format",
                    "response_format cannot be combined with tools unless tool_choice is \"none\"",
                ));
            }
            plan.base.grammar = tools::grammar(format, &t);
            Some(tools::Active { format, choice: t.choice, body: bytes, seed: plan.base.seed })
        }
        _ => None,
    };
    // The reasoning split reads the answer's text; with tools the call parser reads it
    // (splitting there is left for later), so only plain answers are split.
    plan.think = match plan.tools {
        Some(_) => None,
        None => {
            let p = &plan.base.prompt;
            let tail = st.tok.decode_bytes(&p[p.len().saturating_sub(8)..]).unwrap_or_default();
            reasoning::applies(st.reasoning, st.template.source(), &String::from_utf8_lossy(&tail))
        }
    };
    Ok(plan)
}
