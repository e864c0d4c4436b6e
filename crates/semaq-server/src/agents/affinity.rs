//! Session affinity: rendezvous (highest-random-weight) hashing with a load bound. Pure.
//!
//! Every agent gets a score `hash(session, agent_id)`; the session goes to the highest-scoring
//! agent that can take it. A new agent wins only the sessions it now scores highest for (one
//! in n+1 of them); an agent that leaves loses only its own. An agent that is unhealthy, full,
//! or above `LOAD_BOUND_FACTOR` × the mean in-flight load is skipped for the next in score
//! order, so an overloaded agent sheds sessions instead of queueing them forever (consistent
//! hashing with bounded loads, Mirrokni, Thorup and Zadimorghaddam, 2016).

/// Most a session's agent may carry, as a multiple of the mean in-flight load (plus one).
pub const LOAD_BOUND_FACTOR: f64 = 1.25;

/// What affinity needs to know of one candidate agent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate<'a> {
    /// The agent's id, hashed with the session.
    pub agent_id: &'a str,
    /// Requests routed to it and not yet answered.
    pub in_flight: u32,
    /// Requests it may have in flight.
    pub capacity: u32,
    /// Whether its synapse for this intent is healthy.
    pub healthy: bool,
}

/// The score of `agent_id` for `session`: FNV-1a over both, then a 64-bit finaliser, so scores
/// are stable across restarts and processes (a session keeps its agent after a broker restart).
pub fn score(session: &str, agent_id: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in session.bytes().chain([0xff]).chain(agent_id.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser: FNV alone clusters on ids that differ only in the last byte.
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// The index of the agent `session` goes to, or `None` when no candidate can take it.
/// `requests` is true for requests (which count against capacity and load); a plain publish
/// only skips unhealthy agents.
pub fn choose(session: &str, candidates: &[Candidate<'_>], requests: bool) -> Option<usize> {
    let mut order: Vec<(u64, usize)> =
        candidates.iter().enumerate().map(|(index, c)| (score(session, c.agent_id), index)).collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    let total: u64 = candidates.iter().map(|c| u64::from(c.in_flight)).sum();
    let bound = (LOAD_BOUND_FACTOR * (total as f64 + 1.0) / candidates.len().max(1) as f64).ceil();
    order.into_iter().map(|(_, index)| index).find(|&index| {
        let candidate = &candidates[index];
        candidate.healthy
            && (!requests || (candidate.in_flight < candidate.capacity && f64::from(candidate.in_flight) < bound))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(ids: &[String]) -> Vec<Candidate<'_>> {
        ids.iter().map(|id| Candidate { agent_id: id, in_flight: 0, capacity: 8, healthy: true }).collect()
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("agent-{i}")).collect()
    }

    #[test]
    fn the_same_session_goes_to_the_same_agent() {
        let ids = ids(4);
        let candidates = agents(&ids);
        let first = choose("conversation-17", &candidates, true);
        for _ in 0..10 {
            assert_eq!(choose("conversation-17", &candidates, true), first);
        }
    }

    #[test]
    fn sessions_spread_over_agents() {
        let ids = ids(4);
        let candidates = agents(&ids);
        let mut counts = [0usize; 4];
        for session in 0..4000 {
            counts[choose(&format!("s{session}"), &candidates, false).unwrap()] += 1;
        }
        assert!(counts.iter().all(|&c| (800..1200).contains(&c)), "{counts:?}");
    }

    #[test]
    fn a_new_agent_moves_about_one_in_n_plus_one_sessions_and_only_to_itself() {
        let four = ids(4);
        let five = ids(5);
        let (before, after) = (agents(&four), agents(&five));
        let mut moved = 0;
        for session in 0..5000 {
            let session = format!("s{session}");
            let old = choose(&session, &before, false).unwrap();
            let new = choose(&session, &after, false).unwrap();
            if old != new {
                moved += 1;
                assert_eq!(new, 4, "a moved session goes to the new agent");
            }
        }
        assert!((700..1300).contains(&moved), "about a fifth move: {moved}");
    }

    #[test]
    fn an_unhealthy_or_full_agent_sheds_its_sessions_to_the_next_in_order() {
        let ids = ids(3);
        let mut candidates = agents(&ids);
        let home = choose("s", &candidates, true).unwrap();
        candidates[home].healthy = false;
        let moved = choose("s", &candidates, true).unwrap();
        assert_ne!(moved, home);
        candidates[home].healthy = true;
        candidates[home].in_flight = candidates[home].capacity;
        assert_eq!(choose("s", &candidates, true), Some(moved), "full: the same next agent");
        assert_eq!(choose("s", &candidates, false), Some(home), "a plain publish ignores capacity");
    }

    #[test]
    fn an_agent_far_above_the_mean_load_sheds_requests() {
        let ids = ids(4);
        let mut candidates = agents(&ids);
        for candidate in &mut candidates {
            candidate.capacity = 100;
            candidate.in_flight = 3;
        }
        let home = choose("s", &candidates, true).unwrap();
        candidates[home].in_flight = 10;
        // Bound: 1.25 × (19 + 1) / 4 = 6.25, so ten in flight is over it.
        assert_ne!(choose("s", &candidates, true), Some(home));
        candidates[home].in_flight = 4;
        assert_eq!(choose("s", &candidates, true), Some(home), "bound 1.25 × 14 / 4 = 4.4: four may take one more");
    }

    #[test]
    fn nobody_can_take_it_when_all_are_unhealthy() {
        let ids = ids(2);
        let mut candidates = agents(&ids);
        candidates.iter_mut().for_each(|c| c.healthy = false);
        assert_eq!(choose("s", &candidates, false), None);
        assert_eq!(choose("s", &[], false), None);
    }
}
