//! Outboxes: how the core hands work to the connection tasks that drain it.
//!
//! Each agent and each consumerd has one [`Outbox`]: an unbounded lock-free
//! FIFO plus a waker slot. Any thread pushes (placing a task, answering one);
//! only the owning session pops. An async connection task registers its
//! waker and is woken by the next push; a synchronous owner (a bench thread,
//! a test) just polls. The length is bounded from outside: an agent's outbox
//! holds at most its tokens' worth of assignments plus cancels of those, and
//! a consumerd's at most its tasks in flight.

use std::task::Waker;

use crate::sync::{Queue, WakerSlot};

/// A multi-producer, single-consumer queue with a waker.
pub(crate) struct Outbox<T> {
    queue: Queue<T>,
    waker: WakerSlot,
}

impl<T> Outbox<T> {
    pub(crate) fn new() -> Self {
        Outbox { queue: Queue::new(), waker: WakerSlot::new() }
    }

    /// Appends and wakes the owner.
    #[inline]
    pub(crate) fn push(&self, value: T) {
        self.queue.push(value);
        self.waker.wake();
    }

    /// Takes the oldest entry.
    #[inline]
    pub(crate) fn pop(&self) -> Option<T> {
        self.queue.pop()
    }

    /// Wakes `waker` at the next push. Register, then pop once more before
    /// sleeping: a push between the last empty pop and the registration
    /// would otherwise be missed.
    pub(crate) fn register(&self, waker: &Waker) {
        self.waker.register(waker);
    }
}

impl<T> std::fmt::Debug for Outbox<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").field("len", &self.queue.len()).finish()
    }
}
