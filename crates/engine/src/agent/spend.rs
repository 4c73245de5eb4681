//! What one conversation has spent, shared by its own agent and the agents that make requests
//! apart from its turns (a side question, an inline edit), so that one `max_cost` holds them
//! all: each of those checks the conversation's whole spending before its request, and its cost
//! counts against the conversation's next turns.

use std::sync::{Arc, Mutex, PoisonError};

/// A conversation's spending, in dollars (what could be priced). Clones share it.
#[derive(Clone, Default, Debug)]
pub struct Spend(Arc<Mutex<Tally>>);

#[derive(Default, Debug)]
struct Tally {
    /// The conversation's own turns (and compactions asked for), as its agent last said.
    turns: f64,
    /// Requests made apart from its turns.
    apart: f64,
    /// Which conversation this is, counted from 0: a request apart that began in an earlier
    /// one (a side question still answering when `:Agent new here` came) is not this one's.
    generation: u64,
}

impl Spend {
    fn with<T>(&self, f: impl FnOnce(&mut Tally) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Everything the conversation has spent.
    pub fn total(&self) -> f64 {
        self.with(|t| t.turns + t.apart)
    }

    /// What requests apart from its turns have cost.
    pub fn apart(&self) -> f64 {
        self.with(|t| t.apart)
    }

    /// The conversation's own agent says what its turns have cost now.
    pub(crate) fn set_turns(&self, cost: f64) {
        self.with(|t| t.turns = cost);
    }

    /// Which conversation is counted now ([`Spend::start_over`] makes another).
    pub(crate) fn generation(&self) -> u64 {
        self.with(|t| t.generation)
    }

    /// A request apart from the turns, begun in conversation `generation`, cost `cost`:
    /// counted when that is still the conversation counted.
    pub(crate) fn add_apart(&self, cost: f64, generation: u64) {
        if cost.is_finite() && cost > 0.0 {
            self.with(|t| {
                if t.generation == generation {
                    t.apart += cost;
                }
            });
        }
    }

    /// Another conversation is counted from now on (a new one, one resumed, an external
    /// agent's), from `turns`, nothing spent apart.
    pub fn start_over(&self, turns: f64) {
        self.with(|t| {
            *t = Tally {
                turns,
                apart: 0.0,
                generation: t.generation + 1,
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_one_tally_and_a_start_over_forgets_what_was_spent_apart() {
        let spend = Spend::default();
        let side = spend.clone();
        spend.set_turns(0.5);
        let first = side.generation();
        side.add_apart(0.25, first);
        side.add_apart(f64::NAN, first);
        side.add_apart(-1.0, first);
        assert_eq!(spend.total(), 0.75);
        assert_eq!(spend.apart(), 0.25);
        spend.start_over(0.125);
        assert_eq!(side.total(), 0.125);
        assert_eq!(side.apart(), 0.0);
        // A request begun before the start over is not the new conversation's.
        side.add_apart(0.5, first);
        assert_eq!(side.total(), 0.125);
        side.add_apart(0.5, side.generation());
        assert_eq!(side.total(), 0.625);
    }
}
