//! The test every step watch shares: which keys grew in every one of the last K steps.

use std::collections::{BTreeMap, VecDeque};

/// Per-step values by key (a site), keeping the last `window + 1` steps.
pub(crate) struct Growth<V> {
    window: usize,
    history: VecDeque<BTreeMap<String, V>>,
}

impl<V: Clone + Default> Growth<V> {
    pub(crate) fn new(window: usize) -> Self {
        Growth {
            window: window.max(1),
            history: VecDeque::new(),
        }
    }

    /// Records one step's values.
    pub(crate) fn push(&mut self, step: BTreeMap<String, V>) {
        self.history.push_back(step);
        while self.history.len() > self.window + 1 {
            self.history.pop_front();
        }
    }

    /// The keys whose `measure` rose in each of the last `window` steps, with their values
    /// then and now.
    pub(crate) fn grown(&self, measure: impl Fn(&V) -> usize) -> Vec<(String, V, V)> {
        if self.history.len() < self.window + 1 {
            return Vec::new();
        }
        let (first, last) = match (self.history.front(), self.history.back()) {
            (Some(f), Some(l)) => (f, l),
            _ => return Vec::new(),
        };
        let zero = V::default();
        last.iter()
            .filter(|(k, _)| {
                self.history
                    .iter()
                    .zip(self.history.iter().skip(1))
                    .all(|(a, b)| {
                        measure(b.get(*k).unwrap_or(&zero)) > measure(a.get(*k).unwrap_or(&zero))
                    })
            })
            .map(|(k, v)| {
                (
                    k.clone(),
                    first.get(k).cloned().unwrap_or_default(),
                    v.clone(),
                )
            })
            .collect()
    }

    /// The number of steps each report spans.
    pub(crate) fn window(&self) -> usize {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_growth_in_every_step_counts() {
        let mut g = Growth::<usize>::new(3);
        for (a, b) in [(1, 5), (2, 5), (3, 6), (4, 5)] {
            g.push(BTreeMap::from([("a".to_owned(), a), ("b".to_owned(), b)]));
        }
        let grown = g.grown(|v| *v);
        assert_eq!(grown, vec![("a".to_owned(), 1, 4)]);
    }
}
