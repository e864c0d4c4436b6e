//! The synapse: what the broker has learned about one (intent, agent) pair, and the cost that
//! picks between two agents. Pure: every function takes the time, in microseconds on any
//! monotonic clock, so tests drive it with a test clock.
//!
//! `cost = (latency + penalty) × (in_flight + 1) / weight`
//!
//! - `latency`: peak-EWMA of successful reply times (per output token when the reply carries
//!   `Semaq-Tokens-Out`, since an LLM's time scales with what it writes). A sample above the
//!   estimate replaces it (peak), but at most doubles it (`LATENCY_RISE_MAX`) per reply; one
//!   below moves it `LATENCY_SMOOTHING` of the way. At rest the
//!   estimate decays toward zero (`LATENCY_DECAY`), so an agent that stopped getting traffic
//!   is tried again and can show it healed.
//! - `penalty`: each error or timeout adds `ERROR_PENALTY_FACTOR` times the *intent's* slowest
//!   latency estimate (at least `ERROR_PENALTY_FLOOR_US`), decaying with `PENALTY_DECAY_US`. An
//!   agent that fails *fast* would otherwise look fast and win traffic, the trap linkerd2-proxy
//!   fell into with plain peak-EWMA; scaling by the slowest healthy peer makes a failure cost
//!   more than any latency seen, whether replies take 100 µs or 10 s. A refusal adds half.
//! - `weight` in [`WEIGHT_MIN`, `WEIGHT_MAX`]: the synapse's strength. Each success moves it
//!   `WEIGHT_GAIN` of the way to 1; an error or timeout halves it, a refusal takes a fifth.
//!   Dividing by it makes a weakened agent need a lower latency to win, so recovery takes a
//!   run of successes rather than one.

/// Weakest a synapse gets: a failing agent is still probed now and then.
pub const WEIGHT_MIN: f64 = 0.1;
/// Strongest a synapse gets, and where a new one starts.
pub const WEIGHT_MAX: f64 = 1.0;
/// Share of the way to `WEIGHT_MAX` one success moves the weight.
pub const WEIGHT_GAIN: f64 = 0.2;
/// Factor an error or timeout applies to the weight.
pub const WEIGHT_ERROR_FACTOR: f64 = 0.5;
/// Factor a refusal (a 503, a full outbound buffer) applies to the weight.
pub const WEIGHT_REFUSAL_FACTOR: f64 = 0.8;
/// Below this weight an agent is not healthy: its sessions move.
pub const HEALTHY_WEIGHT_MIN: f64 = 0.3;
/// A failure costs this many times the intent's slowest latency estimate.
pub const ERROR_PENALTY_FACTOR: f64 = 10.0;
/// Least a failure costs, in microseconds, when no latency is known yet.
pub const ERROR_PENALTY_FLOOR_US: f64 = 10_000.0;
/// Time constant of the penalty's decay. At full strength a failure keeps an agent out for
/// about `ln(FACTOR / WEIGHT_MIN) ≈ 4.6` of these; after that it is probed again.
pub const PENALTY_DECAY_US: f64 = 1_000_000.0;
/// Time constant of the idle latency estimate's decay toward zero.
pub const LATENCY_DECAY_US: f64 = 2_000_000.0;
/// Most one reply can multiply the latency estimate by. A truly slower agent is still noticed
/// within a few replies (log2 of how much slower), but one outlier (a scheduling hiccup of a
/// healthy agent) no longer makes it look ten times slower and lose its traffic for about a
/// second while the others queue its share (seen in `/semaq/agents` during `bench intent-rr`).
pub const LATENCY_RISE_MAX: f64 = 2.0;
/// Share of the way a sample below the estimate moves it.
pub const LATENCY_SMOOTHING: f64 = 0.3;
/// Smallest latency the cost uses, so in-flight requests still count for a new agent.
pub const LATENCY_FLOOR_US: f64 = 1.0;

/// What a routed request came to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    /// A reply without an error status, after `latency_us`, with `tokens_out` if it said so.
    Success {
        /// Time from hand-off to reply.
        latency_us: u64,
        /// The reply's `Semaq-Tokens-Out`.
        tokens_out: Option<u64>,
    },
    /// A reply with `Semaq-Status: error`.
    Error,
    /// No reply within the request timeout.
    Timeout,
    /// The agent refused it: a 503 reply, or its connection could not take the message.
    Refused,
}

/// One (intent, agent) pair's learned state.
#[derive(Debug, Clone, PartialEq)]
pub struct Synapse {
    weight: f64,
    latency_us: f64,
    latency_at_us: u64,
    penalty_us: f64,
    penalty_at_us: u64,
}

impl Default for Synapse {
    fn default() -> Self {
        Self::new(0)
    }
}

fn decayed(value: f64, since_us: u64, now_us: u64, time_constant_us: f64) -> f64 {
    if value == 0.0 || now_us <= since_us {
        return value;
    }
    let elapsed = now_us.saturating_sub(since_us) as f64;
    value * (-elapsed / time_constant_us).exp()
}

impl Synapse {
    /// A new synapse at full weight with nothing learned, at `now_us`.
    pub fn new(now_us: u64) -> Self {
        Self { weight: WEIGHT_MAX, latency_us: 0.0, latency_at_us: now_us, penalty_us: 0.0, penalty_at_us: now_us }
    }

    /// The weight, in [`WEIGHT_MIN`, `WEIGHT_MAX`].
    pub fn weight(&self) -> f64 {
        self.weight
    }

    /// Whether the agent counts as healthy for session affinity.
    pub fn is_healthy(&self) -> bool {
        self.weight >= HEALTHY_WEIGHT_MIN
    }

    /// The latency estimate at `now_us`, in microseconds (per output token if replies say so).
    pub fn latency_us(&self, now_us: u64) -> f64 {
        decayed(self.latency_us, self.latency_at_us, now_us, LATENCY_DECAY_US)
    }

    /// The failure penalty at `now_us`, in microseconds.
    pub fn penalty_us(&self, now_us: u64) -> f64 {
        decayed(self.penalty_us, self.penalty_at_us, now_us, PENALTY_DECAY_US)
    }

    /// The cost of sending one more request to this agent with `in_flight` already there.
    pub fn cost(&self, in_flight: u32, now_us: u64) -> f64 {
        let latency = self.latency_us(now_us).max(LATENCY_FLOOR_US);
        (latency + self.penalty_us(now_us)) * (f64::from(in_flight) + 1.0) / self.weight
    }

    /// Learns from one outcome at `now_us`; `reference_latency_us` is the slowest latency
    /// estimate among the intent's agents, which a failure's penalty is scaled by.
    pub fn observe(&mut self, outcome: Outcome, now_us: u64, reference_latency_us: f64) {
        match outcome {
            Outcome::Success { latency_us, tokens_out } => {
                let sample = latency_us as f64 / tokens_out.filter(|t| *t > 0).map_or(1.0, |t| t as f64);
                let estimate = self.latency_us(now_us);
                self.latency_us = if sample < estimate {
                    estimate + (sample - estimate) * LATENCY_SMOOTHING
                } else if estimate >= LATENCY_FLOOR_US {
                    sample.min(estimate * LATENCY_RISE_MAX)
                } else {
                    // Nothing learned yet (or all of it decayed): the first reply is the estimate.
                    sample
                };
                self.latency_at_us = now_us;
                self.weight += (WEIGHT_MAX - self.weight) * WEIGHT_GAIN;
            }
            Outcome::Error | Outcome::Timeout => self.fail(WEIGHT_ERROR_FACTOR, 1.0, now_us, reference_latency_us),
            Outcome::Refused => self.fail(WEIGHT_REFUSAL_FACTOR, 0.5, now_us, reference_latency_us),
        }
        self.weight = self.weight.clamp(WEIGHT_MIN, WEIGHT_MAX);
    }

    fn fail(&mut self, weight_factor: f64, penalty_share: f64, now_us: u64, reference_latency_us: f64) {
        let reference = reference_latency_us.max(self.latency_us(now_us));
        let step = (ERROR_PENALTY_FACTOR * reference).max(ERROR_PENALTY_FLOOR_US) * penalty_share;
        self.penalty_us = self.penalty_us(now_us) + step;
        self.penalty_at_us = now_us;
        self.weight *= weight_factor;
    }
}

/// Costs within this factor of each other count as equal: the first draw wins, so agents that
/// look alike share evenly instead of the pair swinging with every jitter of their latency.
pub const NEAR_EQUAL_COST_RATIO: f64 = 1.1;

/// Power of two choices among `n` candidates: of two distinct ones drawn at random (`draw(n)`
/// returns an index below `n`), the one with the lower `cost`, or the first drawn when their
/// costs are within [`NEAR_EQUAL_COST_RATIO`]; the only one when there is one. Only the two
/// drawn are costed, so a decision costs the same with 4 agents or 400.
pub fn pick_of_two(n: usize, cost: impl Fn(usize) -> f64, mut draw: impl FnMut(usize) -> usize) -> Option<usize> {
    match n {
        0 => None,
        1 => Some(0),
        n => {
            let first = draw(n);
            let second = (first + 1 + draw(n - 1)) % n;
            Some(if cost(second) * NEAR_EQUAL_COST_RATIO < cost(first) { second } else { first })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000;
    const S: u64 = 1_000_000;

    fn pick(costs: &[f64], draw: impl FnMut(usize) -> usize) -> Option<usize> {
        pick_of_two(costs.len(), |i| costs[i], draw)
    }

    #[test]
    fn only_the_two_drawn_candidates_are_costed() {
        let costed = std::cell::RefCell::new(Vec::new());
        let cost = |i: usize| {
            costed.borrow_mut().push(i);
            i as f64
        };
        assert_eq!(pick_of_two(400, cost, |_| 7), Some(7));
        assert_eq!(*costed.borrow(), vec![15, 7], "the second draw (7 + 1 + 7), then the first");
    }

    fn success(latency_us: u64) -> Outcome {
        Outcome::Success { latency_us, tokens_out: None }
    }

    #[test]
    fn a_new_synapse_is_at_full_weight_and_costs_by_in_flight() {
        let synapse = Synapse::new(0);
        assert_eq!(synapse.weight(), WEIGHT_MAX);
        assert!(synapse.cost(3, 0) > synapse.cost(0, 0));
    }

    #[test]
    fn errors_halve_the_weight_down_to_the_floor_and_successes_restore_it() {
        let mut synapse = Synapse::new(0);
        synapse.observe(Outcome::Error, 0, 0.0);
        assert!((synapse.weight() - 0.5).abs() < 1e-9);
        for _ in 0..10 {
            synapse.observe(Outcome::Error, 0, 0.0);
        }
        assert_eq!(synapse.weight(), WEIGHT_MIN);
        assert!(!synapse.is_healthy());
        for step in 0..10 {
            synapse.observe(success(MS), step * MS, 0.0);
        }
        assert!(synapse.weight() > 0.85, "ten successes bring it back: {}", synapse.weight());
        assert!(synapse.is_healthy());
    }

    #[test]
    fn a_fast_failing_agent_costs_more_than_a_slow_healthy_one() {
        let mut fast_failing = Synapse::new(0);
        let mut slow = Synapse::new(0);
        for step in 0..20 {
            let reference = slow.latency_us(step * MS);
            fast_failing.observe(if step % 2 == 0 { success(10) } else { Outcome::Error }, step * MS, reference);
            slow.observe(success(200 * MS), step * MS, 0.0);
        }
        let now = 20 * MS;
        assert!(fast_failing.cost(0, now) > 4.0 * slow.cost(0, now));
    }

    #[test]
    fn the_penalty_decays_so_a_healed_agent_is_tried_again() {
        let mut synapse = Synapse::new(0);
        synapse.observe(Outcome::Timeout, 0, 5.0 * MS as f64);
        let just_failed = synapse.cost(0, 0);
        assert!((synapse.penalty_us(0) - 50_000.0).abs() < 1.0, "ten times the slowest peer's 5 ms");
        assert!(synapse.penalty_us(10 * S) < 5.0, "ten seconds later the failure is forgotten");
        assert!(synapse.cost(0, 10 * S) < just_failed / 1000.0);
    }

    #[test]
    fn the_latency_estimate_at_most_doubles_per_reply_and_recovers_gradually() {
        let mut synapse = Synapse::new(0);
        synapse.observe(success(MS), 0, 0.0);
        assert!((synapse.latency_us(0) - 1_000.0).abs() < 1.0, "the first reply is the estimate");
        synapse.observe(success(100 * MS), 1, 0.0);
        assert!((synapse.latency_us(1) - 2_000.0).abs() < 1.0, "one outlier only doubles it");
        for step in 2..9 {
            synapse.observe(success(100 * MS), step, 0.0);
        }
        assert!((synapse.latency_us(9) - 100_000.0).abs() < 1.0, "a slow agent is noticed within log2(100) replies");
        synapse.observe(success(MS), 10, 0.0);
        let after_one = synapse.latency_us(10);
        assert!(after_one < 100_000.0 && after_one > 50_000.0, "one fast reply moves it part way: {after_one}");
        for step in 11..40 {
            synapse.observe(success(MS), step, 0.0);
        }
        assert!(synapse.latency_us(40) < 2_000.0);
    }

    #[test]
    fn an_idle_estimate_decays_toward_zero() {
        let mut synapse = Synapse::new(0);
        synapse.observe(success(10 * MS), 0, 0.0);
        assert!(synapse.latency_us(10 * S) < 100.0);
    }

    #[test]
    fn latency_is_per_output_token_when_the_reply_counts_them() {
        let mut per_token = Synapse::new(0);
        per_token.observe(Outcome::Success { latency_us: 100 * MS, tokens_out: Some(100) }, 0, 0.0);
        assert!((per_token.latency_us(0) - 1_000.0).abs() < 1e-6);
        let mut zero_tokens = Synapse::new(0);
        zero_tokens.observe(Outcome::Success { latency_us: 100 * MS, tokens_out: Some(0) }, 0, 0.0);
        assert!((zero_tokens.latency_us(0) - 100_000.0).abs() < 1e-6, "zero tokens counts as a whole reply");
    }

    #[test]
    fn refusals_weaken_less_than_errors() {
        let mut refused = Synapse::new(0);
        let mut errored = Synapse::new(0);
        refused.observe(Outcome::Refused, 0, 0.0);
        errored.observe(Outcome::Error, 0, 0.0);
        assert!(refused.weight() > errored.weight());
        assert!(refused.penalty_us(0) < errored.penalty_us(0));
    }

    #[test]
    fn pick_of_two_takes_the_cheaper_of_two_distinct_draws() {
        assert_eq!(pick(&[], |_| 0), None);
        assert_eq!(pick(&[5.0], |_| 0), Some(0));
        // Draws 0 then 0: the second index is (0 + 1 + 0) % 3 = 1, never the first again.
        assert_eq!(pick(&[5.0, 1.0, 9.0], |_| 0), Some(1));
        assert_eq!(pick(&[1.0, 5.0, 9.0], |_| 0), Some(0));
        let mut draws = [2, 0].into_iter();
        assert_eq!(pick(&[1.0, 5.0, 9.0], |_| draws.next().unwrap_or(0)), Some(0), "2 and 0: 0 is cheaper");
    }

    #[test]
    fn near_equal_costs_go_to_the_first_draw_so_look_alikes_share_evenly() {
        assert_eq!(pick(&[1.05, 1.0], |_| 0), Some(0), "within 10%: the first draw");
        assert_eq!(pick(&[1.2, 1.0], |_| 0), Some(1), "past 10%: the cheaper");
        let mut seed = 7u64;
        let mut draw = |n: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        let firsts = (0..1000).filter(|_| pick(&[1.0, 1.04], &mut draw) == Some(0)).count();
        assert!((400..=600).contains(&firsts), "an even split, not all to the cheaper: {firsts}");
    }
}
