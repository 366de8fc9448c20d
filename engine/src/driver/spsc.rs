//! A bounded lock-free single-producer single-consumer ring: how frames in flight cross
//! from one partition's thread to another's in the real-time engine. One ring per ordered
//! pair of partitions; the producer owns the tail, the consumer the head, and neither ever
//! waits for the other (a full ring refuses the item, which the producer keeps for later).
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// An index on its own cache line, so the two ends do not false-share.
#[repr(align(64))]
struct Padded(AtomicUsize);

struct Ring<T> {
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
    mask: usize,
    /// Next slot to read (written by the consumer only).
    head: Padded,
    /// Next slot to write (written by the producer only).
    tail: Padded,
}

// SAFETY: a slot is written only by the producer while it is outside [head, tail) and read
// only by the consumer while inside; the Release/Acquire pairs on head and tail order the
// slot accesses. T crosses threads, so it must be Send.
unsafe impl<T: Send> Sync for Ring<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Ring<T> {}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        let (mut h, t) = (*self.head.0.get_mut(), *self.tail.0.get_mut());
        while h != t {
            // SAFETY: slots in [head, tail) hold initialised items, dropped once here.
            unsafe { self.slots[h & self.mask].get_mut().assume_init_drop() };
            h = h.wrapping_add(1);
        }
    }
}

/// The writing end (one thread).
pub struct Producer<T> {
    ring: Arc<Ring<T>>,
}

/// The reading end (one thread).
pub struct Consumer<T> {
    ring: Arc<Ring<T>>,
}

/// A ring holding at least `cap` items (rounded up to a power of two).
pub fn ring<T: Send>(cap: usize) -> (Producer<T>, Consumer<T>) {
    let n = cap.max(2).next_power_of_two();
    let slots = (0..n)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let r = Arc::new(Ring {
        slots,
        mask: n - 1,
        head: Padded(AtomicUsize::new(0)),
        tail: Padded(AtomicUsize::new(0)),
    });
    (Producer { ring: r.clone() }, Consumer { ring: r })
}

impl<T> Producer<T> {
    /// Add `v` at the tail; gives it back if the ring is full.
    pub fn push(&mut self, v: T) -> Result<(), T> {
        let r = &*self.ring;
        let t = r.tail.0.load(Ordering::Relaxed);
        let h = r.head.0.load(Ordering::Acquire);
        if t.wrapping_sub(h) > r.mask {
            return Err(v);
        }
        // SAFETY: slot t is outside [head, tail): the consumer does not touch it, and only
        // this (single) producer writes it.
        unsafe { (*r.slots[t & r.mask].get()).write(v) };
        r.tail.0.store(t.wrapping_add(1), Ordering::Release);
        Ok(())
    }
}

impl<T> Consumer<T> {
    /// Take the item at the head, if any.
    pub fn pop(&mut self) -> Option<T> {
        let r = &*self.ring;
        let h = r.head.0.load(Ordering::Relaxed);
        let t = r.tail.0.load(Ordering::Acquire);
        if h == t {
            return None;
        }
        // SAFETY: slot h is inside [head, tail): initialised by the producer (ordered by the
        // Acquire load of tail) and read exactly once, by this (single) consumer.
        let v = unsafe { (*r.slots[h & r.mask].get()).assume_init_read() };
        r.head.0.store(h.wrapping_add(1), Ordering::Release);
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_full_and_drop() {
        let (mut p, mut c) = ring::<String>(3); // rounded to 4
        for i in 0..4 {
            assert!(p.push(i.to_string()).is_ok());
        }
        assert_eq!(p.push("x".into()), Err("x".to_string()));
        assert_eq!(c.pop().as_deref(), Some("0"));
        assert!(p.push("4".into()).is_ok());
        let got: Vec<String> = std::iter::from_fn(|| c.pop()).collect();
        assert_eq!(got, ["1", "2", "3", "4"]);
        assert_eq!(c.pop(), None);
        // Items left in the ring are dropped with it.
        p.push("left".into()).unwrap();
        drop(p);
        drop(c);
    }

    #[test]
    fn crosses_threads_in_order() {
        let (mut p, mut c) = ring::<u64>(64);
        let n = 200_000u64;
        let t = std::thread::spawn(move || {
            let mut i = 0;
            while i < n {
                if p.push(i).is_ok() {
                    i += 1;
                } else {
                    std::thread::yield_now();
                }
            }
        });
        let mut next = 0;
        while next < n {
            match c.pop() {
                Some(v) => {
                    assert_eq!(v, next);
                    next += 1;
                }
                None => std::thread::yield_now(),
            }
        }
        t.join().unwrap();
    }
}
