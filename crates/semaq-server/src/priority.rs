//! `Semaq-Priority` (SPEC §2) and the stride scheduling that shares hand-outs among priorities.
//! Pure; used by the agent network's waiting requests and by priority-ordered consumers.
//!
//! Priority 0 is real-time inference, 1 interactive, 2 batch, 3 offline training. The next item
//! comes from the backlogged priority with the lowest *pass*: taking from priority `p` advances
//! its pass by `STRIDES[p]`. With every priority backlogged, 15 hand-outs give 8 to priority 0,
//! 4 to 1, 2 to 2 and 1 to 3, so lower numbers go first while priority 3 still moves: an item at
//! the head of its queue waits behind at most [`STARVATION_BOUND`] others. A priority that was
//! idle rejoins at the current pass, so idleness banks no credit.

/// Priorities, 0 to 3.
pub const PRIORITIES: usize = 4;
/// The priority of a message without a valid `Semaq-Priority`.
pub const PRIORITY_DEFAULT: u8 = 1;
/// How far one hand-out advances each priority's pass: shares 8 : 4 : 2 : 1.
pub const STRIDES: [u64; PRIORITIES] = [1, 2, 4, 8];
/// Most hand-outs to other priorities while an item waits at the head of its queue: one full
/// round of the other strides (7 + 4 + 2 + 1 in the worst phase for priority 3).
pub const STARVATION_BOUND: usize = 14;

/// The priority a `Semaq-Priority` value names; anything else is the default.
pub fn priority_of(value: Option<&str>) -> u8 {
    match value.map(str::trim) {
        Some("0") => 0,
        Some("2") => 2,
        Some("3") => 3,
        _ => PRIORITY_DEFAULT,
    }
}

/// The passes of the four priorities; the caller keeps the queues and says which are backlogged.
#[derive(Debug, Default, Clone)]
pub struct Stride {
    passes: [u64; PRIORITIES],
}

impl Stride {
    /// Call before queueing at `priority` when its queue is empty: it rejoins at the lowest pass
    /// among the `backlogged` priorities, never earlier than where it stopped.
    pub fn rejoin(&mut self, priority: usize, backlogged: [bool; PRIORITIES]) {
        let current = (0..PRIORITIES).filter(|&p| backlogged[p]).map(|p| self.passes[p]).min().unwrap_or(0);
        if let Some(pass) = self.passes.get_mut(priority) {
            *pass = (*pass).max(current);
        }
    }

    /// The priority to take from next among the `backlogged` ones, its pass advanced.
    pub fn pick(&mut self, backlogged: [bool; PRIORITIES]) -> Option<usize> {
        let priority = (0..PRIORITIES).filter(|&p| backlogged[p]).min_by_key(|&p| (self.passes[p], p))?;
        self.passes[priority] += STRIDES[priority];
        Some(priority)
    }

    /// Takes back a [`Stride::pick`] whose item was returned to the front of its queue.
    pub fn unpick(&mut self, priority: usize) {
        if let Some(pass) = self.passes.get_mut(priority) {
            *pass = pass.saturating_sub(STRIDES[priority]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priorities_are_read_from_the_header_value() {
        assert_eq!(priority_of(Some("0")), 0);
        assert_eq!(priority_of(Some(" 3 ")), 3);
        assert_eq!(priority_of(Some("7")), PRIORITY_DEFAULT);
        assert_eq!(priority_of(Some("high")), PRIORITY_DEFAULT);
        assert_eq!(priority_of(None), PRIORITY_DEFAULT);
    }

    #[test]
    fn with_all_backlogged_the_shares_are_eight_four_two_one() {
        let mut stride = Stride::default();
        let mut counts = [0; PRIORITIES];
        for _ in 0..1500 {
            counts[stride.pick([true; PRIORITIES]).unwrap()] += 1;
        }
        assert_eq!(counts, [800, 400, 200, 100]);
    }

    #[test]
    fn an_unpicked_hand_out_is_not_charged() {
        let mut stride = Stride::default();
        let first = stride.pick([true; PRIORITIES]).unwrap();
        stride.unpick(first);
        assert_eq!(stride.pick([true; PRIORITIES]), Some(first));
    }
}
