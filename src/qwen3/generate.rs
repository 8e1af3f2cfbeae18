//! Generation: prefill the prompt once, then one decode step per new token, choosing each
//! token greedily (argmax, what transformers' `generate(do_sample=False)` does) or by
//! sampling at a temperature from the smallest set of tokens whose probability reaches
//! `top_p` (nucleus sampling, transformers' `TopPLogitsWarper`), with a seeded generator so
//! a run can be repeated.

use crate::error::{Error, Result};
use crate::kernels::softmax_in_place;
use crate::qwen3::model::{Logits, Model, Session};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    Greedy,
    TopP {
        temperature: f32,
        top_p: f32,
        seed: u64,
    },
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Stop after producing one of these (it is included in the output).
    pub stop: Vec<u32>,
}

/// The index of the largest value (the first one on ties, as `torch.argmax`).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Reusable buffers for [`sample_top_p`].
#[derive(Debug, Default)]
pub struct SampleScratch {
    probs: Vec<f32>,
    order: Vec<usize>,
}

// ANCHOR: top_p
/// Samples from `softmax(logits / temperature)` restricted to the nucleus: tokens taken in
/// order of decreasing probability while the mass before them is below `top_p` (so at least
/// one token, and the one that crosses `top_p` is kept — transformers' rule).
pub fn sample_top_p(
    logits: &[f32],
    temperature: f32,
    top_p: f32,
    rng: &mut impl Rng,
    s: &mut SampleScratch,
) -> usize {
    s.probs.clear();
    s.probs.extend(logits.iter().map(|l| l / temperature));
    softmax_in_place(&mut s.probs);
    s.order.clear();
    s.order.extend(0..logits.len());
    let probs = &s.probs;
    s.order
        .sort_unstable_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    let mut kept = 0;
    let mut mass = 0.0f32;
    for &i in &s.order {
        if kept > 0 && mass >= top_p {
            break;
        }
        mass += probs[i];
        kept += 1;
    }
    let r = rng.random::<f32>() * mass;
    let mut acc = 0.0f32;
    for &i in &s.order[..kept] {
        acc += probs[i];
        if r < acc {
            return i;
        }
    }
    s.order[kept - 1]
}
// ANCHOR_END: top_p

// ANCHOR: generate
/// Generates up to `opts.max_new_tokens` tokens after `prompt`; returns the new ids.
/// `on_token` sees each one as it is chosen.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32),
) -> Result<Vec<u32>> {
    check_sampling(opts.sampling)?;
    if opts.max_new_tokens == 0 {
        return Ok(Vec::new());
    }
    // The last new token is never fed back, so the cache needs one position less.
    let positions = prompt.len() + opts.max_new_tokens - 1;
    let max = model.config.max_position_embeddings;
    if positions > max {
        return Err(Error::Invalid(format!(
            "a prompt of {} tokens plus {} new ones needs {positions} positions, past max_position_embeddings = {max}",
            prompt.len(),
            opts.max_new_tokens
        )));
    }
    let mut session: Session = model.session(positions)?;
    let mut rng = rng_for(opts.sampling);
    let mut scratch = SampleScratch::default();
    let mut out = Vec::with_capacity(opts.max_new_tokens);
    let mut logits = model.step(&mut session, prompt, Logits::Last)?;
    loop {
        let next = choose(logits, opts.sampling, &mut rng, &mut scratch);
        out.push(next);
        on_token(next);
        if out.len() == opts.max_new_tokens || opts.stop.contains(&next) {
            return Ok(out);
        }
        logits = model.step(&mut session, &[next], Logits::Last)?;
    }
}
// ANCHOR_END: generate

/// The next token from one row of logits, greedy or sampled.
fn choose(logits: &[f32], sampling: Sampling, rng: &mut StdRng, s: &mut SampleScratch) -> u32 {
    (match sampling {
        Sampling::Greedy => argmax(logits),
        Sampling::TopP {
            temperature, top_p, ..
        } => sample_top_p(logits, temperature, top_p, rng, s),
    }) as u32
}

fn rng_for(sampling: Sampling) -> StdRng {
    match sampling {
        Sampling::TopP { seed, .. } => StdRng::seed_from_u64(seed),
        Sampling::Greedy => StdRng::seed_from_u64(0),
    }
}

fn check_sampling(sampling: Sampling) -> Result<()> {
    if let Sampling::TopP {
        temperature, top_p, ..
    } = sampling
    {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::Invalid(format!(
                "temperature must be a positive number, got {temperature}"
            )));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::Invalid(format!(
                "top_p must be in (0, 1], got {top_p}"
            )));
        }
    }
    Ok(())
}

/// Next-token prediction for loops that own the context (such as the chat chapter's
/// thinking budget, which appends tokens of its own): each call gets the whole context,
/// runs only the positions the KV cache has not seen, and chooses the next token.
pub struct Stepper<'m, 'a> {
    model: &'m Model<'a>,
    session: Session,
    fed: Vec<u32>,
    sampling: Sampling,
    rng: StdRng,
    scratch: SampleScratch,
}

impl<'m, 'a> Stepper<'m, 'a> {
    /// A stepper for contexts of up to `capacity` positions.
    pub fn new(model: &'m Model<'a>, capacity: usize, sampling: Sampling) -> Result<Self> {
        check_sampling(sampling)?;
        Ok(Stepper {
            model,
            session: model.session(capacity)?,
            fed: Vec::with_capacity(capacity),
            sampling,
            rng: rng_for(sampling),
            scratch: SampleScratch::default(),
        })
    }

    /// The token after `context`, which must extend every context seen before.
    pub fn next_token(&mut self, context: &[u32]) -> Result<u32> {
        if !context.starts_with(&self.fed) || context.len() == self.fed.len() {
            return Err(Error::Invalid(
                "each context must extend the previous one by at least one token".into(),
            ));
        }
        let new = &context[self.fed.len()..];
        let out = self.model.forward(&mut self.session, new, Logits::Last)?;
        self.fed.extend_from_slice(new);
        Ok(choose(
            &out.logits,
            self.sampling,
            &mut self.rng,
            &mut self.scratch,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_takes_the_first_of_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn tiny_top_p_is_greedy_and_top_p_one_follows_the_distribution() {
        let logits = [0.0f32, 1.0, 2.0, 0.5];
        let mut rng = StdRng::seed_from_u64(7);
        let mut s = SampleScratch::default();
        for _ in 0..50 {
            assert_eq!(sample_top_p(&logits, 1.0, 1e-6, &mut rng, &mut s), 2);
        }
        // top_p = 1: frequencies approach softmax(logits).
        let mut p = logits.to_vec();
        softmax_in_place(&mut p);
        let trials = 40_000;
        let mut counts = [0usize; 4];
        for _ in 0..trials {
            counts[sample_top_p(&logits, 1.0, 1.0, &mut rng, &mut s)] += 1;
        }
        for (c, pi) in counts.iter().zip(&p) {
            let f = *c as f32 / trials as f32;
            // 5 standard deviations of a binomial proportion.
            assert!((f - pi).abs() < 5.0 * (pi * (1.0 - pi) / trials as f32).sqrt());
        }
    }

    #[test]
    fn nucleus_keeps_the_token_that_crosses_top_p() {
        // probabilities ≈ [0.64, 0.24, 0.09, 0.03]: top_p 0.7 keeps the first two only.
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut rng = StdRng::seed_from_u64(1);
        let mut s = SampleScratch::default();
        let mut seen = [false; 4];
        for _ in 0..2000 {
            seen[sample_top_p(&logits, 1.0, 0.7, &mut rng, &mut s)] = true;
        }
        assert_eq!(seen, [true, true, false, false]);
    }
}
