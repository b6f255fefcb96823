//! A sliding-window rate meter: entities counted in ten slots spanning the window. Pure:
//! every method takes the current instant.

use std::time::{Duration, Instant};

const SLOTS: usize = 10;

#[derive(Debug, Clone)]
pub(super) struct Window {
    slots: [u64; SLOTS],
    /// Start of the slot `current` counts into.
    slot_start: Instant,
    current: usize,
    width: Duration,
}

impl Window {
    pub(super) fn new(window: Duration, now: Instant) -> Self {
        Self {
            slots: [0; SLOTS],
            slot_start: now,
            current: 0,
            width: (window / SLOTS as u32).max(Duration::from_millis(1)),
        }
    }

    fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.slot_start);
        let steps = (elapsed.as_nanos() / self.width.as_nanos()) as usize;
        if steps == 0 {
            return;
        }
        for i in 1..=steps.min(SLOTS) {
            self.slots[(self.current + i) % SLOTS] = 0;
        }
        self.current = (self.current + steps) % SLOTS;
        self.slot_start += self.width * (steps.min(u32::MAX as usize) as u32);
    }

    pub(super) fn add(&mut self, n: u64, now: Instant) {
        self.advance(now);
        self.slots[self.current] += n;
    }

    /// Entities per second over the window ending at `now`.
    pub(super) fn rate(&mut self, now: Instant) -> f64 {
        self.advance(now);
        let total: u64 = self.slots.iter().sum();
        total as f64 / (self.width * SLOTS as u32).as_secs_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_within_the_window_and_forgets_what_slid_out() {
        let t0 = Instant::now();
        let mut w = Window::new(Duration::from_secs(1), t0);
        w.add(100, t0);
        w.add(50, t0 + Duration::from_millis(550));
        assert_eq!(w.rate(t0 + Duration::from_millis(900)), 150.0);
        // The first slot slid out after one window.
        assert_eq!(w.rate(t0 + Duration::from_millis(1_050)), 50.0);
        assert_eq!(w.rate(t0 + Duration::from_secs(10)), 0.0);
        w.add(7, t0 + Duration::from_secs(10));
        assert_eq!(w.rate(t0 + Duration::from_secs(10)), 7.0);
    }
}
