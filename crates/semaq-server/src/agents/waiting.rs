//! Requests waiting for an agent with free capacity, by `Semaq-Priority`. Pure.
//!
//! One FIFO per priority; the next request comes by the stride rule of [`crate::priority`]
//! (8 : 4 : 2 : 1, so priority 3 waits behind at most `STARVATION_BOUND` others).

use std::collections::VecDeque;

use crate::priority::{Stride, PRIORITIES};

/// Waiting items with the time (µs) after which each gives up.
#[derive(Debug)]
pub struct Waiting<T> {
    queues: [VecDeque<(u64, T)>; PRIORITIES],
    stride: Stride,
    len: usize,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Self { queues: Default::default(), stride: Stride::default(), len: 0 }
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
            let backlogged = self.backlogged();
            self.stride.rejoin(priority, backlogged);
        }
        self.queues[priority].push_back((deadline_us, item));
        self.len += 1;
    }

    fn backlogged(&self) -> [bool; PRIORITIES] {
        std::array::from_fn(|p| !self.queues[p].is_empty())
    }

    /// The next item by priority share, or `None` when nothing waits.
    pub fn pop(&mut self) -> Option<T> {
        let priority = self.stride.pick(self.backlogged())?;
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
    use crate::priority::STARVATION_BOUND;

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
}
