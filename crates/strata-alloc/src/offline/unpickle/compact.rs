//! Handing trace entries to the [`Compactor`] as their list receives them, so that a long
//! trace never exists in the arena as dicts (see [`Compactor`]).

use super::machine::Machine;
use super::*;

impl Machine<'_, '_> {
    /// Offers `item`, just appended to a list, to the compactor when it is a trace entry (a
    /// dict with an `action` key whose values are plain, besides its `frames` list). A kept
    /// entry's slot becomes [`Obj::Mapped`], its frames list [`Obj::Frames`], and the slots of
    /// its values are reused.
    pub(super) fn compact(&mut self, item: Id) {
        let Some(compactor) = self.compactor.take() else {
            return;
        };
        self.offer(item, &mut *compactor);
        self.compactor = Some(compactor);
    }

    fn offer(&mut self, item: Id, compactor: &mut dyn Compactor) {
        let Some(Obj::Dict(entries)) = self.arena.get(item) else {
            return;
        };
        if !entries.iter().any(|(k, _)| self.key(*k) == "action") {
            return;
        }
        let mut frames_list = None;
        let mut plain = 0;
        for (i, (k, v)) in entries.iter().enumerate() {
            let k = self.key(*k);
            if entries[..i].iter().any(|(seen, _)| self.key(*seen) == k) {
                // A key set twice: the generic reading knows Python's rule.
                return;
            }
            match self.arena.get(*v) {
                Some(Obj::List(_) | Obj::Frames(_)) if k == "frames" => frames_list = Some(*v),
                Some(Obj::Atom(a)) if !matches!(a, PyValue::Bytes(_)) => plain += 1,
                _ => return,
            }
        }
        let frames = match frames_list {
            None => self
                .stacks
                .entry(Vec::new())
                .or_insert_with(|| Frames::from([]))
                .clone(),
            Some(list) => match self.stack_of(list, compactor) {
                Some(f) => f,
                None => return,
            },
        };
        let Some(Obj::Dict(entries)) = self.arena.get(item) else {
            return;
        };
        let mut items: Vec<(&str, &PyValue)> = Vec::with_capacity(plain);
        for (k, v) in entries {
            if let Some(Obj::Atom(a)) = self.arena.get(*v) {
                items.push((self.key(*k), a));
            }
        }
        let Some(index) = compactor.entry(&items, frames.clone()) else {
            return;
        };
        let Some(slot) = self.arena.get_mut(item) else {
            return;
        };
        let Obj::Dict(entries) = std::mem::replace(slot, Obj::Mapped(index)) else {
            return;
        };
        for id in entries.into_iter().flat_map(|(k, v)| [k, v]) {
            if Some(id) == frames_list || self.pinned.get(id).copied().unwrap_or(true) {
                continue;
            }
            if let Some(slot @ Obj::Atom(_)) = self.arena.get_mut(id) {
                *slot = Obj::Atom(PyValue::None);
                self.free.push(id);
            }
        }
        if let Some(slot @ Obj::List(_)) = frames_list.and_then(|l| self.arena.get_mut(l)) {
            *slot = Obj::Frames(frames);
        }
    }

    /// The stack of the frames list `list`, mapped by the compactor the first time its frame
    /// dicts are seen together.
    fn stack_of(&mut self, list: Id, compactor: &mut dyn Compactor) -> Option<Frames> {
        let ids = match self.arena.get(list)? {
            Obj::Frames(f) => return Some(f.clone()),
            Obj::List(ids) => ids,
            _ => return None,
        };
        if let Some(f) = self.stacks.get(ids) {
            return Some(f.clone());
        }
        // Only frame dicts the memo holds can be referenced again: a stack of others (a
        // writer that repeats its frames) is mapped at each entry, and shared by content.
        let shared = ids
            .iter()
            .all(|&id| self.pinned.get(id).copied().unwrap_or(false));
        let key = shared.then(|| ids.clone());
        let mut budget = expansion_budget(self.data.len());
        let value = self.build(list, 0, &mut budget, self.pos).ok()?;
        let frames = compactor.stack(&value)?;
        if let Some(key) = key {
            self.stacks.insert(key, frames.clone());
        }
        Some(frames)
    }

    /// A list of compacted entries with consecutive indices, as one [`PyValue::Mapped`] run.
    pub(super) fn mapped_run(&self, ids: &[Id]) -> Option<PyValue> {
        let index = |id: &Id| match self.arena.get(*id) {
            Some(Obj::Mapped(i)) => Some(*i),
            _ => None,
        };
        let first = index(ids.first()?)?;
        for (k, id) in ids.iter().enumerate() {
            if index(id)? != first + k {
                return None;
            }
        }
        Some(PyValue::Mapped {
            first,
            len: ids.len(),
        })
    }
}
