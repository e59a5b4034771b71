//! The consumerd's arbitration between local slots and the remote window,
//! as a plain state machine: calls say what happened, [`Slots::grant`] says
//! who may go now. No I/O, no clock.
//!
//! Requests are served in arrival order. A request takes a free local slot
//! first, else a free remote slot (the window the scheduler publishes), else
//! waits for whichever frees first — or, when remote is preferred (a big
//! farm and a small workstation), a remote slot first and a local one only
//! while the window is full. A request that was granted a remote slot
//! and falls back (the wrapper abandoned, or the remote compile failed) gives
//! the remote slot back and waits for a local one at its original place in
//! line, ahead of anything that arrived after it — or, when its link to the
//! scheduler failed under it, for either kind of slot there.
//!
//! Main items: [`Slots`], [`Want`], [`Grant`], [`SlotCounts`]. Left out:
//! what a grant leads to (the dispatcher in `super`).

use std::collections::{BTreeMap, HashMap};

use super::ipc::ConnId;

/// What a request may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// A local slot, else a remote one.
    Any,
    /// Only a local slot.
    LocalOnly,
}

/// What a request was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A local slot, held until [`Slots::release`].
    Local,
    /// A remote slot, held until [`Slots::finish_remote`], [`Slots::fall_back`] or [`Slots::release`].
    Remote,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Waiting { seq: u64, want: Want },
    Local,
    Remote { seq: u64 },
}

/// Slot usage, for status and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotCounts {
    /// Local slots in all.
    pub local_capacity: u32,
    /// Local slots held.
    pub local_used: u32,
    /// The remote window now.
    pub window: u32,
    /// Remote slots held (may exceed a window that just shrank).
    pub remote_used: u32,
    /// Requests waiting.
    pub waiting: usize,
}

/// Local slots, the remote window, and the line of waiting requests.
#[derive(Debug)]
pub struct Slots {
    local_capacity: u32,
    local_used: u32,
    window: u32,
    remote_used: u32,
    next_seq: u64,
    /// Waiting requests that may go either way, by arrival.
    any: BTreeMap<u64, ConnId>,
    /// Waiting requests that need a local slot, by arrival.
    local_only: BTreeMap<u64, ConnId>,
    held: HashMap<ConnId, Held>,
    prefer_remote: bool,
    remote_only: bool,
}

impl Slots {
    /// `local` slots (at least one, so that a fallback can always run) and a remote `window`.
    pub fn new(local: u32, window: u32) -> Slots {
        Slots {
            local_capacity: local.max(1),
            local_used: 0,
            window,
            remote_used: 0,
            next_seq: 0,
            any: BTreeMap::new(),
            local_only: BTreeMap::new(),
            held: HashMap::new(),
            prefer_remote: false,
            remote_only: false,
        }
    }

    /// While a remote window is open, local slots serve only what cannot go
    /// remote (and fallbacks): everything else waits for a remote slot.
    pub fn remote_only(mut self, yes: bool) -> Slots {
        self.remote_only = yes;
        self
    }

    /// Grants remote slots before local ones.
    pub fn prefer_remote(mut self, yes: bool) -> Slots {
        self.prefer_remote = yes;
        self
    }

    /// A new request joins the line. A connection asks once; a second ask is ignored.
    pub fn request(&mut self, conn: ConnId, want: Want) {
        if self.held.contains_key(&conn) {
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.wait(conn, seq, want);
    }

    fn wait(&mut self, conn: ConnId, seq: u64, want: Want) {
        match want {
            Want::Any => self.any.insert(seq, conn),
            Want::LocalOnly => self.local_only.insert(seq, conn),
        };
        self.held.insert(conn, Held::Waiting { seq, want });
    }

    /// A remote slot holder gives it back and waits, at its original place
    /// in line, for what `want` allows: a local slot (`LocalOnly`), or
    /// either kind (`Any`: its link failed, and may come back first).
    /// Returns whether `conn` held a remote slot.
    pub fn fall_back(&mut self, conn: ConnId, want: Want) -> bool {
        let Some(Held::Remote { seq }) = self.held.get(&conn).copied() else {
            return false;
        };
        self.remote_used -= 1;
        self.wait(conn, seq, want);
        true
    }

    /// A remote slot holder is done (its answer was sent). Returns whether it held one.
    pub fn finish_remote(&mut self, conn: ConnId) -> bool {
        if !matches!(self.held.get(&conn), Some(Held::Remote { .. })) {
            return false;
        }
        self.held.remove(&conn);
        self.remote_used -= 1;
        true
    }

    /// The connection is gone: whatever it held or waited for is given up.
    pub fn release(&mut self, conn: ConnId) {
        match self.held.remove(&conn) {
            None => {}
            Some(Held::Local) => self.local_used -= 1,
            Some(Held::Remote { .. }) => self.remote_used -= 1,
            Some(Held::Waiting { seq, want: Want::Any }) => {
                self.any.remove(&seq);
            }
            Some(Held::Waiting { seq, want: Want::LocalOnly }) => {
                self.local_only.remove(&seq);
            }
        }
    }

    /// The remote window changed; a shrink applies to new grants only.
    pub fn set_window(&mut self, window: u32) {
        self.window = window;
    }

    /// Grants every slot that can be granted now, oldest request first, into `out`.
    pub fn grant(&mut self, out: &mut Vec<(ConnId, Grant)>) {
        if self.prefer_remote {
            self.grant_remote(out);
        }
        self.grant_local(out);
        self.grant_remote(out);
    }

    fn grant_local(&mut self, out: &mut Vec<(ConnId, Grant)>) {
        while self.local_used < self.local_capacity {
            let waits_for_remote = self.remote_only && self.window > 0;
            let oldest_any = self.any.first_key_value().map(|(s, _)| *s).filter(|_| !waits_for_remote);
            let oldest_local = self.local_only.first_key_value().map(|(s, _)| *s);
            let conn = match (oldest_any, oldest_local) {
                (None, None) => break,
                (Some(a), Some(l)) if l < a => self.local_only.pop_first(),
                (Some(_), _) => self.any.pop_first(),
                (None, Some(_)) => self.local_only.pop_first(),
            };
            let Some((_, conn)) = conn else { break };
            self.local_used += 1;
            self.held.insert(conn, Held::Local);
            out.push((conn, Grant::Local));
        }
    }

    fn grant_remote(&mut self, out: &mut Vec<(ConnId, Grant)>) {
        while self.remote_used < self.window {
            let Some((seq, conn)) = self.any.pop_first() else { break };
            self.remote_used += 1;
            self.held.insert(conn, Held::Remote { seq });
            out.push((conn, Grant::Remote));
        }
    }

    /// Current usage.
    pub fn counts(&self) -> SlotCounts {
        SlotCounts {
            local_capacity: self.local_capacity,
            local_used: self.local_used,
            window: self.window,
            remote_used: self.remote_used,
            waiting: self.any.len() + self.local_only.len(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn c(n: u64) -> ConnId {
        ConnId(n)
    }

    fn grants(s: &mut Slots) -> Vec<(u64, Grant)> {
        let mut out = vec![];
        s.grant(&mut out);
        out.into_iter().map(|(c, g)| (c.0, g)).collect()
    }

    #[test]
    fn remote_only_waits_for_the_window_while_one_is_open() {
        let mut s = Slots::new(1, 2).remote_only(true);
        for n in 0..4 {
            s.request(c(n), Want::Any);
        }
        s.request(c(9), Want::LocalOnly);
        assert_eq!(grants(&mut s), vec![(9, Grant::Local), (0, Grant::Remote), (1, Grant::Remote)]);
        s.set_window(0);
        s.release(c(9));
        assert_eq!(grants(&mut s), vec![(2, Grant::Local)], "no window: local, as ever");
    }

    #[test]
    fn preferring_remote_fills_the_window_first_and_falls_back_locally() {
        let mut s = Slots::new(1, 2).prefer_remote(true);
        for n in 0..4 {
            s.request(c(n), Want::Any);
        }
        assert_eq!(grants(&mut s), vec![(0, Grant::Remote), (1, Grant::Remote), (2, Grant::Local)]);
        assert!(s.fall_back(c(0), Want::LocalOnly));
        assert_eq!(grants(&mut s), vec![(3, Grant::Remote)], "the freed remote slot goes to the next in line");
        s.release(c(2));
        assert_eq!(grants(&mut s), vec![(0, Grant::Local)], "the fallback runs locally");
    }

    #[test]
    fn local_first_then_remote_then_wait_in_order() {
        let mut s = Slots::new(2, 1);
        for i in 1..=5 {
            s.request(c(i), Want::Any);
        }
        assert_eq!(grants(&mut s), [(1, Grant::Local), (2, Grant::Local), (3, Grant::Remote)]);
        assert_eq!(s.counts().waiting, 2);
        s.finish_remote(c(3));
        assert_eq!(grants(&mut s), [(4, Grant::Remote)]);
        s.release(c(1));
        assert_eq!(grants(&mut s), [(5, Grant::Local)]);
        assert_eq!(grants(&mut s), []);
        for i in [2, 4, 5] {
            s.release(c(i));
        }
        assert_eq!(s.counts(), SlotCounts { local_capacity: 2, window: 1, ..SlotCounts::default() });
    }

    #[test]
    fn a_fallback_keeps_its_place_ahead_of_newer_requests() {
        let mut s = Slots::new(1, 2);
        s.request(c(1), Want::Any);
        s.request(c(2), Want::Any);
        assert_eq!(grants(&mut s), [(1, Grant::Local), (2, Grant::Remote)]);
        s.request(c(3), Want::Any);
        assert_eq!(grants(&mut s), [(3, Grant::Remote)]);
        s.request(c(4), Want::Any);
        s.request(c(5), Want::LocalOnly);
        assert!(s.fall_back(c(3), Want::LocalOnly));
        // 3 waits for a local slot; 4 takes the remote slot 3 gave back.
        assert_eq!(grants(&mut s), [(4, Grant::Remote)]);
        s.release(c(1));
        assert_eq!(grants(&mut s), [(3, Grant::Local)]);
        s.release(c(3));
        assert_eq!(grants(&mut s), [(5, Grant::Local)]);
        assert!(!s.fall_back(c(5), Want::LocalOnly), "a local holder has nothing remote to give back");
    }

    #[test]
    fn a_shrinking_window_applies_to_new_grants_and_no_window_means_local_only() {
        let mut s = Slots::new(1, 3);
        for i in 1..=6 {
            s.request(c(i), Want::Any);
        }
        assert_eq!(grants(&mut s).len(), 4);
        s.set_window(1);
        s.finish_remote(c(2));
        assert_eq!(grants(&mut s), [], "2 of 1 still held");
        s.finish_remote(c(3));
        assert_eq!(grants(&mut s), []);
        s.finish_remote(c(4));
        assert_eq!(grants(&mut s), [(5, Grant::Remote)]);
        s.set_window(0);
        s.finish_remote(c(5));
        assert_eq!(grants(&mut s), []);
        s.release(c(1));
        assert_eq!(grants(&mut s), [(6, Grant::Local)]);
    }

    #[test]
    fn releasing_a_waiter_or_a_stranger_frees_nothing_twice() {
        let mut s = Slots::new(1, 0);
        s.request(c(1), Want::Any);
        s.request(c(2), Want::Any);
        s.request(c(2), Want::LocalOnly);
        assert_eq!(grants(&mut s), [(1, Grant::Local)]);
        s.release(c(2));
        s.release(c(2));
        s.release(c(9));
        assert!(!s.finish_remote(c(1)));
        s.release(c(1));
        s.release(c(1));
        assert_eq!(s.counts(), SlotCounts { local_capacity: 1, ..SlotCounts::default() });
    }

    /// Random operations: the counts always match what is held, and never pass their bounds.
    #[test]
    fn random_sequences_keep_the_books() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut s = Slots::new(3, 2);
        let mut local = std::collections::HashSet::new();
        let mut remote = std::collections::HashSet::new();
        let mut granted = 0;
        for step in 0..20_000 {
            let conn = next() % 12;
            match next() % 6 {
                0 | 1 => s.request(c(conn), if next() % 3 == 0 { Want::LocalOnly } else { Want::Any }),
                2 => {
                    if s.fall_back(c(conn), Want::LocalOnly) {
                        assert!(remote.remove(&conn));
                    }
                }
                3 => {
                    if s.finish_remote(c(conn)) {
                        assert!(remote.remove(&conn));
                    }
                }
                4 => {
                    s.release(c(conn));
                    local.remove(&conn);
                    remote.remove(&conn);
                }
                _ => s.set_window((next() % 4) as u32),
            }
            let mut out = vec![];
            s.grant(&mut out);
            for (conn, g) in out {
                granted += 1;
                assert!(!local.contains(&conn.0) && !remote.contains(&conn.0), "step {step}: granted twice");
                match g {
                    Grant::Local => local.insert(conn.0),
                    Grant::Remote => remote.insert(conn.0),
                };
            }
            let n = s.counts();
            assert_eq!(n.local_used as usize, local.len(), "step {step}");
            assert_eq!(n.remote_used as usize, remote.len(), "step {step}");
            assert!(n.local_used <= n.local_capacity);
            assert!(n.remote_used <= 3, "never beyond the largest window");
        }
        assert!(granted > 1000);
    }
}
