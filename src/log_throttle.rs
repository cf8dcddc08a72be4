//! Log lines a flood could repeat thousands of times a second (a forwarder falling behind, an
//! overrun per report), said at most once per interval with the count of those held back since:
//! the log stays readable and its disk does not fill, and nothing is hidden, only counted.

use std::time::{Duration, Instant};

/// How often a throttled line is said at most.
pub const EVERY: Duration = Duration::from_secs(10);

/// One line's throttle.
#[derive(Debug, Default)]
pub struct Throttle {
    last_said: Option<Instant>,
    held_back: u64,
}

impl Throttle {
    /// Whether to say the line now: if so, how many times it was held back since it was last
    /// said (0 the first time); if not, this time is counted.
    pub fn due(&mut self) -> Option<u64> {
        self.due_at(Instant::now())
    }

    fn due_at(&mut self, now: Instant) -> Option<u64> {
        if self
            .last_said
            .is_some_and(|t| now.saturating_duration_since(t) < EVERY)
        {
            self.held_back += 1;
            return None;
        }
        self.last_said = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn said_once_per_interval_with_what_was_held_back() {
        let mut t = Throttle::default();
        let start = Instant::now();
        assert_eq!(t.due_at(start), Some(0));
        assert_eq!(t.due_at(start + Duration::from_secs(1)), None);
        assert_eq!(t.due_at(start + Duration::from_secs(9)), None);
        assert_eq!(t.due_at(start + EVERY), Some(2));
        assert_eq!(t.due_at(start + EVERY), None);
        assert_eq!(t.due_at(start + 2 * EVERY), Some(1));
    }
}
