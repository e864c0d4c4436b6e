//! Requests waiting for an agent with free capacity, by `Semaq-Priority`. Pure.
//!
//! One FIFO per priority (0 real-time … 3 offline training). The next request comes from the
//! backlogged priority with the lowest *pass* (stride scheduling): taking from priority `p`
//! advances its pass by `STRIDES[p]`. With every priority backlogged, 15 hand-outs give
//! 8 to priority 0, 4 to 1, 2 to 2 and 1 to 3, so lower numbers go first while priority 3
//! still moves: a request at the head of its queue waits at most `STARVATION_BOUND` others.
//! A queue that was empty rejoins at the current pass, so idleness banks no credit.

use std::collections::VecDeque;

/// Priorities, 0 to 3 (SPEC §2).
pub const PRIORITIES: usize = 4;
/// The priority of a message without a valid `Semaq-Priority`.
pub const PRIORITY_DEFAULT: u8 = 1;
/// How far one hand-out advances each priority's pass: shares 8 : 4 : 2 : 1.
pub const STRIDES: [u64; PRIORITIES] = [1, 2, 4, 8];

/// The priority a `Semaq-Priority` value names; anything else is the default.
pub fn priority_of(value: Option<&str>) -> u8 {
    match value.map(str::trim) {
        Some("0") => 0,
        Some("2") => 2,
        Some("3") => 3,
        _ => PRIORITY_DEFAULT,
    }
}

/// Waiting items with the time (µs) after which each gives up.
#[derive(Debug)]
pub struct Waiting<T> {
    queues: [VecDeque<(u64, T)>; PRIORITIES],
    passes: [u64; PRIORITIES],
    len: usize,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Self { queues: Default::default(), passes: [0; PRIORITIES], len: 0 }
    }
}

impl<T> Waiting<T> {
    /// Items waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `item` at `priority` (clamped to 0..=3) until `deadline_us`.
    pub fn push(&mut self, priority: u8, deadline_us: u64, item: T) {
        let priority = usize::from(priority).min(PRIORITIES - 1);
        if self.queues[priority].is_empty() {
            let current = self.current_pass();
            self.passes[priority] = self.passes[priority].max(current);
        }
        self.queues[priority].push_back((deadline_us, item));
        self.len += 1;
    }

    /// The lowest pass among backlogged priorities (0 when none is).
    fn current_pass(&self) -> u64 {
        (0..PRIORITIES).filter(|&p| !self.queues[p].is_empty()).map(|p| self.passes[p]).min().unwrap_or(0)
    }

    /// The next item by priority share, or `None` when nothing waits.
    pub fn pop(&mut self) -> Option<T> {
        let priority = (0..PRIORITIES).filter(|&p| !self.queues[p].is_empty()).min_by_key(|&p| (self.passes[p], p))?;
        self.passes[priority] += STRIDES[priority];
        self.len -= 1;
        self.queues[priority].pop_front().map(|(_, item)| item)
    }

    /// Removes and returns every item whose deadline is at or before `now_us`.
    pub fn expire(&mut self, now_us: u64) -> Vec<T> {
        let mut expired = Vec::new();
        for queue in &mut self.queues {
            // Deadlines grow along each queue (one wait bound), so expired ones are at the front.
            while queue.front().is_some_and(|(deadline, _)| *deadline <= now_us) {
                if let Some((_, item)) = queue.pop_front() {
                    expired.push(item);
                }
            }
        }
        self.len -= expired.len();
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Most hand-outs to other priorities while a request waits at the head of its queue:
    /// one full round of the other strides.
    const STARVATION_BOUND: usize = 14;

    #[test]
    fn one_priority_is_first_in_first_out() {
        let mut waiting = Waiting::default();
        for n in 0..5 {
            waiting.push(2, 100, n);
        }
        assert_eq!((0..5).map(|_| waiting.pop().unwrap()).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
        assert_eq!(waiting.pop(), None);
    }

    #[test]
    fn lower_numbers_go_first_in_the_ratio_eight_four_two_one() {
        let mut waiting = Waiting::default();
        for n in 0..1000 {
            for priority in 0..4u8 {
                waiting.push(priority, 100, (priority, n));
            }
        }
        let mut counts = [0; 4];
        for _ in 0..1500 {
            counts[usize::from(waiting.pop().unwrap().0)] += 1;
        }
        assert_eq!(counts, [800, 400, 200, 100]);
    }

    #[test]
    fn priority_three_never_waits_behind_more_than_the_starvation_bound() {
        let mut waiting = Waiting::default();
        for n in 0..200 {
            for priority in 0..3u8 {
                waiting.push(priority, 100, (priority, n));
            }
        }
        waiting.push(3, 100, (3, 0));
        let position = (0..).find(|_| waiting.pop().unwrap().0 == 3).unwrap();
        assert!(position <= STARVATION_BOUND, "priority 3 waited behind {position}");
    }

    #[test]
    fn an_idle_priority_banks_no_credit() {
        let mut waiting = Waiting::default();
        for n in 0..100 {
            waiting.push(1, 100, (1, n));
        }
        for _ in 0..90 {
            waiting.pop();
        }
        // Priority 0 arrives late: it gets its 2 : 1 share from now on, not 90 hand-outs at once.
        for n in 0..100 {
            waiting.push(0, 100, (0, n));
        }
        let firsts: Vec<u8> = (0..6).map(|_| waiting.pop().unwrap().0).collect();
        assert!(firsts.contains(&1), "{firsts:?}");
    }

    #[test]
    fn expired_items_leave_and_the_rest_stay() {
        let mut waiting = Waiting::default();
        waiting.push(1, 10, "early");
        waiting.push(1, 20, "late");
        waiting.push(3, 5, "earliest");
        assert_eq!(waiting.expire(10), vec!["early", "earliest"]);
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting.pop(), Some("late"));
    }

    #[test]
    fn priorities_are_read_from_the_header_value() {
        assert_eq!(priority_of(Some("0")), 0);
        assert_eq!(priority_of(Some(" 3 ")), 3);
        assert_eq!(priority_of(Some("7")), PRIORITY_DEFAULT);
        assert_eq!(priority_of(Some("high")), PRIORITY_DEFAULT);
        assert_eq!(priority_of(None), PRIORITY_DEFAULT);
    }
}
