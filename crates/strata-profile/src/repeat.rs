//! How often a step watch speaks about a finding it has already reported: in full when it
//! first appears, then a one-line reminder 10, 20, 40, 80, ... steps later while it keeps
//! growing, so a watch over a long run prints a handful of lines, not a block per step.

use std::collections::BTreeMap;

/// Steps between the full report and the first reminder; each next gap doubles.
const FIRST_REMINDER: usize = 10;

/// What to say about a finding at this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Say {
    /// It is new: the full finding.
    Full,
    /// It was reported in full at step `since` and still grows: one line.
    Reminder {
        /// The watch step of the full report.
        since: usize,
    },
    /// Reported, and no reminder is due.
    Quiet,
}

#[derive(Debug, Clone, Copy)]
struct Reported {
    since: usize,
    next: usize,
    gap: usize,
}

/// The findings a watch has reported, by key (a site, or a kind), with when to remind.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    reported: BTreeMap<String, Reported>,
}

impl Repeats {
    /// What to say about `key`, found growing at watch step `step`.
    pub(crate) fn say(&mut self, key: &str, step: usize) -> Say {
        match self.reported.get_mut(key) {
            None => {
                self.reported.insert(
                    key.to_owned(),
                    Reported {
                        since: step,
                        next: step + FIRST_REMINDER,
                        gap: FIRST_REMINDER,
                    },
                );
                Say::Full
            }
            Some(r) if step >= r.next => {
                r.gap *= 2;
                r.next = step + r.gap;
                Say::Reminder { since: r.since }
            }
            Some(_) => Say::Quiet,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_is_reported_once_then_reminded_at_doubling_gaps() {
        let mut r = Repeats::default();
        let said: Vec<(usize, Say)> = (5..=100)
            .map(|step| (step, r.say("site", step)))
            .filter(|(_, s)| *s != Say::Quiet)
            .collect();
        assert_eq!(
            said,
            [
                (5, Say::Full),
                (15, Say::Reminder { since: 5 }),
                (35, Say::Reminder { since: 5 }),
                (75, Say::Reminder { since: 5 }),
            ]
        );
        // Another key is new on its own.
        assert_eq!(r.say("other", 100), Say::Full);
    }
}
