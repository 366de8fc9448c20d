//! A slot arena with optional string ids: the one collection type behind the network's
//! ports, links, LANs, pipelines, routers, hosts and agents.
//!
//! Indices are handed out in insertion order and never reused, so a stale index (a timer
//! queued before a removal, a capture handle) finds an empty slot instead of a different
//! object. Iteration is in index order, never in hash order, so anything derived from it
//! (stats, validation messages) is deterministic.
use std::collections::HashMap;

#[derive(Debug)]
struct Slot<T> {
    id: Option<String>,
    value: T,
}

#[derive(Debug)]
pub struct Arena<T> {
    slots: Vec<Option<Slot<T>>>,
    ids: HashMap<String, usize>,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena {
            slots: Vec::new(),
            ids: HashMap::new(),
        }
    }
}

impl<T> Arena<T> {
    pub fn new() -> Self {
        Self::default()
    }

    /// The index the next [`Arena::push`] or [`Arena::insert`] returns.
    pub fn next_index(&self) -> usize {
        self.slots.len()
    }

    /// Add a value without an id.
    pub fn push(&mut self, value: T) -> usize {
        self.slots.push(Some(Slot { id: None, value }));
        self.slots.len() - 1
    }

    /// Add a value under `id` (a later value with the same id takes the id over; callers
    /// check uniqueness first).
    pub fn insert(&mut self, id: String, value: T) -> usize {
        let i = self.slots.len();
        self.ids.insert(id.clone(), i);
        self.slots.push(Some(Slot {
            id: Some(id),
            value,
        }));
        i
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        self.slots.get(i)?.as_ref().map(|s| &s.value)
    }

    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i)?.as_mut().map(|s| &mut s.value)
    }

    pub fn index_of(&self, id: &str) -> Option<usize> {
        self.ids.get(id).copied()
    }

    pub fn contains_id(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    pub fn by_id(&self, id: &str) -> Option<&T> {
        self.get(self.index_of(id)?)
    }

    pub fn by_id_mut(&mut self, id: &str) -> Option<&mut T> {
        let i = self.index_of(id)?;
        self.get_mut(i)
    }

    /// The id a live slot was inserted under.
    pub fn id_of(&self, i: usize) -> Option<&str> {
        self.slots.get(i)?.as_ref()?.id.as_deref()
    }

    /// Empty slot `i` (and free its id); the index is never handed out again.
    pub fn remove(&mut self, i: usize) -> Option<T> {
        let slot = self.slots.get_mut(i)?.take()?;
        if let Some(id) = &slot.id {
            if self.ids.get(id) == Some(&i) {
                self.ids.remove(id);
            }
        }
        Some(slot.value)
    }

    pub fn remove_id(&mut self, id: &str) -> Option<T> {
        self.remove(self.index_of(id)?)
    }

    /// Live values in index order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten().map(|s| &s.value)
    }

    /// Live values in index order, mutable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.slots.iter_mut().flatten().map(|s| &mut s.value)
    }

    /// Live (index, value) pairs in index order.
    pub fn iter_indexed(&self) -> impl Iterator<Item = (usize, &T)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, &s.value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_are_never_reused() {
        let mut a = Arena::new();
        let x = a.insert("x".into(), 1);
        let p = a.push(2);
        assert_eq!((x, p, a.next_index()), (0, 1, 2));
        assert_eq!(a.remove_id("x"), Some(1));
        assert!(a.get(x).is_none() && !a.contains_id("x"));
        let y = a.insert("x".into(), 3);
        assert_eq!(y, 2, "a freed index is not handed out again");
        assert_eq!(a.by_id("x"), Some(&3));
        assert_eq!(a.iter().copied().collect::<Vec<_>>(), vec![2, 3]);
        assert_eq!(a.iter_indexed().map(|(i, _)| i).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(a.remove(7), None);
        assert_eq!(a.remove(x), None);
    }

    #[test]
    fn removing_a_shadowed_slot_keeps_the_newer_id() {
        let mut a = Arena::new();
        let old = a.insert("p".into(), 'a');
        let new = a.insert("p".into(), 'b');
        assert_eq!(a.index_of("p"), Some(new));
        a.remove(old);
        assert_eq!(a.index_of("p"), Some(new));
        assert_eq!(a.id_of(new), Some("p"));
        *a.by_id_mut("p").unwrap() = 'c';
        assert_eq!(a.get(new), Some(&'c'));
    }
}
