//! /metrics: the engine's figures in the Prometheus/OpenMetrics text format, encoded by
//! prometheus-client. Gauges and engine counters are read from `Engine::stats` at scrape
//! time; the histograms are fed by the engine thread through [`tl_engine::Observer`].

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tl_engine::{Observer, StepFigures};

/// A KV block state label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BlockState {
    /// in_use, cached or free.
    pub state: String,
}

/// What the disk prompt cache did with a block (`--kv-disk`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DiskEvent {
    /// written, read, refused (a bad file, deleted and recomputed) or dropped (the bound).
    pub event: String,
}

/// A response status label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Status {
    /// The endpoint path.
    pub endpoint: String,
    /// The HTTP status code.
    pub code: u16,
}

/// A LoRA adapter label.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdapterLabel {
    /// The adapter's name.
    pub adapter: String,
}

/// Every metric the server exports.
pub struct Metrics {
    registry: Registry,
    queue: Gauge,
    running: Gauge,
    kv: Family<BlockState, Gauge>,
    prefix_hits: Counter,
    kv_disk: Family<DiskEvent, Counter>,
    preemptions: Counter,
    generated: Counter,
    cancelled: Counter,
    draft: Counter,
    accepted: Counter,
    acceptance: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// Requests answered, by endpoint and status.
    pub requests: Family<Status, Counter>,
    /// Generation requests run under each LoRA adapter.
    lora_requests: Family<AdapterLabel, Counter>,
    step: Histogram,
    step_tokens: Histogram,
    step_prefill: Histogram,
    step_forward: Histogram,
    queue_wait: Histogram,
    ttft: Histogram,
    itl: Histogram,
    /// Engine counters as of the last scrape (prometheus counters only go up by deltas).
    last: Mutex<tl_engine::Stats>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Count a generation request run under adapter `name`.
    pub fn adapter_request(&self, name: &str) {
        self.lora_requests.get_or_create(&AdapterLabel { adapter: name.to_string() }).inc();
    }

    /// Register every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("tl");
        let secs = || Histogram::new(exponential_buckets(0.0005, 2.0, 18));
        let m = Metrics {
            queue: Gauge::default(),
            running: Gauge::default(),
            kv: Family::default(),
            prefix_hits: Counter::default(),
            kv_disk: Family::default(),
            preemptions: Counter::default(),
            generated: Counter::default(),
            cancelled: Counter::default(),
            draft: Counter::default(),
            accepted: Counter::default(),
            acceptance: Gauge::default(),
            requests: Family::default(),
            lora_requests: Family::default(),
            step: secs(),
            step_tokens: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            step_prefill: Histogram::new(exponential_buckets(1.0, 2.0, 14)),
            step_forward: secs(),
            queue_wait: secs(),
            ttft: secs(),
            itl: secs(),
            last: Mutex::new(tl_engine::Stats::default()),
            registry: Registry::default(),
        };
        registry.register("queue_depth", "Sequences waiting for admission", m.queue.clone());
        registry.register("running_sequences", "Sequences admitted to the step loop", m.running.clone());
        registry.register("kv_blocks", "KV pool blocks by state", m.kv.clone());
        registry.register(
            "prefix_cache_hit_tokens",
            "Prompt tokens served from the prefix cache",
            m.prefix_hits.clone(),
        );
        registry.register("kv_disk_blocks", "KV blocks the disk prompt cache handled, by event", m.kv_disk.clone());
        registry.register("preemptions", "Sequences preempted to free KV blocks", m.preemptions.clone());
        registry.register("generated_tokens", "Tokens generated", m.generated.clone());
        registry.register("cancelled_sequences", "Sequences dropped because the client left", m.cancelled.clone());
        registry.register("speculative_draft_tokens", "Tokens drafted for speculative verification", m.draft.clone());
        registry.register(
            "speculative_accepted_tokens",
            "Drafted tokens that verification accepted",
            m.accepted.clone(),
        );
        registry.register(
            "speculative_acceptance_rate",
            "Accepted over drafted tokens since start (0 before any draft)",
            m.acceptance.clone(),
        );
        registry.register("requests", "HTTP requests answered", m.requests.clone());
        registry.register("lora_requests", "Generation requests run under each LoRA adapter", m.lora_requests.clone());
        registry.register("step_seconds", "Wall time of one engine step", m.step.clone());
        registry.register("step_tokens", "Tokens fed in one engine step", m.step_tokens.clone());
        registry.register(
            "step_prefill_tokens",
            "Tokens of one engine step that were prompt or recompute, not a decode token",
            m.step_prefill.clone(),
        );
        registry.register("step_forward_seconds", "Wall time of one step's forward alone", m.step_forward.clone());
        registry.register("queue_wait_seconds", "Submit to first admission", m.queue_wait.clone());
        registry.register("time_to_first_token_seconds", "Submit to first token", m.ttft.clone());
        registry.register("inter_token_latency_seconds", "Gap between two tokens of a sequence", m.itl.clone());
        Metrics { registry, ..m }
    }

    /// The text exposition, with the gauges read from `stats` now.
    pub fn encode(&self, stats: &tl_engine::Stats) -> String {
        self.queue.set(stats.waiting as i64);
        self.running.set(stats.running as i64);
        for (state, n) in
            [("in_use", stats.kv_blocks_in_use), ("cached", stats.kv_blocks_cached), ("free", stats.kv_blocks_free)]
        {
            self.kv.get_or_create(&BlockState { state: state.into() }).set(n as i64);
        }
        if let Ok(mut last) = self.last.lock() {
            let d = |now: usize, then: usize| now.saturating_sub(then) as u64;
            self.prefix_hits.inc_by(d(stats.prefix_hit_tokens, last.prefix_hit_tokens));
            self.preemptions.inc_by(d(stats.preemptions, last.preemptions));
            let (now, then) = (stats.disk, last.disk);
            for (event, n, was) in [
                ("written", now.written, then.written),
                ("read", now.read, then.read),
                ("refused", now.refused, then.refused),
                ("dropped", now.dropped, then.dropped),
            ] {
                self.kv_disk.get_or_create(&DiskEvent { event: event.into() }).inc_by(d(n, was));
            }
            self.generated.inc_by(d(stats.generated_tokens, last.generated_tokens));
            self.cancelled.inc_by(d(stats.cancelled, last.cancelled));
            self.draft.inc_by(d(stats.draft_tokens, last.draft_tokens));
            self.accepted.inc_by(d(stats.draft_accepted, last.draft_accepted));
            *last = *stats;
        }
        let rate = if stats.draft_tokens > 0 { stats.draft_accepted as f64 / stats.draft_tokens as f64 } else { 0.0 };
        self.acceptance.set(rate);
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The histograms, fed by the engine thread.
pub struct Feed(pub std::sync::Arc<Metrics>);

impl Observer for Feed {
    fn step(&self, f: &StepFigures) {
        self.0.step.observe(f.elapsed.as_secs_f64());
        self.0.step_tokens.observe(f.tokens as f64);
        self.0.step_prefill.observe(f.prefill_tokens as f64);
        self.0.step_forward.observe(f.forward.as_secs_f64());
    }
    fn admitted(&self, wait: Duration, _cached: usize) {
        self.0.queue_wait.observe(wait.as_secs_f64());
    }
    fn first_token(&self, ttft: Duration) {
        self.0.ttft.observe(ttft.as_secs_f64());
    }
    fn inter_token(&self, gap: Duration) {
        self.0.itl.observe(gap.as_secs_f64());
    }
}

/// Several models' expositions as one: each sample gains a `model` label, and each metric
/// family's `# HELP`/`# TYPE` lines appear once, its samples from every model together (the
/// text format wants a family in one piece).
pub(crate) fn merge_labelled(texts: &[(String, String)]) -> String {
    // family name -> (its # lines, its samples), in first-seen order.
    let mut order: Vec<String> = Vec::new();
    let mut fams: std::collections::HashMap<String, (Vec<String>, Vec<String>)> = Default::default();
    for (model, text) in texts {
        let mut family = String::new();
        for line in text.lines() {
            if line == "# EOF" || line.is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix("# ") {
                let name = rest.split_whitespace().nth(1).unwrap_or_default().to_string();
                family = name.clone();
                let f = fams.entry(name.clone()).or_insert_with(|| {
                    order.push(name.clone());
                    Default::default()
                });
                if !f.0.iter().any(|l| l == line) {
                    f.0.push(line.to_string());
                }
                continue;
            }
            let label = format!("model=\"{}\"", model.replace('\\', "\\\\").replace('"', "\\\""));
            let labelled = match line.find(['{', ' ']) {
                Some(i) if line.as_bytes()[i] == b'{' => format!("{}{{{label},{}", &line[..i], &line[i + 1..]),
                Some(i) => format!("{}{{{label}}}{}", &line[..i], &line[i..]),
                None => continue,
            };
            let f = fams.entry(family.clone()).or_insert_with(|| {
                order.push(family.clone());
                Default::default()
            });
            f.1.push(labelled);
        }
    }
    let mut out = String::new();
    for name in order {
        let (heads, samples) = &fams[&name];
        for l in heads.iter().chain(samples) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}
