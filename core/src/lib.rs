//! The scheduler core: routes, tokens, the task lifecycle, hooks, and the
//! optimizer's control law. No I/O and no async runtime: the network layer
//! drives it through sessions, and tests and benches drive it the same way.
//!
//! Read from the bottom up (no module imports one above it; check with
//! `scripts/module-cycles core/src`):
//!
//! - [`sync`] (std or loom primitives), [`tokens`] (per-agent semaphores),
//!   [`outbox`], [`counters`]: leaves.
//! - [`records`]: the plain data — a task and the state word that makes it
//!   end once, routes and lanes, agent and consumerd entries, answers and
//!   endings, ids, [`Config`].
//! - [`router`]: placement — which agent runs a task, or where it waits.
//! - [`lifecycle`]: the shared tables ([`lifecycle::Core`]) and a task's way
//!   through the hooks (`pre_receive` before routing, as in kubecc) to its
//!   one end.
//! - [`sessions`]: [`ConsumerdSession`] / [`AgentSession`], one per
//!   connected peer, owned by the task that serves its connection; each has
//!   an outbox that task drains.
//! - [`scheduler`]: [`Scheduler`], the handle: connects agents and
//!   consumerds, answers status questions, moves token limits, shuts down.
//! - [`stats`] (snapshots for status pages), [`optimizer`] (the control law
//!   that moves token limits; its thread lives in the daemon).
//!
//! The hot path — submit, place, take and give back a token, complete,
//! answer — takes no lock: atomics, lock-free queues and arc-swap snapshots.
//! The sharded maps of routes, agents and consumerds are locked (one shard,
//! briefly) only when a peer joins, leaves or changes toolchains, and when a
//! cancel looks up its agent.
//!
//! Left out on purpose: bytes, sockets, time. A task's body and an answer are
//! whatever the [`Job`] says; timeouts belong to the callers.

pub mod cost;
pub mod counters;
pub mod lifecycle;
pub mod optimizer;
pub mod outbox;
pub mod records;
pub mod router;
pub mod scheduler;
pub mod sessions;
pub mod stats;
pub mod sync;
pub mod tokens;

pub use self::lifecycle::{EndView, Hook, HookAction, Interception, TaskRef};
pub use self::records::{
    AgentId, AgentLoad, Answer, AnswerKind, CompleteError, Config, ConsumerdId, ConsumerdLoad, Dispatch, Job, PeerInfo,
    Reply, RouteError, Task, TaskId, MAX_SPEED, MIN_SPEED, NOMINAL_SPEED,
};
pub use self::scheduler::Scheduler;
pub use self::sessions::{AgentSession, ConsumerdSession};
pub use self::stats::{AgentSnapshot, ConsumerdSnapshot, RouteSnapshot};
pub use self::tokens::{TokenPool, MAX_TOKENS};

#[cfg(all(test, not(ccroute_loom)))]
mod tests;

/// What the root package's tests build their own cores from.
#[cfg(not(ccroute_loom))]
#[doc(hidden)]
pub mod test_support {
    use ccroute_wire::{Lang, Toolchain, ToolchainKind};

    use crate::records::{AnswerKind, Job, PeerInfo};

    /// Bodies are numbers; answers say whether the compile succeeded.
    #[derive(Debug)]
    pub struct TestJob;

    impl Job for TestJob {
        type Task = u64;
        type Answer = bool;
        fn classify(ok: &bool) -> AnswerKind {
            if *ok {
                AnswerKind::Success
            } else {
                AnswerKind::Failed
            }
        }
    }

    /// Answers say whether the compile succeeded, or `None`: the agent could
    /// not run it (an internal error).
    #[derive(Debug)]
    pub struct FallibleJob;

    impl Job for FallibleJob {
        type Task = u64;
        type Answer = Option<bool>;
        fn classify(ok: &Option<bool>) -> AnswerKind {
            ok.as_ref().map_or(AnswerKind::Internal, TestJob::classify)
        }
    }

    /// A job whose tasks are their own expected cost, in microseconds
    /// ([`UNKNOWN_COST`]: a task whose cost is not known).
    #[derive(Debug)]
    pub struct CostedJob;

    /// A [`CostedJob`] task whose cost nothing tells.
    pub const UNKNOWN_COST: u64 = u64::MAX;

    impl Job for CostedJob {
        type Task = u64;
        type Answer = bool;
        fn classify(ok: &bool) -> AnswerKind {
            TestJob::classify(ok)
        }
        fn expected_micros(task: &u64) -> Option<u64> {
            (*task != UNKNOWN_COST).then_some(*task)
        }
    }

    /// A gcc-like toolchain named `name`.
    pub fn tc(name: &str) -> Toolchain {
        Toolchain {
            kind: ToolchainKind::Gnu,
            lang: Lang::C,
            compiler: name.into(),
            target: "x86_64-linux-gnu".into(),
            version: "12".into(),
            pic_default: true,
            pie_default: true,
            binary_hash: [1; 32],
        }
    }

    /// A peer numbered `n`.
    pub fn peer(n: u128) -> PeerInfo {
        PeerInfo { node_id: n, host_name: format!("host-{n}") }
    }
}
