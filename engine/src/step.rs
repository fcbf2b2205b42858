//! One step: plan (scheduler.rs), drafts for the sequences that speculate, one forward
//! over every planned piece, then each sequence's [`Tail`] takes its rows: a sampling
//! sequence samples, a drafting one verifies, an embedding pools. Only a sequence whose
//! last token was fed samples or verifies; its blocks are then registered for the prefix
//! cache and, with attention windows, trimmed. An encoder model's step is
//! [`Scheduler::encode_waiting`]: its waiting inputs in one encode call (encode.rs).
//!
//! Every rule here leans on one property of the forward: a sequence's logits and hidden
//! rows depend only on its own tokens, bit for bit, whatever else is in the step. So the
//! step asks one forward for what its tails need together (logit rows per drafted token,
//! hidden rows, a hybrid's spare state slots) and each tail reads only its own rows.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tl_core::{EncodeInput, ForwardBatch, ForwardSeq, Logits, NO_BLOCK};

use crate::encode::Encoding;
use crate::error::{kv_err, lock, EngineError};
use crate::request::FinishReason;
use crate::scheduler::Scheduler;
use crate::stats::StepFigures;
use crate::tail::Tail;

/// Where one sequence's rows are in the step's output.
struct Rows<'a> {
    logits: &'a Logits,
    /// Its first logits row.
    first: usize,
    /// The step's hidden rows `(N, d)`, when a tail asked for them.
    hidden: Option<&'a [f32]>,
    /// Its first hidden row, and how many it fed.
    row0: usize,
    fed: usize,
}

impl Scheduler {
    /// One step: plan, drafts for the sequences that speculate (in what is left of the
    /// token budget), one forward over every planned piece, then each planned sequence's
    /// tail. Returns false when there was nothing to run.
    pub(crate) fn step(&mut self) -> Result<bool, EngineError> {
        let admitted = self.plan()?;
        let planned: Vec<usize> = (0..self.running.len()).filter(|&i| self.running[i].take > 0).collect();
        if planned.is_empty() {
            return Ok(false);
        }
        let t0 = Instant::now();
        // Speculation is called only when a running sequence speculates.
        let drafting = if self.running.iter().any(|s| s.tail.drafting().is_some()) {
            self.spec.plan(&mut self.running, &planned)?
        } else {
            false
        };
        // Logit rows per sequence: its last token's, plus one per drafted token.
        let tails: Vec<usize> = planned.iter().map(|&i| 1 + self.running[i].tail.draft().len()).collect();
        let batch = ForwardBatch {
            seqs: planned
                .iter()
                .map(|&i| {
                    let s = &self.running[i];
                    let tokens = match s.tail.drafting().filter(|d| !d.draft.is_empty()) {
                        Some(d) => &d.feed[..],
                        None => &s.tokens[s.computed..s.computed + s.take],
                    };
                    ForwardSeq {
                        tokens,
                        start: s.computed,
                        blocks: &s.blocks,
                        adapter: s.req.adapter.as_ref().map(|a| a.applied()),
                    }
                })
                .collect(),
        };
        let n_tokens = batch.n_tokens();
        // A decode row feeds one sampled token; anything else is prompt or recompute.
        let decode_rows = planned
            .iter()
            .filter(|&&i| {
                let s = &self.running[i];
                s.take == 1 && s.computed + 1 == s.tokens.len() && s.generated() > 0
            })
            .count();
        // `fed[k]`: the rows of the step's k-th sequence.
        let fed: Vec<usize> = batch.seqs.iter().map(|s| s.tokens.len()).collect();
        // Hidden rows only when an embedding or MTP-drafting sequence is in the step (each
        // row's bits are the same either way). A hybrid model's verify steps keep the
        // states they may roll back to (speculator.rs).
        let wants = planned.iter().any(|&i| self.running[i].tail.needs_hidden());
        let spares: Vec<&[u32]> = planned
            .iter()
            .map(|&i| self.running[i].tail.drafting().filter(|d| !d.draft.is_empty()).map_or(&[][..], |d| &d.spares))
            .collect();
        let spares = if spares.iter().any(|s| !s.is_empty()) { &spares[..] } else { &[] };
        let tf = Instant::now();
        let out = self.runner.forward_spares(&batch, drafting.then_some(&tails[..]), wants, spares).map_err(kv_err)?;
        // A step of decode rows only (drafts included) is a cost the measured-cost rule
        // of speculation weighs (speculate.rs, `StepCosts`).
        let drafted_rows = tails.iter().sum::<usize>() - tails.len();
        if self.spec.measured && decode_rows == planned.len() && n_tokens == decode_rows + drafted_rows {
            self.spec.costs.step(n_tokens, tf.elapsed().as_secs_f64());
        }
        let forward = t0.elapsed();
        let mut finished: Vec<(usize, FinishReason)> = Vec::new();
        let (mut first, mut row0) = (0, 0);
        for ((&i, &rows), &n) in planned.iter().zip(&tails).zip(&fed) {
            let at = Rows { logits: &out.logits, first, hidden: out.hidden.as_deref(), row0, fed: n };
            let outcome = self.land(i, &at);
            (first, row0) = (first + rows, row0 + n);
            self.register_full(i)?;
            self.trim(i)?;
            match outcome {
                Ok(Some(reason)) => finished.push((i, reason)),
                Ok(None) => {}
                Err(e) => {
                    // A bad sampling parameter (the server checks them first) or unusable
                    // logits: this sequence ends with the error, its blocks released.
                    self.running[i].out.fail(e);
                    self.running[i].req.max_tokens = 0;
                    finished.push((i, FinishReason::Length));
                }
            }
        }
        let elapsed = t0.elapsed();
        self.shared.steps.fetch_add(1, Ordering::Relaxed);
        if let Some(o) = &self.observer {
            o.step(&StepFigures {
                tokens: n_tokens,
                seqs: planned.len(),
                prefill_tokens: n_tokens - decode_rows,
                admitted,
                forward,
                elapsed,
            });
        }
        for &(i, reason) in finished.iter().rev() {
            let s = self.running.remove(i);
            self.finish(s, reason)?;
        }
        Ok(true)
    }

    /// `running[i]`'s tail takes its rows `at` of the step: its fed tokens count as
    /// computed, and, once its last token was fed, it samples, verifies its draft or (an
    /// embedding) ends. `Some` when the sequence is done.
    fn land(&mut self, i: usize, at: &Rows<'_>) -> Result<Option<FinishReason>, EngineError> {
        let d = self.runner.hidden_size();
        let s = &mut self.running[i];
        let start = s.computed;
        let mine = at.hidden.map(|h| h.get(at.row0 * d..(at.row0 + at.fed) * d));
        let pooled = match (&mut s.tail, mine) {
            (Tail::Pool(p), Some(Some(rows))) => p.absorb(rows, start, d),
            (Tail::Pool(_), Some(None)) => Err(EngineError::Internal("the step returned too few hidden rows".into())),
            (Tail::Pool(_), None) => Err(EngineError::Internal("the step returned no hidden rows".into())),
            _ => Ok(()),
        };
        s.computed += s.take;
        s.take = 0;
        let verifies = !s.tail.draft().is_empty();
        let outcome = match &s.tail {
            _ if pooled.is_err() => pooled.map(|()| None),
            // Mid-prefill: this row's logits are not the sequence's next token.
            _ if s.computed < s.tokens.len() => Ok(None),
            Tail::Pool(_) => Ok(Some(FinishReason::Stop)), // pooled: finish() sends the embedding
            Tail::Verify(_) if verifies => self.spec.verify(s, &mut self.emitter, at.logits, at.first),
            Tail::Sample | Tail::Verify(_) => s.sample(&mut self.emitter, at.logits.row(at.first)),
        };
        // An MTP head's rows: the target's hidden states of the positions now computed.
        if let (Tail::Verify(_), Some(h)) = (&s.tail, at.hidden) {
            let upto = s.computed.min(start + at.fed);
            if let Some(rows) = h.get(at.row0 * d..(at.row0 + upto - start) * d) {
                self.spec.keep_hidden(s, rows, start);
            }
        }
        outcome
    }

    /// Register `running[i]`'s full blocks of computed tokens in the prefix index (only
    /// positions whose K/V belong to the sequence's accepted tokens).
    fn register_full(&mut self, i: usize) -> Result<(), EngineError> {
        // An embedding sequence registers nothing: it takes no hits either (see plan).
        if !self.lim.prefix || self.running[i].tail.pooler().is_some() {
            return Ok(());
        }
        let (b, n) = (self.lim.block_tokens, self.lim.groups);
        let s = &mut self.running[i];
        let full = s.computed / b;
        s.chain_upto(full, b);
        let mut g = lock(&self.pool)?;
        for k in s.registered..full {
            // Each group's page under its own hash (group 0's is the block's).
            for (j, &id) in s.blocks[k * n..(k + 1) * n].iter().enumerate() {
                if id != NO_BLOCK {
                    g.register(id, tl_core::group_hash(s.chain[k], j)).map_err(kv_err)?;
                }
            }
            // On disk too, once (write-through: see disk_cache.rs).
            let row = crate::disk_cache::row_to_write(&s.blocks, k, &self.lim.layout);
            if let (Some(disk), Some(row)) = (self.disk.as_mut().filter(|d| d.wants(s.chain[k])), row) {
                let env = g.export(row).map_err(kv_err)?;
                disk.write(s.chain[k], &env);
            }
            // Indexed below block granularity too (prefix.rs), by group 0's page.
            let parent = s.parent(k);
            if s.blocks[k * n] != NO_BLOCK {
                self.partial.record(s.blocks[k * n], parent, s.chain[k], &s.tokens[k * b..(k + 1) * b]);
            }
        }
        s.registered = s.registered.max(full);
        Ok(())
    }

    /// Give back `running[i]`'s windowed pages no later query sees (docs/kv.md): its
    /// next query is at `computed`, which only grows until the sequence is released. A
    /// P/D prefill keeps every page: its lease hands them all to the decode server.
    fn trim(&mut self, i: usize) -> Result<(), EngineError> {
        let s = &mut self.running[i];
        if !self.lim.layout.windowed() || s.handoff.hold.is_some() {
            return Ok(());
        }
        let mut g = lock(&self.pool)?;
        self.lim
            .layout
            .release_out_of_window(g.as_mut(), &mut s.blocks, s.computed, self.lim.block_tokens)
            .map_err(kv_err)?;
        Ok(())
    }
}

impl Scheduler {
    /// Run the waiting encode jobs, up to the step's token budget (at least one), in one
    /// encode call; each job is answered, none left half done. Jobs whose receiver is gone
    /// are dropped unrun.
    pub(crate) fn encode_waiting(&mut self) {
        let budget = self.lim.max_batch_tokens;
        let mut jobs = Vec::new();
        let mut tokens = 0;
        while let Some(job) = self.encodes.front() {
            if !jobs.is_empty() && tokens + job.req.ids.len() > budget {
                break;
            }
            let Some(job) = self.encodes.pop_front() else { break };
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            if job.out.is_closed() {
                self.shared.cancelled.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            tokens += job.req.ids.len();
            jobs.push(job);
        }
        if jobs.is_empty() {
            return;
        }
        let t0 = Instant::now();
        let inputs: Vec<EncodeInput<'_>> =
            jobs.iter().map(|j| EncodeInput { ids: &j.req.ids, type_ids: j.req.type_ids.as_deref() }).collect();
        let out = self.runner.encode(&inputs, false);
        let forward = t0.elapsed();
        match out {
            Ok(encoded) if encoded.len() == jobs.len() => {
                for (job, e) in jobs.iter().zip(encoded) {
                    let _ =
                        job.out.send(Ok(Encoding { vector: e.vector, scores: e.scores, tokens: job.req.ids.len() }));
                }
            }
            Ok(encoded) => {
                let err = EngineError::Internal(format!("encode: {} outputs for {} inputs", encoded.len(), jobs.len()));
                jobs.iter().for_each(|j| drop(j.out.send(Err(err.clone()))));
            }
            Err(e) => {
                let err = EngineError::Internal(e.to_string());
                jobs.iter().for_each(|j| drop(j.out.send(Err(err.clone()))));
            }
        }
        self.shared.steps.fetch_add(1, Ordering::Relaxed);
        self.shared.finished.fetch_add(jobs.len(), Ordering::Relaxed);
        if let Some(o) = &self.observer {
            let figures = StepFigures {
                tokens,
                seqs: jobs.len(),
                prefill_tokens: tokens,
                admitted: jobs.len(),
                forward,
                elapsed: t0.elapsed(),
            };
            o.step(&figures);
        }
    }

    /// Answer every waiting encode job with `err` (shutting down, or a failed step).
    pub(crate) fn fail_encodes(&mut self, err: &EngineError) {
        for job in self.encodes.drain(..) {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            let _ = job.out.send(Err(err.clone()));
        }
    }
}
