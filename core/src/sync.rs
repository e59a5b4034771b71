//! The loom shim: std (and crossbeam, arc-swap, dashmap) or loom, by
//! `cfg(ccroute_loom)`.
//!
//! Only the concurrent core — tokens, the task lifecycle, route queues and
//! outboxes — imports from here. Under `ccroute_loom` every primitive comes
//! from loom so that its models explore the core's interleavings; the
//! lock-free containers loom cannot see inside (crossbeam's `SegQueue`,
//! arc-swap, dashmap) are replaced by a `Mutex` around the plain structure
//! behind the same API. The models therefore check our own atomics and the
//! protocol between them, and take the containers' linearizability as given.

#[cfg(ccroute_loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(ccroute_loom)]
pub(crate) use loom::sync::Arc;
#[cfg(ccroute_loom)]
pub(crate) use loom::thread::yield_now;

#[cfg(not(ccroute_loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(ccroute_loom))]
pub(crate) use std::sync::Arc;
#[cfg(not(ccroute_loom))]
pub(crate) use std::thread::yield_now;

pub(crate) use crossbeam_utils::CachePadded;

pub(crate) use self::imp::{Queue, ShardedMap, Snapshot, WakerSlot};

#[cfg(not(ccroute_loom))]
mod imp {
    use std::hash::Hash;
    use std::sync::Arc;
    use std::task::Waker;

    /// An unbounded lock-free MPMC FIFO.
    pub(crate) struct Queue<T>(crossbeam_queue::SegQueue<T>);

    impl<T> Queue<T> {
        pub(crate) fn new() -> Self {
            Queue(crossbeam_queue::SegQueue::new())
        }
        pub(crate) fn push(&self, value: T) {
            self.0.push(value);
        }
        pub(crate) fn pop(&self) -> Option<T> {
            self.0.pop()
        }
        pub(crate) fn len(&self) -> usize {
            self.0.len()
        }
    }

    /// A value read often and replaced rarely: reads take no lock.
    pub(crate) struct Snapshot<T>(arc_swap::ArcSwap<T>);

    impl<T> Snapshot<T> {
        pub(crate) fn new(value: T) -> Self {
            Snapshot(arc_swap::ArcSwap::from_pointee(value))
        }
        pub(crate) fn load(&self) -> arc_swap::Guard<Arc<T>> {
            self.0.load()
        }
        /// Replaces the value with `f(current)`. Callers serialize their
        /// updates (they hold the route's map entry), so no update is lost.
        pub(crate) fn update(&self, f: impl FnOnce(&T) -> T) {
            let next = f(&self.0.load());
            self.0.store(Arc::new(next));
        }
    }

    /// A sharded concurrent map. Every method locks one shard for its
    /// duration (dashmap's rules: never call back into the same map from
    /// inside `with_entry`, or it may deadlock on that shard).
    pub(crate) struct ShardedMap<K, V>(dashmap::DashMap<K, V>);

    impl<K: Eq + Hash + Clone, V: Clone> ShardedMap<K, V> {
        pub(crate) fn new() -> Self {
            ShardedMap(dashmap::DashMap::new())
        }
        /// Clones the value out; holds a shard read lock briefly.
        pub(crate) fn get(&self, key: &K) -> Option<V> {
            self.0.get(key).map(|v| v.value().clone())
        }
        /// Runs `f` on the value for `key`, inserting `make()` first if absent,
        /// with the shard write-locked throughout.
        pub(crate) fn with_entry<R>(&self, key: K, make: impl FnOnce() -> V, f: impl FnOnce(&V) -> R) -> R {
            let entry = self.0.entry(key).or_insert_with(make);
            f(entry.value())
        }
        /// Inserts, returning the previous value.
        pub(crate) fn insert(&self, key: K, value: V) -> Option<V> {
            self.0.insert(key, value)
        }
        /// Removes `key` if `pred` holds, under the shard write lock.
        pub(crate) fn remove_if(&self, key: &K, pred: impl FnOnce(&V) -> bool) -> Option<V> {
            self.0.remove_if(key, |_, v| pred(v)).map(|(_, v)| v)
        }
        pub(crate) fn remove(&self, key: &K) -> Option<V> {
            self.0.remove(key).map(|(_, v)| v)
        }
        /// A copy of every value; locks each shard in turn, never two at once.
        pub(crate) fn values(&self) -> Vec<V> {
            self.0.iter().map(|e| e.value().clone()).collect()
        }
    }

    /// Where an async consumer parks its waker.
    pub(crate) struct WakerSlot(atomic_waker::AtomicWaker);

    impl WakerSlot {
        pub(crate) fn new() -> Self {
            WakerSlot(atomic_waker::AtomicWaker::new())
        }
        pub(crate) fn register(&self, waker: &Waker) {
            self.0.register(waker);
        }
        pub(crate) fn wake(&self) {
            self.0.wake();
        }
    }
}

#[cfg(ccroute_loom)]
mod imp {
    use std::collections::{HashMap, VecDeque};
    use std::hash::Hash;
    use std::task::Waker;

    use loom::sync::{Arc, Mutex};

    fn lock<T>(m: &Mutex<T>) -> loom::sync::MutexGuard<'_, T> {
        match m.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub(crate) struct Queue<T>(Mutex<VecDeque<T>>);

    impl<T> Queue<T> {
        pub(crate) fn new() -> Self {
            Queue(Mutex::new(VecDeque::new()))
        }
        pub(crate) fn push(&self, value: T) {
            lock(&self.0).push_back(value);
        }
        pub(crate) fn pop(&self) -> Option<T> {
            lock(&self.0).pop_front()
        }
        pub(crate) fn len(&self) -> usize {
            lock(&self.0).len()
        }
    }

    pub(crate) struct Snapshot<T>(Mutex<Arc<T>>);

    impl<T> Snapshot<T> {
        pub(crate) fn new(value: T) -> Self {
            Snapshot(Mutex::new(Arc::new(value)))
        }
        pub(crate) fn load(&self) -> Arc<T> {
            lock(&self.0).clone()
        }
        pub(crate) fn update(&self, f: impl FnOnce(&T) -> T) {
            let mut g = lock(&self.0);
            let next = f(&g);
            *g = Arc::new(next);
        }
    }

    pub(crate) struct ShardedMap<K, V>(Mutex<HashMap<K, V>>);

    impl<K: Eq + Hash + Clone, V: Clone> ShardedMap<K, V> {
        pub(crate) fn new() -> Self {
            ShardedMap(Mutex::new(HashMap::new()))
        }
        pub(crate) fn get(&self, key: &K) -> Option<V> {
            lock(&self.0).get(key).cloned()
        }
        pub(crate) fn with_entry<R>(&self, key: K, make: impl FnOnce() -> V, f: impl FnOnce(&V) -> R) -> R {
            let mut g = lock(&self.0);
            let v = g.entry(key).or_insert_with(make);
            f(v)
        }
        pub(crate) fn insert(&self, key: K, value: V) -> Option<V> {
            lock(&self.0).insert(key, value)
        }
        pub(crate) fn remove_if(&self, key: &K, pred: impl FnOnce(&V) -> bool) -> Option<V> {
            let mut g = lock(&self.0);
            if g.get(key).is_some_and(pred) {
                g.remove(key)
            } else {
                None
            }
        }
        pub(crate) fn remove(&self, key: &K) -> Option<V> {
            lock(&self.0).remove(key)
        }
        pub(crate) fn values(&self) -> Vec<V> {
            lock(&self.0).values().cloned().collect()
        }
    }

    pub(crate) struct WakerSlot(Mutex<Option<Waker>>);

    impl WakerSlot {
        pub(crate) fn new() -> Self {
            WakerSlot(Mutex::new(None))
        }
        pub(crate) fn register(&self, waker: &Waker) {
            *lock(&self.0) = Some(waker.clone());
        }
        pub(crate) fn wake(&self) {
            if let Some(w) = lock(&self.0).take() {
                w.wake();
            }
        }
    }
}
