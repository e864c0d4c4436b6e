//! The routing rule in a simulated world with a test clock: 4 agents, 16 requesters each
//! sending its next request when the last one is answered, and one agent that fails or slows
//! down for 20 s and then heals. The same targets as `semaq bench adapt`, without a network.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::synapse::{pick_of_two, Outcome, Synapse};

const AGENTS: usize = 4;
const REQUESTERS: usize = 16;
const CAPACITY: u32 = 16;
const MS: u64 = 1_000;
const S: u64 = 1_000_000;
const HEALTHY_LATENCY_US: u64 = 10 * MS;
const HEALS_AT_US: u64 = 20 * S;

#[derive(Clone, Copy, PartialEq)]
enum Trouble {
    /// Answers every other request with an error, at once.
    FailsHalfFast,
    /// Takes ten times as long.
    TenTimesSlower,
}

/// A tiny deterministic generator (xorshift), so the simulation is the same every run.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Runs until `end_us`; returns each second's share of requests agent 0 was sent.
fn run(trouble: Trouble, end_us: u64) -> Vec<f64> {
    let mut synapses: Vec<Synapse> = (0..AGENTS).map(|_| Synapse::new(0)).collect();
    let mut in_flight = [0u32; AGENTS];
    let mut served = 0u64;
    let mut events = BinaryHeap::new();
    let mut draw = Draw(0x9e37_79b9_7f4a_7c15);
    let mut per_second = vec![[0u64; AGENTS]; (end_us / S) as usize + 1];
    for _ in 0..REQUESTERS {
        events.push(Reverse((0u64, usize::MAX, false)));
    }
    while let Some(Reverse((now, agent, failed))) = events.pop() {
        if now >= end_us {
            break;
        }
        if agent != usize::MAX {
            in_flight[agent] -= 1;
            let outcome = match failed {
                true => Outcome::Error,
                false => Outcome::Success { latency_us: latency_of(agent, trouble, now), tokens_out: None },
            };
            let reference = synapses.iter().map(|s| s.latency_us(now)).fold(0.0, f64::max);
            synapses[agent].observe(outcome, now, reference);
        }
        let open: Vec<usize> = (0..AGENTS).filter(|&a| in_flight[a] < CAPACITY).collect();
        let cost = |k: usize| synapses[open[k]].cost(in_flight[open[k]], now);
        let Some(pick) = pick_of_two(open.len(), cost, |n| draw.below(n)) else { continue };
        let chosen = open[pick];
        in_flight[chosen] += 1;
        served += 1;
        per_second[(now / S) as usize][chosen] += 1;
        let troubled = chosen == 0 && now < HEALS_AT_US;
        let fails = troubled && trouble == Trouble::FailsHalfFast && served.is_multiple_of(2);
        let took = if fails { 100 } else { latency_of(chosen, trouble, now) };
        events.push(Reverse((now + took, chosen, fails)));
    }
    per_second.iter().map(|counts| counts[0] as f64 / counts.iter().sum::<u64>().max(1) as f64).collect()
}

fn latency_of(agent: usize, trouble: Trouble, now: u64) -> u64 {
    let slow = agent == 0 && now < HEALS_AT_US && trouble == Trouble::TenTimesSlower;
    if slow {
        10 * HEALTHY_LATENCY_US
    } else {
        HEALTHY_LATENCY_US
    }
}

fn mean(shares: &[f64]) -> f64 {
    shares.iter().sum::<f64>() / shares.len() as f64
}

#[test]
fn an_agent_failing_half_its_requests_fast_loses_its_share_and_regains_it_after_healing() {
    let shares = run(Trouble::FailsHalfFast, 60 * S);
    let failing = mean(&shares[5..20]);
    assert!(failing < 0.05, "share while failing: {failing:.3} ({shares:.2?})");
    let healed = mean(&shares[45..50]);
    assert!(healed >= 0.15, "share 25–30 s after healing: {healed:.3} ({shares:.2?})");
}

#[test]
fn an_agent_ten_times_slower_loses_its_share_and_regains_it_after_healing() {
    let shares = run(Trouble::TenTimesSlower, 60 * S);
    let slow = mean(&shares[5..20]);
    assert!(slow < 0.10, "share while slow: {slow:.3} ({shares:.2?})");
    let healed = mean(&shares[45..50]);
    assert!(healed >= 0.15, "share 25–30 s after healing: {healed:.3} ({shares:.2?})");
}
