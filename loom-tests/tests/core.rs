//! loom models of the scheduler core.
//!
//! Each model says what it checks and what it stands in for. Under
//! `ccroute_loom` the core's own atomics, `Arc`s and spin-yields are loom's;
//! the lock-free containers loom cannot see into (crossbeam's `SegQueue`,
//! arc-swap, dashmap) are a loom `Mutex` around the plain structure, so these
//! models check our protocol between atomics and take the containers'
//! linearizability as given.
#![cfg(ccroute_loom)]

use std::sync::atomic::Ordering as StdOrdering;

use ccroute_core::{
    AgentSession, AnswerKind, Config, ConsumerdSession, Dispatch, EndView, Hook, HookAction, Job, PeerInfo, Scheduler,
    Task, TaskId, TaskRef, TokenPool,
};
use ccroute_wire::{Lang, Toolchain, ToolchainKind};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

#[derive(Debug)]
struct J;

impl Job for J {
    type Task = u64;
    /// Whether the compile succeeded; `None`: the agent could not run it.
    type Answer = Option<bool>;
    fn classify(ok: &Option<bool>) -> AnswerKind {
        match ok {
            Some(true) => AnswerKind::Success,
            Some(false) => AnswerKind::Failed,
            None => AnswerKind::Internal,
        }
    }
    /// Odd bodies are dear, even ones cheap: lanes rank them in two classes.
    fn expected_micros(task: &u64) -> Option<u64> {
        Some(if task % 2 == 1 { 10_000_000 } else { 1_000 })
    }
}

fn tc() -> Toolchain {
    Toolchain {
        kind: ToolchainKind::Gnu,
        lang: Lang::C,
        compiler: "gcc".into(),
        target: "x86_64-linux-gnu".into(),
        version: "12".into(),
        pic_default: true,
        pie_default: true,
        binary_hash: [0; 32],
    }
}

fn peer(n: u128) -> PeerInfo {
    PeerInfo { node_id: n, host_name: String::new() }
}

/// Counts how many times each task ends: the invariant is exactly once.
struct Ends(AtomicUsize);

impl Hook<J> for Ends {
    fn pre_receive(&self, _: &TaskRef<'_, J>) -> HookAction {
        HookAction::ProcessRequestNormally
    }
    fn on_end(&self, _: &Task<J>, _: EndView<'_, Option<bool>>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    b.check(f);
}

/// (a) Tokens: concurrent acquire / release / set-limit never let more than
/// the largest limit be held at once, and leave no token held.
#[test]
fn tokens_never_exceed_the_limit_and_never_leak() {
    model(|| {
        let pool = Arc::new(TokenPool::new(1));
        let held = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..2)
            .map(|_| {
                let pool = pool.clone();
                let held = held.clone();
                thread::spawn(move || {
                    if pool.try_acquire() {
                        let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                        assert!(now <= 2, "{now} tokens held with limits 1 and 2");
                        held.fetch_sub(1, Ordering::SeqCst);
                        pool.release();
                    }
                })
            })
            .collect();
        let mover = {
            let pool = pool.clone();
            thread::spawn(move || {
                pool.set_limit(2);
                pool.set_limit(1);
            })
        };
        for w in workers {
            w.join().unwrap();
        }
        mover.join().unwrap();
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.limit(), 1);
    });
}

/// (a') A shrinking limit never lets a new token through while the old
/// holders are above it.
#[test]
fn a_shrinking_limit_refuses_until_holders_drop_below_it() {
    model(|| {
        let pool = Arc::new(TokenPool::new(2));
        assert!(pool.try_acquire());
        assert!(pool.try_acquire());
        let p = pool.clone();
        let shrink = thread::spawn(move || {
            p.set_limit(1);
        });
        let p = pool.clone();
        let release = thread::spawn(move || p.release());
        shrink.join().unwrap();
        release.join().unwrap();
        // 1 held at limit 1: full.
        assert!(!pool.try_acquire());
        pool.release();
        assert!(pool.try_acquire());
        pool.release();
        assert_eq!(pool.in_use(), 0);
    });
}

/// (b) An agent's result races its consumerd's cancel: the task ends once,
/// the consumerd gets at most one answer, the token comes back.
#[test]
fn a_result_racing_a_cancel_ends_the_task_once() {
    model(|| {
        let ends = std::sync::Arc::new(Ends(AtomicUsize::new(0)));
        let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![ends.clone()]);
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut agent = s.connect_agent(peer(2), &[tc()], 1);
        cd.submit(1, tc().key(), 0).unwrap();
        let Some(Dispatch::Assign(t)) = agent.poll() else { panic!("not assigned") };
        let id = t.id();
        drop(t);
        let a = thread::spawn(move || {
            agent.complete(id, Some(true)).unwrap();
            agent
        });
        let c = thread::spawn(move || {
            let cancelled = cd.cancel(1);
            (cd, cancelled)
        });
        let mut agent = a.join().unwrap();
        let (mut cd, cancelled) = c.join().unwrap();
        assert!(cancelled);
        assert!(cd.poll_answer().is_none(), "an answer after a cancel");
        // A cancel that reached the agent is harmless now.
        while agent.poll().is_some() {}
        assert_eq!(ends.0.load(Ordering::SeqCst), 1, "the task ended {} times", ends.0.load(Ordering::SeqCst));
        assert_eq!(s.agents()[0].tokens_in_use, 0);
        drop(agent);
        drop(cd);
    });
}

/// (b) An agent's disconnect races its consumerd's cancel: the task is
/// either placed again (and answered by the other agent) or cancelled —
/// once — and no token stays held.
#[test]
fn a_disconnect_racing_a_cancel_ends_the_task_once() {
    model(|| {
        let ends = std::sync::Arc::new(Ends(AtomicUsize::new(0)));
        let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![ends.clone()]);
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut lost = s.connect_agent(peer(2), &[tc()], 1);
        cd.submit(1, tc().key(), 0).unwrap();
        assert!(matches!(lost.poll(), Some(Dispatch::Assign(_))));
        let mut other = s.connect_agent(peer(3), &[tc()], 1);
        let a = thread::spawn(move || drop(lost));
        let c = thread::spawn(move || {
            cd.cancel(1);
            cd
        });
        a.join().unwrap();
        let mut cd = c.join().unwrap();
        // Whatever reached the other agent, it runs and answers.
        while let Some(d) = other.poll() {
            if let Dispatch::Assign(t) = d {
                let id = t.id();
                drop(t);
                other.complete(id, Some(true)).unwrap();
            }
        }
        assert!(cd.poll_answer().is_none(), "an answer after a cancel");
        assert_eq!(ends.0.load(Ordering::SeqCst), 1);
        assert_eq!(s.agents()[0].tokens_in_use, 0, "token leaked");
        drop(other);
        drop(cd);
    });
}

/// (b) An agent's result races its consumerd's disconnect: one end, no
/// answer left anywhere, no token held.
#[test]
fn a_result_racing_the_consumerd_leaving_ends_the_task_once() {
    model(|| {
        let ends = std::sync::Arc::new(Ends(AtomicUsize::new(0)));
        let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![ends.clone()]);
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut agent = s.connect_agent(peer(2), &[tc()], 1);
        cd.submit(1, tc().key(), 0).unwrap();
        let Some(Dispatch::Assign(t)) = agent.poll() else { panic!("not assigned") };
        let id = t.id();
        drop(t);
        let a = thread::spawn(move || {
            agent.complete(id, Some(false)).unwrap();
            agent
        });
        let c = thread::spawn(move || drop(cd));
        let agent = a.join().unwrap();
        c.join().unwrap();
        assert_eq!(ends.0.load(Ordering::SeqCst), 1);
        assert_eq!(s.agents()[0].tokens_in_use, 0);
        drop(agent);
    });
}

/// (c) An agent gives a token back while a task is submitted: the task is
/// never left waiting while the agent has a free token.
#[test]
fn no_task_waits_while_a_token_is_free() {
    model(|| {
        let s: Scheduler<J> = Scheduler::new(Config::default());
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut agent = s.connect_agent(peer(2), &[tc()], 1);
        cd.submit(1, tc().key(), 1).unwrap();
        let Some(Dispatch::Assign(t)) = agent.poll() else { panic!("not assigned") };
        let first = t.id();
        drop(t);
        let a = thread::spawn(move || {
            agent.complete(first, Some(true)).unwrap();
            agent
        });
        let c = thread::spawn(move || {
            cd.submit(2, tc().key(), 2).unwrap();
            cd
        });
        let mut agent = a.join().unwrap();
        let cd = c.join().unwrap();
        let routes = s.routes();
        let waiting = routes[0].queued;
        let snapshot = &s.agents()[0];
        assert!(
            waiting == 0 || snapshot.tokens_in_use >= snapshot.token_limit,
            "{waiting} waiting while {} of {} tokens are held",
            snapshot.tokens_in_use,
            snapshot.token_limit
        );
        match agent.poll() {
            Some(Dispatch::Assign(t)) => assert_eq!(*t.body(), 2),
            other => panic!("the second task was not placed: {other:?}"),
        }
        drop(agent);
        drop(cd);
    });
}

/// A dear task is pushed into its class while a token given back scans
/// the lane past that class and takes a cheap one: neither waits while a
/// token is free, and the dear one is not lost behind the scan.
#[test]
fn a_dear_task_pushed_while_a_pop_scans_the_classes_is_not_stranded() {
    model(|| {
        let s: Scheduler<J> = Scheduler::new(Config { longest_first: true, ..Config::default() });
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut agent = s.connect_agent(peer(2), &[tc()], 1);
        cd.submit(1, tc().key(), 1).unwrap();
        let Some(Dispatch::Assign(t)) = agent.poll() else { panic!("not assigned") };
        let first = t.id();
        drop(t);
        // A cheap one waits.
        cd.submit(2, tc().key(), 2).unwrap();
        let a = thread::spawn(move || {
            agent.complete(first, Some(true)).unwrap();
            agent
        });
        let c = thread::spawn(move || {
            cd.submit(3, tc().key(), 3).unwrap();
            cd
        });
        let mut agent = a.join().unwrap();
        let cd = c.join().unwrap();
        // One token: exactly one of tasks 2 and 3 runs, the other waits.
        let Some(Dispatch::Assign(t)) = agent.poll() else { panic!("no task placed on the free token") };
        assert!([2, 3].contains(t.body()));
        assert_eq!(s.routes()[0].queued, 1);
        let next = t.id();
        drop(t);
        agent.complete(next, Some(true)).unwrap();
        let Some(Dispatch::Assign(t)) = agent.poll() else { panic!("the other task was stranded") };
        assert!([2, 3].contains(t.body()));
        assert_eq!(s.routes()[0].queued, 0);
        drop(t);
        drop((agent, cd));
    });
}

/// Speed-aware placement: a dear task that only a slow agent could take
/// waits for the fast agent, while the fast agent gives its token back. A
/// task put back by a slow agent is counted in and fenced like any push, so
/// the fast agent's token is not left free with the task waiting.
#[test]
fn a_task_kept_for_a_fast_agent_is_not_stranded_when_its_token_comes_back() {
    model(|| {
        let s: Scheduler<J> = Scheduler::new(Config { speed_aware: true, ..Config::default() });
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut fast = s.connect_agent(peer(2), &[tc()], 1);
        let mut slow = s.connect_agent(peer(3), &[tc()], 1);
        slow.set_speed(200);
        cd.submit(1, tc().key(), 1).unwrap();
        let Some(Dispatch::Assign(t)) = fast.poll() else { panic!("not assigned to the fast agent") };
        let first = t.id();
        drop(t);
        let a = thread::spawn(move || {
            fast.complete(first, Some(true)).unwrap();
            fast
        });
        let c = thread::spawn(move || {
            // 10 s: 50 s on the slow agent, far less after the fast one's wait.
            cd.submit(3, tc().key(), 3).unwrap();
            cd
        });
        let mut fast = a.join().unwrap();
        let cd = c.join().unwrap();
        assert!(slow.poll().is_none(), "the dear task went to the slow agent");
        match fast.poll() {
            Some(Dispatch::Assign(t)) => assert_eq!(*t.body(), 3),
            other => panic!("the dear task was stranded with the fast agent's token free: {other:?}"),
        }
        assert_eq!(s.routes()[0].queued, 0);
        drop((fast, slow, cd));
    });
}

/// Two agents of one route with one token each, each running a task (1
/// and 2): the scheduler, the consumerd, the agents and their tasks' ids.
fn two_busy_agents() -> (Scheduler<J>, ConsumerdSession<J>, AgentSession<J>, AgentSession<J>, TaskId, TaskId) {
    let s: Scheduler<J> = Scheduler::new(Config::default());
    let mut cd = s.connect_consumerd(peer(1), &[tc()]);
    let mut a1 = s.connect_agent(peer(2), &[tc()], 1);
    let mut a2 = s.connect_agent(peer(3), &[tc()], 1);
    cd.submit(1, tc().key(), 1).unwrap();
    cd.submit(2, tc().key(), 2).unwrap();
    let mut ids = vec![];
    for a in [&mut a1, &mut a2] {
        let Some(Dispatch::Assign(t)) = a.poll() else { panic!("not assigned") };
        ids.push(t.id());
    }
    (s, cd, a1, a2, ids[0], ids[1])
}

/// (c) Two agents of one route give tokens back while two tasks arrive.
#[test]
fn two_agents_and_two_submits_leave_nothing_waiting() {
    model(|| {
        let (s, mut cd, mut a1, mut a2, i1, i2) = two_busy_agents();
        let t1 = thread::spawn(move || {
            a1.complete(i1, Some(true)).unwrap();
            a1
        });
        let t2 = thread::spawn(move || {
            cd.submit(3, tc().key(), 3).unwrap();
            cd
        });
        a2.complete(i2, Some(true)).unwrap();
        let a1 = t1.join().unwrap();
        let cd = t2.join().unwrap();
        assert_eq!(s.routes()[0].queued, 0, "task 3 waits while tokens are free");
        drop((a1, a2, cd));
    });
}

/// (c) A token given back serves one waiting task and its giver stops
/// there (it does not look over every agent for more): while two agents
/// each give their one token back and a task arrives behind one already
/// waiting, both tasks are placed and neither token is left free.
#[test]
fn two_tokens_given_back_while_a_task_waits_and_another_arrives_place_both() {
    model(|| {
        let (s, mut cd, mut a1, mut a2, i1, i2) = two_busy_agents();
        cd.submit(3, tc().key(), 3).unwrap();
        assert_eq!(s.routes()[0].queued, 1);
        let t1 = thread::spawn(move || {
            a1.complete(i1, Some(true)).unwrap();
            a1
        });
        let t2 = thread::spawn(move || {
            a2.complete(i2, Some(true)).unwrap();
            a2
        });
        cd.submit(4, tc().key(), 4).unwrap();
        let mut a1 = t1.join().unwrap();
        let mut a2 = t2.join().unwrap();
        assert_eq!(s.routes()[0].queued, 0, "a task waits while a token is free");
        let mut placed = vec![];
        for a in [&mut a1, &mut a2] {
            if let Some(Dispatch::Assign(t)) = a.poll() {
                placed.push(*t.body());
            }
        }
        placed.sort_unstable();
        assert_eq!(placed, vec![3, 4]);
        drop((a1, a2, cd));
    });
}

/// The last agent of a route leaves while a task arrives: nothing is left
/// waiting on a route with no agent — both tasks go back to run locally.
#[test]
fn the_last_agent_leaving_strands_no_task() {
    model(|| {
        let s: Scheduler<J> = Scheduler::new(Config::default());
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let mut agent = s.connect_agent(peer(2), &[tc()], 1);
        cd.submit(1, tc().key(), 1).unwrap();
        assert!(matches!(agent.poll(), Some(Dispatch::Assign(_))));
        let a = thread::spawn(move || drop(agent));
        let c = thread::spawn(move || {
            cd.submit(2, tc().key(), 2).unwrap();
            cd
        });
        a.join().unwrap();
        let mut cd = c.join().unwrap();
        let mut answered = 0;
        while let Some(a) = cd.poll_answer() {
            assert!(matches!(a.reply, ccroute_core::Reply::RunLocally(_)));
            answered += 1;
        }
        assert_eq!(answered, 2, "a task was stranded on a route with no agent");
        drop(cd);
    });
}

/// A hook answers a task it intercepted (a cache hit found on another
/// thread) while the consumerd cancels it: one end, no answer after cancel.
#[test]
fn an_interception_racing_a_cancel_ends_the_task_once() {
    struct Holder(std::sync::Mutex<Vec<ccroute_core::Interception<J>>>, AtomicUsize);
    impl Hook<J> for Holder {
        fn pre_receive(&self, t: &TaskRef<'_, J>) -> HookAction {
            if let Some(i) = t.intercept() {
                self.0.lock().unwrap().push(i);
            }
            HookAction::RequestIntercepted
        }
        fn on_end(&self, _: &Task<J>, _: EndView<'_, Option<bool>>) {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
    }
    model(|| {
        let hook = std::sync::Arc::new(Holder(std::sync::Mutex::new(vec![]), AtomicUsize::new(0)));
        let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![hook.clone()]);
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        cd.submit(1, tc().key(), 1).unwrap();
        let held = hook.0.lock().unwrap().pop().unwrap();
        let h = thread::spawn(move || held.answer(Some(true)));
        let c = thread::spawn(move || {
            cd.cancel(1);
            cd
        });
        h.join().unwrap();
        let mut cd = c.join().unwrap();
        assert!(cd.poll_answer().is_none());
        assert_eq!(hook.1.load(Ordering::SeqCst), 1);
        drop(cd);
    });
}

/// The canary: a deliberately racy counter. If loom did not explore
/// interleavings this would pass; it must fail.
#[test]
#[should_panic]
fn canary_a_racy_counter_is_caught() {
    model(|| {
        let n = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let n = n.clone();
                thread::spawn(move || {
                    let v = n.load(Ordering::SeqCst);
                    n.store(v + 1, Ordering::SeqCst);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(n.load(Ordering::SeqCst), 2, "lost update");
    });
    let _ = StdOrdering::SeqCst;
}

/// Holds the first task it sees, as the scheduler's resume hook holds a
/// resumed task until an agent that still runs it is known.
struct HoldFirst {
    held: std::sync::Mutex<Option<ccroute_core::Interception<J>>>,
    ends: AtomicUsize,
}

impl Hook<J> for HoldFirst {
    fn pre_receive(&self, task: &TaskRef<'_, J>) -> HookAction {
        let mut held = self.held.lock().unwrap();
        if held.is_none() {
            *held = task.intercept();
            return HookAction::RequestIntercepted;
        }
        HookAction::ProcessRequestNormally
    }
    fn on_end(&self, _: &Task<J>, _: EndView<'_, Option<bool>>) {
        self.ends.fetch_add(1, Ordering::SeqCst);
    }
}

/// (b) A restarted scheduler adopts a resumed task onto the agent that holds
/// it while that agent disconnects: the reserved token moves to the task
/// exactly once and comes back exactly once, and the task is answered once —
/// by the other agent when the adoption lost, by nobody twice.
#[test]
fn an_adoption_racing_the_agent_leaving_ends_the_task_once() {
    model(|| {
        let hook = std::sync::Arc::new(HoldFirst { held: std::sync::Mutex::new(None), ends: AtomicUsize::new(0) });
        let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![hook.clone()]);
        let mut cd = s.connect_consumerd(peer(1), &[tc()]);
        let holder = s.connect_agent_resuming(peer(2), &[tc()], 1, 1);
        let mut other = s.connect_agent(peer(3), &[tc()], 1);
        cd.submit(1, tc().key(), 0).unwrap();
        let held = hook.held.lock().unwrap().take().expect("held");
        let agent = holder.id();
        let a = thread::spawn(move || match held.adopt(agent, 1 << 63) {
            Ok(_) => {}
            Err(held) => held.proceed(),
        });
        let d = thread::spawn(move || drop(holder));
        a.join().unwrap();
        d.join().unwrap();
        while let Some(d) = other.poll() {
            if let Dispatch::Assign(t) = d {
                let id = t.id();
                drop(t);
                other.complete(id, Some(true)).unwrap();
            }
        }
        assert!(cd.poll_answer().is_some(), "the task was never answered");
        assert!(cd.poll_answer().is_none(), "answered twice");
        assert_eq!(hook.ends.load(Ordering::SeqCst), 1);
        assert!(s.agents().iter().all(|a| a.tokens_in_use == 0), "token leaked");
        drop(other);
        drop(cd);
    });
}

/// Runs what reached `agent`: each task it was sent is answered; a cancel
/// for a task it still holds is answered too (as a cancelled compile
/// would be, which frees its token).
fn answer_all(agent: &mut ccroute_core::AgentSession<J>) {
    while let Some(d) = agent.poll() {
        match d {
            Dispatch::Assign(t) => {
                let id = t.id();
                drop(t);
                agent.complete(id, Some(true)).unwrap();
            }
            Dispatch::Cancel(id) => {
                let _ = agent.complete(id, Some(false));
            }
            _ => {}
        }
    }
}

type Hedged = (
    std::sync::Arc<Ends>,
    Scheduler<J>,
    ccroute_core::ConsumerdSession<J>,
    ccroute_core::AgentSession<J>,
    ccroute_core::AgentSession<J>,
    ccroute_core::TaskId,
);

/// A task running on agent `a`, and an idle agent `b` beside it.
fn beside_an_idle_agent() -> Hedged {
    let ends = std::sync::Arc::new(Ends(AtomicUsize::new(0)));
    let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![ends.clone()]);
    let mut cd = s.connect_consumerd(peer(1), &[tc()]);
    let mut a = s.connect_agent(peer(2), &[tc()], 1);
    cd.submit(1, tc().key(), 0).unwrap();
    let Some(Dispatch::Assign(t)) = a.poll() else { panic!("not assigned") };
    let id = t.id();
    drop(t);
    let b = s.connect_agent(peer(3), &[tc()], 1);
    (ends, s, cd, a, b, id)
}

/// As [`beside_an_idle_agent`], with a copy of the task sent to `b`
/// (straggler hedging).
fn hedged() -> Hedged {
    let (ends, s, cd, a, mut b, id) = beside_an_idle_agent();
    assert!(a.hedge(id, 0), "an idle agent, nothing waiting: a copy starts");
    let Some(Dispatch::Assign(t)) = b.poll() else { panic!("the copy was not sent") };
    drop(t);
    (ends, s, cd, a, b, id)
}

/// The consumerd got exactly one answer, the task ended once, no token is
/// held. Returns that answer.
fn assert_answered_once(
    cd: &mut ccroute_core::ConsumerdSession<J>,
    ends: &Ends,
    s: &Scheduler<J>,
) -> ccroute_core::Reply<Option<bool>> {
    let answer = cd.poll_answer().expect("no answer");
    assert!(cd.poll_answer().is_none(), "answered twice");
    assert_eq!(ends.0.load(Ordering::SeqCst), 1);
    assert!(s.agents().iter().all(|x| x.tokens_in_use == 0), "token leaked: {:?}", s.agents());
    answer.reply
}

/// Both agents answer task `id` at once (two threads); returns them.
fn finish_together(
    mut a: ccroute_core::AgentSession<J>,
    mut b: ccroute_core::AgentSession<J>,
    id: ccroute_core::TaskId,
) -> (ccroute_core::AgentSession<J>, ccroute_core::AgentSession<J>) {
    let ta = thread::spawn(move || {
        a.complete(id, Some(true)).unwrap();
        a
    });
    let tb = thread::spawn(move || {
        b.complete(id, Some(true)).unwrap();
        b
    });
    (ta.join().unwrap(), tb.join().unwrap())
}

/// (h) Hedging: the task and its copy finish together on two agents. One
/// answer reaches the consumerd, the task ends once, and both tokens come
/// back (the loser's answer is dropped as stale).
#[test]
fn two_copies_finishing_together_answer_once_and_free_both_tokens() {
    model(|| {
        let (ends, s, mut cd, a, b, id) = hedged();
        let (mut a, mut b) = finish_together(a, b, id);
        answer_all(&mut a);
        answer_all(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((a, b, cd));
    });
}

/// (h) A copy starts while the consumerd cancels the task: it ends once,
/// nothing is answered, and the copy's token comes back whether or not the
/// copy was sent.
#[test]
fn a_hedge_racing_a_cancel_ends_once_and_leaks_no_token() {
    model(|| {
        let (ends, s, mut cd, a, mut b, id) = beside_an_idle_agent();
        let ta = thread::spawn(move || {
            a.hedge(id, 0);
            a
        });
        let tc_ = thread::spawn(move || {
            assert!(cd.cancel(1));
            cd
        });
        let mut a = ta.join().unwrap();
        let mut cd = tc_.join().unwrap();
        answer_all(&mut b);
        answer_all(&mut a);
        assert!(cd.poll_answer().is_none(), "an answer after a cancel");
        assert_eq!(ends.0.load(Ordering::SeqCst), 1);
        assert!(s.agents().iter().all(|x| x.tokens_in_use == 0), "token leaked: {:?}", s.agents());
        drop((a, b, cd));
    });
}

/// (h) The task's own agent is lost while its copy answers: the copy
/// carries on as the task's run or its answer wins; one answer, no token held.
#[test]
fn the_original_agent_lost_while_the_copy_answers_ends_once() {
    model(|| {
        let (ends, s, mut cd, a, mut b, id) = hedged();
        let ta = thread::spawn(move || drop(a));
        let tb = thread::spawn(move || {
            b.complete(id, Some(true)).unwrap();
            b
        });
        ta.join().unwrap();
        let mut b = tb.join().unwrap();
        answer_all(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((b, cd));
    });
}

/// (h) Both agents of a hedged task are lost at once: the task is handed
/// over or placed again exactly once — on a third agent — and answered once.
#[test]
fn both_agents_of_a_hedged_task_lost_at_once_place_it_once() {
    model(|| {
        let (ends, s, mut cd, a, b, _) = hedged();
        let mut c = s.connect_agent(peer(4), &[tc()], 2);
        let ta = thread::spawn(move || drop(a));
        let tb = thread::spawn(move || drop(b));
        ta.join().unwrap();
        tb.join().unwrap();
        answer_all(&mut c);
        assert_answered_once(&mut cd, &ends, &s);
        drop((c, cd));
    });
}

/// (h) A copy starts while the agent it goes to leaves: the copy's token
/// comes back whichever wins, and the task runs on where it is.
#[test]
fn a_hedge_racing_the_copys_agent_leaving_strands_nothing() {
    model(|| {
        let (ends, s, mut cd, a, b, id) = beside_an_idle_agent();
        let ta = thread::spawn(move || {
            a.hedge(id, 0);
            a
        });
        let tb = thread::spawn(move || drop(b));
        let mut a = ta.join().unwrap();
        tb.join().unwrap();
        a.complete(id, Some(true)).unwrap();
        answer_all(&mut a);
        assert_answered_once(&mut cd, &ends, &s);
        drop((a, cd));
    });
}

/// (h) The copy could not run (an internal error) while the task's own run
/// answers: the task's answer is its own run's, whichever comes first; the
/// task ends once and both tokens come back.
#[test]
fn a_copy_that_could_not_run_answering_with_the_original_leaves_the_answer_to_it() {
    model(|| {
        let (ends, s, mut cd, mut a, mut b, id) = hedged();
        let ta = thread::spawn(move || {
            a.complete(id, Some(true)).unwrap();
            a
        });
        let tb = thread::spawn(move || {
            b.complete(id, None).unwrap();
            b
        });
        let (mut a, mut b) = (ta.join().unwrap(), tb.join().unwrap());
        answer_all(&mut a);
        answer_all(&mut b);
        let reply = assert_answered_once(&mut cd, &ends, &s);
        assert_eq!(reply, ccroute_core::Reply::Done(Some(true)), "the copy's internal error answered the task");
        drop((a, b, cd));
    });
}

/// (h) The copy could not run while the task's own agent is lost: the task
/// is handed to the copy (whose answer then stands) or placed again (on the
/// copy's agent, its token back) — never left with no run. One answer, one
/// end, no token held.
#[test]
fn a_copy_that_could_not_run_as_the_original_agent_is_lost_strands_nothing() {
    model(|| {
        let (ends, s, mut cd, a, mut b, id) = hedged();
        let ta = thread::spawn(move || drop(a));
        let tb = thread::spawn(move || {
            b.complete(id, None).unwrap();
            b
        });
        ta.join().unwrap();
        let mut b = tb.join().unwrap();
        answer_all(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((b, cd));
    });
}

/// Runs what reached `agent`, as [`answer_all`], adopting what it is asked
/// to adopt (a run it held, answered at once) and dropping what it is told
/// to drop. Everything sent is read before anything is answered, as an
/// agent sees a cancel before a compile ends: a run cancelled in the same
/// batch answers `false` (a stopped compile), any other `true`.
fn answer_all_held(agent: &mut ccroute_core::AgentSession<J>) {
    loop {
        let sent: Vec<Dispatch<J>> = std::iter::from_fn(|| agent.poll()).collect();
        if sent.is_empty() {
            return;
        }
        let cancelled: Vec<ccroute_core::TaskId> =
            sent.iter().filter_map(|d| if let Dispatch::Cancel(id) = d { Some(*id) } else { None }).collect();
        for d in sent {
            if let Dispatch::Assign(t) | Dispatch::Adopt { task: t, .. } = d {
                let id = t.id();
                drop(t);
                agent.complete(id, Some(!cancelled.contains(&id))).unwrap();
            }
        }
        for id in cancelled {
            // A run sent earlier, or one just answered (then not held: refused).
            let _ = agent.complete(id, Some(false));
        }
    }
}

/// Agent `a` was lost running the task, which now runs again on `b`; `a`
/// is back (`back`, `tokens` tokens) with one reserved for the run it still
/// holds.
fn cut_off_and_back(tokens: u32) -> Hedged {
    let ends = std::sync::Arc::new(Ends(AtomicUsize::new(0)));
    let s: Scheduler<J> = Scheduler::with_hooks(Config::default(), vec![ends.clone()]);
    let mut cd = s.connect_consumerd(peer(1), &[tc()]);
    let mut a = s.connect_agent(peer(2), &[tc()], 1);
    cd.submit(1, tc().key(), 0).unwrap();
    let Some(Dispatch::Assign(t)) = a.poll() else { panic!("not assigned") };
    let id = t.id();
    drop(t);
    let mut b = s.connect_agent(peer(3), &[tc()], 1);
    drop(a);
    let Some(Dispatch::Assign(t)) = b.poll() else { panic!("not placed again") };
    drop(t);
    let back = s.connect_agent_resuming(peer(2), &[tc()], tokens, 1);
    (ends, s, cd, b, back, id)
}

/// Offers the run `back` holds (handle 7) to the consumerd's session while
/// `f` acts on `other` (two threads). A run not taken is given back at the
/// agent's window, as the scheduler does. Returns both.
fn offer_held_while<T: Send + 'static>(
    cd: ccroute_core::ConsumerdSession<J>,
    back: &ccroute_core::AgentSession<J>,
    mut other: T,
    f: impl FnOnce(&mut T) + Send + 'static,
) -> (ccroute_core::ConsumerdSession<J>, T) {
    let held = back.id();
    let tc_ = thread::spawn(move || {
        let copied = cd.copy_held(1, held, 7);
        (cd, copied)
    });
    let to = thread::spawn(move || {
        f(&mut other);
        other
    });
    let (cd, copied) = tc_.join().unwrap();
    let other = to.join().unwrap();
    if copied.is_none() {
        assert_eq!(back.release_reserved(1), 1);
    }
    (cd, other)
}

/// (h) An agent lost with a task comes back holding its run while the task
/// runs again on another agent; its run is adopted as the task's copy while
/// that other agent answers. One answer reaches the consumerd, the task ends
/// once, and both tokens — the reserved one too — come back, whichever wins.
#[test]
fn a_held_run_adopted_as_a_copy_racing_the_tasks_answer_ends_once() {
    model(|| {
        let (ends, s, cd, b, mut back, id) = cut_off_and_back(1);
        let (mut cd, mut b) = offer_held_while(cd, &back, b, move |b| b.complete(id, Some(true)).unwrap());
        answer_all_held(&mut back);
        answer_all_held(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((b, back, cd));
    });
}

/// (h) As above, with the returning agent's run answered while the task's
/// other agent answers: the two copies finish together.
#[test]
fn a_held_run_and_the_run_begun_again_finishing_together_answer_once() {
    model(|| {
        let (ends, s, mut cd, b, mut back, id) = cut_off_and_back(1);
        assert_eq!(cd.copy_held(1, back.id(), 7), Some(true));
        let Some(Dispatch::Adopt { task, .. }) = back.poll() else { panic!("not adopted") };
        drop(task);
        let (mut back, mut b) = finish_together(back, b, id);
        answer_all_held(&mut back);
        answer_all_held(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((b, back, cd));
    });
}

/// (h) As above, when the task placed again already has a straggler's copy
/// on a third agent: the held run takes that copy's place while the copy
/// answers. One answer, the task ends once, and all three agents' tokens
/// come back (the replaced copy's answer, if it came second, is stale).
#[test]
fn a_held_run_replacing_a_stragglers_copy_as_it_answers_ends_once() {
    model(|| {
        let (ends, s, cd, mut b, mut back, id) = cut_off_and_back(1);
        let mut c = s.connect_agent(peer(4), &[tc()], 1);
        assert!(b.hedge(id, 0), "a straggler's copy");
        let Some(Dispatch::Assign(t)) = c.poll() else { panic!("the copy was not sent") };
        drop(t);
        let (mut cd, mut c) = offer_held_while(cd, &back, c, move |c| c.complete(id, Some(true)).unwrap());
        answer_all_held(&mut back);
        answer_all_held(&mut c);
        answer_all_held(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((b, c, back, cd));
    });
}

/// (h) The held run is offered while the task's agent copies the task as a
/// straggler onto the very agent that holds the run (its free token): that
/// agent runs one of the two, never cancels both, and the task's answer is
/// a run's own (`true`), not a cancelled one's; no token is left held.
#[test]
fn a_held_run_offered_while_its_agent_gets_a_stragglers_copy_answers_with_a_run() {
    model(|| {
        let (ends, s, cd, b, mut back, id) = cut_off_and_back(2);
        let (mut cd, mut b) = offer_held_while(cd, &back, b, move |b| {
            b.hedge(id, 0);
        });
        answer_all_held(&mut back);
        answer_all_held(&mut b);
        let reply = assert_answered_once(&mut cd, &ends, &s);
        assert_eq!(reply, ccroute_core::Reply::Done(Some(true)), "a cancelled run answered the task");
        drop((b, back, cd));
    });
}

/// (h) The agent that came back holding its run is lost again while that
/// run is offered to the task's consumerd: whether the offer finds the
/// agent or not, the task goes on where it was placed again, one answer
/// reaches the consumerd, the task ends once, and no token is left held
/// (the reserved one leaves with its agent).
#[test]
fn a_held_run_offered_as_its_agent_is_lost_again_ends_once() {
    model(|| {
        let (ends, s, cd, mut b, back, id) = cut_off_and_back(1);
        let held = back.id();
        let offer = thread::spawn(move || {
            let _ = cd.copy_held(1, held, 7);
            cd
        });
        let lose = thread::spawn(move || drop(back));
        let mut cd = offer.join().unwrap();
        lose.join().unwrap();
        b.complete(id, Some(true)).unwrap();
        answer_all_held(&mut b);
        assert_answered_once(&mut cd, &ends, &s);
        drop((b, cd));
    });
}

/// Plays an agent as `Work` behaves: a cancel kills the run under its id,
/// which answers at once that it could not finish (`None`); an id sent
/// while a run under it is live replaces that run, which answers nothing;
/// every run left live then finishes (`true`), one at a time, each answer
/// followed by what it lets the session send. `live` carries the runs
/// across calls.
fn play_agent(agent: &mut ccroute_core::AgentSession<J>, live: &mut Vec<ccroute_core::TaskId>) {
    loop {
        while let Some(d) = agent.poll() {
            match d {
                Dispatch::Assign(t) | Dispatch::Adopt { task: t, .. } => {
                    let id = t.id();
                    drop(t);
                    live.retain(|&l| l != id);
                    live.push(id);
                }
                Dispatch::Cancel(id) => {
                    if let Some(at) = live.iter().position(|&l| l == id) {
                        live.remove(at);
                        agent.complete(id, None).unwrap();
                    }
                }
                _ => {}
            }
        }
        let Some(id) = live.pop() else { return };
        agent.complete(id, Some(true)).unwrap();
    }
}

/// (h) A held run takes the place of a straggler's copy on `c` while the
/// task's agent `b` is lost: the task, placed again, may go to `c` — whose
/// replaced copy still runs — before the copy's cancel is pushed. That late
/// cancel names the copy's attempt and stops only the copy; the new run is
/// sent once the copy has answered, and the task's answer is a run's own
/// (`true`), not a cancelled one's; no token is left held.
#[test]
fn a_held_run_replacing_a_copy_as_the_tasks_agent_is_lost_leaves_the_new_run_alone() {
    model(|| {
        let (ends, s, cd, b, mut back, id) = cut_off_and_back(1);
        let mut c = s.connect_agent(peer(4), &[tc()], 2);
        assert!(b.hedge(id, 0), "a straggler's copy");
        let Some(Dispatch::Assign(t)) = c.poll() else { panic!("the copy was not sent") };
        drop(t);
        let mut on_c = vec![id];
        let (mut cd, ()) = offer_held_while(cd, &back, (), move |()| drop(b));
        play_agent(&mut back, &mut Vec::new());
        play_agent(&mut c, &mut on_c);
        play_agent(&mut back, &mut Vec::new());
        let reply = assert_answered_once(&mut cd, &ends, &s);
        assert_eq!(reply, ccroute_core::Reply::Done(Some(true)), "a cancelled run answered the task");
        drop((c, back, cd));
    });
}
