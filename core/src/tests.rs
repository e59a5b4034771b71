//! Tests of the core, driven the way the network layer drives it: through
//! sessions, their outboxes and their drops. Each kubecc bug the core could
//! repeat has a test named after it.

#![allow(clippy::unwrap_used)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Mutex;

use ccroute_wire::{RetryReason, ToolchainKey};

use super::*;
use crate::sync::Arc;

pub(crate) use super::test_support::{peer, tc, CostedJob, FallibleJob, TestJob, UNKNOWN_COST};

type S = Scheduler<TestJob>;

fn sched() -> S {
    Scheduler::new(Config::default())
}

/// Takes every assignment waiting for an agent.
fn assigned<J: Job>(a: &mut AgentSession<J>) -> Vec<TaskId> {
    let mut out = vec![];
    while let Some(d) = a.poll() {
        if let Dispatch::Assign(t) = d {
            out.push(t.id());
        }
    }
    out
}

fn answers<J: Job>(c: &mut ConsumerdSession<J>) -> Vec<Answer<J::Answer>> {
    std::iter::from_fn(|| c.poll_answer()).collect()
}

fn body_of(a: &mut AgentSession<TestJob>) -> Vec<(TaskId, u64)> {
    let mut out = vec![];
    while let Some(d) = a.poll() {
        if let Dispatch::Assign(t) = d {
            out.push((t.id(), *t.body()));
        }
    }
    out
}

#[test]
fn a_task_goes_to_an_agent_and_is_answered_once() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(7, tc("gcc").key(), 99).unwrap();
    let got = body_of(&mut agent);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].1, 99);
    agent.complete(got[0].0, true).unwrap();
    let a = answers(&mut cd);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].client_id, 7);
    assert_eq!(a[0].reply, Reply::Done(true));
    assert!(answers(&mut cd).is_empty());
    assert_eq!(agent.complete(got[0].0, true), Err(CompleteError::UnknownTask(got[0].0)), "answered twice");
    assert_eq!(s.agents()[0].tokens_in_use, 0);
}

#[test]
fn submit_checks_ids_and_toolchains() {
    let s = sched();
    let _agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    assert_eq!(cd.submit(1, tc("gcc").key(), 0), Err(RouteError::DuplicateTask(1)));
    assert_eq!(cd.submit(2, ToolchainKey(0), 0), Err(RouteError::InvalidToolchain(ToolchainKey(0))));
    // An unannounced toolchain is fine: it gets a lane, but the route does not list the consumerd.
    cd.submit(3, tc("clang").key(), 0).unwrap();
    assert_eq!(answers(&mut cd)[0].reply, Reply::RunLocally(RetryReason::NoAgents));
    assert!(s.routes().iter().all(|r| r.toolchain != tc("clang").key()));
    assert_eq!(RouteError::NoAgents.to_string(), "no available agents can run this task");
}

#[test]
fn no_agent_for_the_toolchain_means_run_locally() {
    let s = sched();
    let _agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut cd = s.connect_consumerd(peer(2), &[tc("clang")]);
    cd.submit(1, tc("clang").key(), 0).unwrap();
    assert_eq!(answers(&mut cd)[0].reply, Reply::RunLocally(RetryReason::NoAgents));
}

#[test]
fn b7_last_agent_leaving_answers_waiting_tasks_instead_of_panicking() {
    // kubecc B7: the route's channel could be closed under a sender (panic),
    // and Route had no timeout (hang).
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    for id in 0..5 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    assert_eq!(assigned(&mut agent).len(), 1);
    assert_eq!(s.routes()[0].queued, 4);
    drop(agent);
    let a = answers(&mut cd);
    assert_eq!(a.len(), 5, "the running task and the four waiting ones");
    assert!(a.iter().all(|a| a.reply == Reply::RunLocally(RetryReason::NoAgents)));
    assert_eq!(cd.in_flight(), 0);
}

#[test]
fn tokens_bound_the_tasks_an_agent_runs() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 2);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    for id in 0..6 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    let mut running = assigned(&mut agent);
    assert_eq!(running.len(), 2);
    let mut done = 0;
    while let Some(t) = running.pop() {
        agent.complete(t, true).unwrap();
        done += 1;
        running.extend(assigned(&mut agent));
        assert!(running.len() <= 2, "never more than the limit");
        assert_eq!(s.agents()[0].tokens_in_use as usize, running.len());
    }
    assert_eq!(done, 6);
    assert_eq!(answers(&mut cd).len(), 6);
}

#[test]
fn placement_prefers_the_least_loaded_agent() {
    let s = sched();
    let mut a = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut b = s.connect_agent(peer(2), &[tc("gcc")], 8);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for id in 0..6 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    // 6 tasks over limits 4 and 8 by in_use/limit: 2 and 4.
    assert_eq!((assigned(&mut a).len(), assigned(&mut b).len()), (2, 4));
}

#[test]
fn large_routes_place_within_a_window_and_still_find_any_free_token() {
    let s = sched();
    let mut agents: Vec<_> = (0..40).map(|i| s.connect_agent(peer(i), &[tc("gcc")], 1)).collect();
    let mut cd = s.connect_consumerd(peer(100), &[tc("gcc")]);
    for id in 0..40 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    let per_agent: Vec<usize> = agents.iter_mut().map(|a| assigned(a).len()).collect();
    assert!(per_agent.iter().all(|&n| n == 1), "every one of 40 single-token agents got one task: {per_agent:?}");
    cd.submit(40, tc("gcc").key(), 40).unwrap();
    assert_eq!(s.routes()[0].queued, 1, "all busy: it waits");
}

#[test]
fn waiting_tasks_are_served_round_robin_across_consumerds() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut big = s.connect_consumerd(peer(2), &[tc("gcc")]);
    let mut small = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for id in 0..20 {
        big.submit(id, tc("gcc").key(), 1).unwrap();
    }
    for id in 0..4 {
        small.submit(id, tc("gcc").key(), 2).unwrap();
    }
    let mut order = vec![];
    loop {
        let got = body_of(&mut agent);
        if got.is_empty() {
            break;
        }
        for (t, who) in got {
            order.push(who);
            agent.complete(t, true).unwrap();
        }
    }
    assert_eq!(order.len(), 24);
    // The first task was placed at once; then the two lanes alternate until
    // the small one is empty: the small build is done within 9 placements.
    let last_small = order.iter().rposition(|&w| w == 2).unwrap();
    assert!(last_small <= 9, "small consumerd starved: {order:?}");
}

/// The bodies (expected microseconds) an agent of one token runs, in order,
/// after `submit` filled the lanes while its token was taken.
fn costed_order(config: Config, submit: impl FnOnce(&mut [ConsumerdSession<CostedJob>])) -> Vec<u64> {
    let s: Scheduler<CostedJob> = Scheduler::new(config);
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cds = [s.connect_consumerd(peer(2), &[tc("gcc")]), s.connect_consumerd(peer(3), &[tc("gcc")])];
    // The token taken first, by a task of its own.
    cds[0].submit(999, tc("gcc").key(), 1).unwrap();
    submit(&mut cds);
    let mut order = vec![];
    loop {
        let mut got = vec![];
        while let Some(d) = agent.poll() {
            if let Dispatch::Assign(t) = d {
                got.push((t.id(), *t.body()));
            }
        }
        if got.is_empty() {
            break;
        }
        for (t, cost) in got {
            order.push(cost);
            agent.complete(t, true).unwrap();
        }
    }
    order.remove(0);
    order
}

const MS: u64 = 1000;

#[test]
fn among_a_consumerds_waiting_units_the_longest_expected_goes_first() {
    let costs = [100 * MS, 5000 * MS, 300 * MS, 20 * MS, 1200 * MS, 300 * MS + 1];
    let submit = |cds: &mut [ConsumerdSession<CostedJob>]| {
        for (id, c) in costs.iter().enumerate() {
            cds[0].submit(id as u64, tc("gcc").key(), *c).unwrap();
        }
    };
    let on = Config { longest_first: true, ..Config::default() };
    let order = costed_order(on.clone(), submit);
    // By class, dearest first; within a class (the two of ~300 ms), first come first served.
    assert_eq!(order, [5000 * MS, 1200 * MS, 300 * MS, 300 * MS + 1, 100 * MS, 20 * MS]);
    // Turned off: first come, first served.
    let fifo = costed_order(Config::default(), submit);
    assert_eq!(fifo, costs);
}

#[test]
fn longest_first_keeps_the_round_robin_across_consumerds() {
    // One consumerd's units are all long, the other's all short: the short
    // build still gets every other token, not the leftovers.
    let order = costed_order(Config { longest_first: true, ..Config::default() }, |cds| {
        for id in 0..6 {
            cds[0].submit(id, tc("gcc").key(), 8000 * MS).unwrap();
            cds[1].submit(id, tc("gcc").key(), 10 * MS).unwrap();
        }
    });
    assert_eq!(order.len(), 12);
    let last_short = order.iter().rposition(|&c| c == 10 * MS).unwrap();
    assert!(last_short <= 11, "{order:?}");
    let first_short = order.iter().position(|&c| c == 10 * MS).unwrap();
    assert!(first_short <= 1, "the short build waited for the long one: {order:?}");
    for pair in order.chunks(2) {
        assert_ne!(pair[0], pair[1], "lanes alternate: {order:?}");
    }
}

#[test]
fn cost_classes_double_from_64_ms_to_4_s() {
    let class = |ms: u64| crate::records::cost_class(Some(ms * MS));
    assert_eq!([class(0), class(63), class(64), class(127), class(128)], [0, 0, 1, 1, 2]);
    assert_eq!([class(2047), class(2048), class(4096), class(600_000)], [5, 6, 7, 7]);
    // Nothing known ranks as a second.
    assert_eq!(crate::records::cost_class(None), class(1000));
}

#[test]
fn b5_a_lost_agents_tasks_are_placed_again_not_lost() {
    let s = sched();
    let mut a1 = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for id in 0..4 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    // Two were sent to the agent; two still sit in its outbox.
    assert!(matches!(a1.poll(), Some(Dispatch::Assign(_))));
    assert!(matches!(a1.poll(), Some(Dispatch::Assign(_))));
    let mut a2 = s.connect_agent(peer(2), &[tc("gcc")], 4);
    drop(a1);
    let moved = assigned(&mut a2);
    assert_eq!(moved.len(), 4, "sent and unsent tasks moved to the other agent");
    for t in moved {
        a2.complete(t, true).unwrap();
    }
    let a = answers(&mut cd);
    assert_eq!(a.len(), 4);
    assert!(a.iter().all(|a| a.reply == Reply::Done(true)));
    assert_eq!(s.totals().requeued, 4);
}

#[test]
fn b15_placements_are_bounded() {
    let s: S = Scheduler::new(Config { max_attempts: 2, ..Config::default() });
    let mut cd = s.connect_consumerd(peer(9), &[tc("gcc")]);
    let mut a1 = s.connect_agent(peer(1), &[tc("gcc")], 1);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    assert_eq!(assigned(&mut a1).len(), 1);
    let mut a2 = s.connect_agent(peer(2), &[tc("gcc")], 1);
    drop(a1);
    assert_eq!(assigned(&mut a2).len(), 1, "second placement");
    let _a3 = s.connect_agent(peer(3), &[tc("gcc")], 1);
    drop(a2);
    assert_eq!(answers(&mut cd)[0].reply, Reply::RunLocally(RetryReason::AttemptsExhausted));
}

#[test]
fn b14_a_lost_agents_late_result_is_never_delivered() {
    let s = sched();
    let mut cd = s.connect_consumerd(peer(9), &[tc("gcc")]);
    let mut a1 = s.connect_agent(peer(1), &[tc("gcc")], 1);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    let t = assigned(&mut a1)[0];
    let mut a2 = s.connect_agent(peer(2), &[tc("gcc")], 1);
    drop(a1);
    // The lost agent reconnects under the same node id and answers its old task.
    let mut back = s.connect_agent(peer(1), &[tc("gcc")], 1);
    assert_eq!(back.complete(t, false), Err(CompleteError::UnknownTask(t)));
    assert_eq!(assigned(&mut a2), vec![t]);
    a2.complete(t, true).unwrap();
    let a = answers(&mut cd);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].reply, Reply::Done(true), "the second agent's answer, once");
}

#[test]
fn cancelling_a_waiting_task_frees_its_place() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    cd.submit(2, tc("gcc").key(), 2).unwrap();
    cd.submit(3, tc("gcc").key(), 3).unwrap();
    assert!(cd.cancel(2));
    assert!(!cd.cancel(2));
    let first = body_of(&mut agent);
    agent.complete(first[0].0, true).unwrap();
    let next = body_of(&mut agent);
    assert_eq!(next.iter().map(|x| x.1).collect::<Vec<_>>(), vec![3], "the cancelled task was skipped");
    agent.complete(next[0].0, true).unwrap();
    let ids: Vec<u64> = answers(&mut cd).iter().map(|a| a.client_id).collect();
    assert_eq!(ids, vec![1, 3]);
    assert_eq!(s.totals().cancelled, 1);
}

#[test]
fn cancelling_a_running_task_tells_the_agent_and_keeps_the_token_until_it_answers() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    cd.submit(2, tc("gcc").key(), 2).unwrap();
    let t = assigned(&mut agent)[0];
    assert!(cd.cancel(1));
    match agent.poll() {
        Some(Dispatch::Cancel(id)) => assert_eq!(id, t),
        other => panic!("expected a cancel, got {other:?}"),
    }
    assert_eq!(s.agents()[0].tokens_in_use, 1, "the compiler is still running");
    assert!(agent.poll().is_none(), "the next task waits for the token");
    agent.complete(t, false).unwrap();
    let next = body_of(&mut agent);
    assert_eq!(next.len(), 1);
    agent.complete(next[0].0, true).unwrap();
    let a = answers(&mut cd);
    assert_eq!(a.len(), 1, "no answer for the cancelled task");
    assert_eq!(a[0].client_id, 2);
    assert_eq!(s.agents()[0].stale, 1);
}

#[test]
fn a_consumerd_leaving_cancels_its_tasks_on_the_agents() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 2);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    let mut other = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for id in 0..4 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    other.submit(9, tc("gcc").key(), 9).unwrap();
    let running = assigned(&mut agent);
    assert_eq!(running.len(), 2);
    drop(cd);
    let mut cancels = vec![];
    while let Some(d) = agent.poll() {
        if let Dispatch::Cancel(t) = d {
            cancels.push(t);
        }
    }
    cancels.sort();
    let mut sorted = running.clone();
    sorted.sort();
    assert_eq!(cancels, sorted);
    for t in running {
        agent.complete(t, false).unwrap();
    }
    let next = assigned(&mut agent);
    assert_eq!(next.len(), 1, "the other consumerd's task runs");
    agent.complete(next[0], true).unwrap();
    assert_eq!(answers(&mut other).len(), 1);
    assert_eq!(s.agents()[0].tokens_in_use, 0);
    assert_eq!(s.routes()[0].queued, 0);
}

#[test]
fn shrinking_a_limit_never_preempts_and_growing_it_serves_waiting_tasks() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 8);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    s.set_agent_limit(agent.id(), 4);
    for id in 0..10 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    let mut running = assigned(&mut agent);
    assert_eq!(running.len(), 4);
    assert_eq!(s.set_agent_limit(agent.id(), 2), Some(2));
    assert_eq!(s.agents()[0].tokens_in_use, 4, "still running");
    agent.complete(running.pop().unwrap(), true).unwrap();
    agent.complete(running.pop().unwrap(), true).unwrap();
    assert!(assigned(&mut agent).is_empty(), "2 running at limit 2");
    agent.complete(running.pop().unwrap(), true).unwrap();
    running.extend(assigned(&mut agent));
    assert_eq!(running.len(), 2);
    assert_eq!(s.set_agent_limit(agent.id(), 100), Some(8), "clamped to the agent's maximum");
    running.extend(assigned(&mut agent));
    assert_eq!(running.len(), 7, "a raise places all five waiting tasks at once");
}

#[test]
fn b4_limits_come_from_the_agent_and_are_clamped() {
    let s = sched();
    let a0 = s.connect_agent(peer(1), &[tc("gcc")], 0);
    let big = s.connect_agent(peer(2), &[tc("gcc")], 5000);
    assert_eq!(a0.token_limit(), 1);
    assert_eq!(big.token_limit(), MAX_TOKENS);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    assert_eq!(s.agents().iter().map(|a| a.tokens_in_use).sum::<u32>(), 1);
}

#[test]
fn b9_a_toolchain_update_touches_only_that_peer() {
    let s = sched();
    let mut a = s.connect_agent(peer(1), &[tc("gcc"), tc("g++")], 4);
    let mut b = s.connect_agent(peer(2), &[tc("g++")], 4);
    let mut x = s.connect_consumerd(peer(10), &[tc("gcc")]);
    let mut y = s.connect_consumerd(peer(11), &[tc("g++")]);
    assert_eq!(s.routes().len(), 2);
    // a drops g++ and gains clang: b keeps serving g++, and gcc is untouched.
    a.set_toolchains(&[tc("gcc"), tc("clang")]);
    let routes = s.routes();
    let gxx = routes.iter().find(|r| r.toolchain == tc("g++").key()).unwrap();
    assert_eq!(gxx.agents, vec![2]);
    assert_eq!(gxx.consumerds, vec![11]);
    assert_eq!(routes.iter().find(|r| r.toolchain == tc("clang").key()).unwrap().agents, vec![1]);
    y.submit(1, tc("g++").key(), 0).unwrap();
    x.submit(1, tc("gcc").key(), 0).unwrap();
    assert_eq!(assigned(&mut b).len(), 1);
    assert_eq!(assigned(&mut a).len(), 1);
    // Every later update applies too, for agents and consumerds alike (B9d).
    a.set_toolchains(&[tc("clang")]);
    a.set_toolchains(&[tc("clang"), tc("gcc")]);
    x.set_toolchains(&[tc("gcc"), tc("clang")]);
    x.set_toolchains(&[tc("clang")]);
    let routes = s.routes();
    assert_eq!(routes.iter().find(|r| r.toolchain == tc("gcc").key()).unwrap().consumerds, Vec::<u128>::new());
    assert_eq!(routes.iter().find(|r| r.toolchain == tc("clang").key()).unwrap().consumerds, vec![10]);
    x.submit(2, tc("clang").key(), 0).unwrap();
    assert_eq!(assigned(&mut a).len(), 1);
}

#[test]
fn b8_a_route_torn_down_is_gone_and_a_new_peer_gets_a_live_one() {
    let s = sched();
    let agent = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    drop(agent);
    drop(cd);
    assert!(s.routes().is_empty());
    assert_eq!(s.core.router.routes.values().len(), 0, "removed from the map, not just hidden");
    let mut agent = s.connect_agent(peer(3), &[tc("gcc")], 4);
    let mut cd = s.connect_consumerd(peer(4), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    let t = assigned(&mut agent);
    assert_eq!(t.len(), 1);
    agent.complete(t[0], true).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
}

#[test]
fn b11_a_duplicate_node_id_does_not_clobber_the_live_session() {
    let s = sched();
    let old = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut new = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    drop(old);
    assert_eq!(s.agents().len(), 1);
    assert_eq!(s.routes()[0].agents, vec![1]);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    let t = assigned(&mut new);
    assert_eq!(t.len(), 1);
    new.complete(t[0], true).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
}

struct Recorder {
    mode: Mutex<HashMap<u64, &'static str>>,
    held: Mutex<Vec<Interception<TestJob>>>,
    ends: AtomicUsize,
}

impl Hook<TestJob> for Recorder {
    fn pre_receive(&self, task: &TaskRef<'_, TestJob>) -> HookAction {
        let mode = self.mode.lock().unwrap().get(task.task().body()).copied().unwrap_or("pass");
        match mode {
            "reject" => HookAction::RejectRequest("not today".into()),
            "answer" => {
                let i = task.intercept().unwrap();
                assert!(i.answer(true));
                HookAction::RequestIntercepted
            }
            "hold" => {
                self.held.lock().unwrap().push(task.intercept().unwrap());
                HookAction::RequestIntercepted
            }
            "lie" => HookAction::RequestIntercepted,
            // A background lookup that misses and lets the task go before
            // this call returns (the cache hook under load).
            "resume-first" => {
                task.intercept().unwrap().proceed();
                HookAction::RequestIntercepted
            }
            _ => HookAction::ProcessRequestNormally,
        }
    }

    fn on_end(&self, _task: &Task<TestJob>, _end: EndView<'_, bool>) {
        self.ends.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[test]
fn hooks_reject_intercept_and_release_tasks() {
    let rec =
        Arc::new(Recorder { mode: Mutex::new(HashMap::new()), held: Mutex::new(vec![]), ends: AtomicUsize::new(0) });
    {
        let mut m = rec.mode.lock().unwrap();
        m.insert(1, "reject");
        m.insert(2, "answer");
        m.insert(3, "hold");
        m.insert(4, "hold");
        m.insert(5, "hold");
        m.insert(6, "lie");
    }
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec.clone()]);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    // A hook answers even with no agent connected (a cache hit).
    cd.submit(2, tc("gcc").key(), 2).unwrap();
    assert_eq!(answers(&mut cd)[0].reply, Reply::Intercepted(true));
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 8);
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    assert_eq!(answers(&mut cd)[0].reply, Reply::RunLocally(RetryReason::Rejected("not today".into())));
    for id in 3..=6 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    assert_eq!(body_of(&mut agent).iter().map(|x| x.1).collect::<Vec<_>>(), vec![6], "a lying hook does not strand");
    let mut held = std::mem::take(&mut *rec.held.lock().unwrap());
    assert_eq!(held.len(), 3);
    held.remove(0).proceed();
    drop(held.remove(0));
    assert!(cd.cancel(5));
    assert!(!held.remove(0).answer(true), "cancelled while held: the cancel won");
    let bodies: HashSet<u64> = body_of(&mut agent).iter().map(|x| x.1).collect();
    assert_eq!(bodies, HashSet::from([3, 4]), "proceed and drop both route the task");
    assert_eq!(rec.ends.load(std::sync::atomic::Ordering::SeqCst), 3, "reject, answer, cancel so far");
}

/// A hook whose background work resumes the task before `pre_receive`
/// returns: the task is placed once, by the resume — not a second time by a
/// run of the hooks that took the phase it saw for a lying hook's.
#[test]
fn a_task_resumed_before_its_hook_returns_is_placed_once() {
    let rec =
        Arc::new(Recorder { mode: Mutex::new(HashMap::new()), held: Mutex::new(vec![]), ends: AtomicUsize::new(0) });
    rec.mode.lock().unwrap().insert(7, "resume-first");
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec]);
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    // The agent's one token busy: the resumed task waits in the queue.
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    let first = assigned(&mut agent);
    assert_eq!(first.len(), 1);
    cd.submit(2, tc("gcc").key(), 7).unwrap();
    assert_eq!(s.routes()[0].queued, 1, "queued once");
    agent.complete(first[0], true).unwrap();
    let next = body_of(&mut agent);
    assert_eq!(next.iter().map(|x| x.1).collect::<Vec<_>>(), vec![7]);
    agent.complete(next[0].0, true).unwrap();
    assert!(body_of(&mut agent).is_empty(), "placed twice");
    assert_eq!(s.routes()[0].queued, 0, "the queue count drifted");
    assert_eq!(answers(&mut cd).len(), 2);
}

#[test]
fn b12_b16_counters_add_up() {
    let rec =
        Arc::new(Recorder { mode: Mutex::new(HashMap::new()), held: Mutex::new(vec![]), ends: AtomicUsize::new(0) });
    rec.mode.lock().unwrap().insert(1000, "answer");
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec]);
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 3);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc"), tc("clang")]);
    for id in 0..30 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    cd.submit(100, tc("clang").key(), 0).unwrap(); // no agent: retried
    cd.submit(101, tc("gcc").key(), 1000).unwrap(); // hook answers: intercepted
    cd.cancel(29);
    let mut n = 0;
    loop {
        let got = assigned(&mut agent);
        if got.is_empty() {
            break;
        }
        for t in got {
            agent.complete(t, n % 3 != 0).unwrap();
            n += 1;
        }
    }
    let a = answers(&mut cd);
    let t = s.totals();
    assert_eq!(t.requests, 32, "each submit counted once");
    assert_eq!(t.completed + t.failed, 29);
    assert_eq!((t.retried, t.intercepted, t.cancelled), (1, 1, 1));
    assert_eq!(t.requests, t.completed + t.failed + t.retried + t.intercepted + t.cancelled);
    assert_eq!(a.len() as u64, t.requests - t.cancelled);
    let ag = &s.agents()[0];
    assert_eq!((ag.completed, ag.failed), (t.completed, t.failed), "both sides count the same answers");
    assert_eq!(t.agent_results, t.completed + t.failed, "the agents' results, totalled");
    drop(cd);
    drop(agent);
    assert_eq!(s.totals(), t, "retired peers keep their counts");
}

#[test]
fn the_route_queue_is_bounded() {
    let s: S = Scheduler::new(Config { max_queued_per_route: 2, ..Config::default() });
    let _agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    for id in 0..4 {
        cd.submit(id, tc("gcc").key(), id).unwrap();
    }
    let a = answers(&mut cd);
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].client_id, 3);
    assert_eq!(a[0].reply, Reply::RunLocally(RetryReason::QueueFull));
}

#[test]
fn shutdown_sends_waiting_and_new_tasks_back() {
    let s = sched();
    let mut agent = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 0).unwrap();
    cd.submit(2, tc("gcc").key(), 0).unwrap();
    let running = assigned(&mut agent);
    s.shutdown();
    cd.submit(3, tc("gcc").key(), 0).unwrap();
    let a = answers(&mut cd);
    assert_eq!(a.iter().map(|a| a.client_id).collect::<Vec<_>>(), vec![2, 3]);
    assert!(a.iter().all(|a| a.reply == Reply::RunLocally(RetryReason::ShuttingDown)));
    agent.complete(running[0], true).unwrap();
    assert_eq!(answers(&mut cd)[0].reply, Reply::Done(true), "running tasks finish");
}

/// Threads submit, cancel, complete, and agents come and go; at the end every
/// task was answered exactly once unless cancelled, no token is held and no
/// task waits.
#[test]
fn threads_end_every_task_exactly_once_and_leak_no_token() {
    for round in 0..4 {
        stress_round(round);
    }
}

fn stress_round(seed: u64) {
    let s = sched();
    let toolchains = [tc("gcc"), tc("g++")];
    let stop = Arc::new(AtomicBool::new(false));
    let mut agent_threads = vec![];
    for a in 0..3u64 {
        let s = s.clone();
        let stop = stop.clone();
        agent_threads.push(std::thread::spawn(move || {
            let mut rng = seed.wrapping_mul(31).wrapping_add(a + 1);
            let mut session = s.connect_agent(peer(u128::from(a)), &[tc("gcc"), tc("g++")], 1 + (a as u32) * 2);
            let mut held: Vec<TaskId> = vec![];
            let mut reconnects = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                while let Some(d) = session.poll() {
                    if let Dispatch::Assign(t) = d {
                        held.push(t.id());
                    }
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if rng % 97 == 0 && reconnects < 3 {
                    // Lost mid-build with tasks in hand.
                    reconnects += 1;
                    held.clear();
                    session = s.connect_agent(peer(u128::from(a)), &[tc("gcc"), tc("g++")], 2);
                    continue;
                }
                if let Some(t) = held.pop() {
                    session.complete(t, rng % 5 != 0).unwrap();
                } else {
                    std::thread::yield_now();
                }
            }
            // Finish what is held so that tokens come back.
            loop {
                while let Some(d) = session.poll() {
                    if let Dispatch::Assign(t) = d {
                        held.push(t.id());
                    }
                }
                match held.pop() {
                    Some(t) => session.complete(t, true).unwrap(),
                    None => break,
                }
            }
            session
        }));
    }
    let mut consumer_threads = vec![];
    for c in 0..2u64 {
        let s = s.clone();
        let toolchains = toolchains.clone();
        consumer_threads.push(std::thread::spawn(move || {
            let mut cd = s.connect_consumerd(peer(100 + u128::from(c)), &toolchains);
            let mut answered: HashMap<u64, usize> = HashMap::new();
            let mut cancelled = HashSet::new();
            let mut rng = seed.wrapping_add(7 + c);
            let total = 3000u64;
            let mut next = 0u64;
            let mut open = HashSet::new();
            while next < total || !open.is_empty() {
                if next < total && open.len() < 64 {
                    let key = toolchains[(next % 2) as usize].key();
                    cd.submit(next, key, next).unwrap();
                    open.insert(next);
                    next += 1;
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if rng % 53 == 0 {
                    if let Some(&victim) = open.iter().next() {
                        if cd.cancel(victim) {
                            cancelled.insert(victim);
                            open.remove(&victim);
                        }
                    }
                }
                while let Some(a) = cd.poll_answer() {
                    *answered.entry(a.client_id).or_default() += 1;
                    assert!(!cancelled.contains(&a.client_id), "answer after cancel");
                    open.remove(&a.client_id);
                }
                std::thread::yield_now();
            }
            assert!(answered.values().all(|&n| n == 1), "an answer delivered twice");
            assert_eq!(answered.len() + cancelled.len(), total as usize, "a task was lost");
            cd
        }));
    }
    let consumerds: Vec<_> = consumer_threads.into_iter().map(|h| h.join().unwrap()).collect();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let agents: Vec<_> = agent_threads.into_iter().map(|h| h.join().unwrap()).collect();
    for a in s.agents() {
        assert_eq!(a.tokens_in_use, 0, "token leaked on {a:?}");
    }
    assert!(s.routes().iter().all(|r| r.queued == 0));
    let t = s.totals();
    assert_eq!(t.requests, 6000);
    assert_eq!(t.requests, t.completed + t.failed + t.retried + t.intercepted + t.cancelled);
    drop(agents);
    drop(consumerds);
    assert!(s.routes().is_empty());
}

#[test]
fn b22_agents_joining_while_tasks_arrive_are_ready_when_seen() {
    let s = sched();
    let mut cd = s.connect_consumerd(peer(100), &[tc("gcc")]);
    let _first = s.connect_agent(peer(0), &[tc("gcc")], 1);
    let joiner = {
        let s = s.clone();
        std::thread::spawn(move || (1..20).map(|i| s.connect_agent(peer(i), &[tc("gcc")], 2)).collect::<Vec<_>>())
    };
    let mut n = 0;
    while n < 200 {
        cd.submit(n, tc("gcc").key(), n).unwrap();
        n += 1;
    }
    let mut agents = joiner.join().unwrap();
    for a in s.agents() {
        assert!(a.tokens_in_use <= a.token_limit, "{a:?}");
    }
    // Everything placed so far, or waiting, gets done.
    let mut done = 0;
    let mut first = _first;
    loop {
        let mut progressed = false;
        for a in agents.iter_mut().chain(std::iter::once(&mut first)) {
            for t in assigned(a) {
                a.complete(t, true).unwrap();
                progressed = true;
            }
        }
        done += answers(&mut cd).len();
        if !progressed {
            break;
        }
    }
    assert_eq!(done, 200);
}

fn holder() -> Arc<Recorder> {
    let rec =
        Arc::new(Recorder { mode: Mutex::new(HashMap::new()), held: Mutex::new(vec![]), ends: AtomicUsize::new(0) });
    rec.mode.lock().unwrap().insert(1, "hold");
    rec
}

fn take_held(rec: &Recorder) -> Interception<TestJob> {
    let mut held = rec.held.lock().unwrap();
    assert_eq!(held.len(), 1, "one task held");
    held.remove(0)
}

/// An agent that still runs a task for an earlier scheduler connects with a
/// token reserved for it; the resumed task is adopted with that token, the
/// agent answers it, and the consumerd gets that one answer.
#[test]
fn a_resumed_task_is_adopted_by_the_agent_that_holds_it() {
    let rec = holder();
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec.clone()]);
    let mut agent = s.connect_agent_resuming(peer(1), &[tc("gcc")], 2, 1);
    assert_eq!(agent.reserved(), 1);
    assert_eq!(s.agents()[0].tokens_in_use, 1, "reserved before anything is placed");
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    // Body 1 is held by the hook (the resumed task); body 2 is an ordinary one.
    cd.submit(10, tc("gcc").key(), 1).unwrap();
    cd.submit(11, tc("gcc").key(), 2).unwrap();
    cd.submit(12, tc("gcc").key(), 2).unwrap();
    assert_eq!(assigned(&mut agent).len(), 1, "one free token besides the reserved one");
    assert_eq!(take_held(&rec).adopt(agent.id(), 1 << 63 | 5).ok(), Some(true));
    assert_eq!(agent.reserved(), 0);
    let Some(Dispatch::Adopt { task, handle }) = agent.poll() else { panic!("no adoption") };
    assert_eq!((handle, *task.body()), (1 << 63 | 5, 1));
    agent.complete(task.id(), true).unwrap();
    let a = answers(&mut cd);
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].client_id, &a[0].reply), (10, &Reply::Done(true)));
    // Its token served the task that waited.
    assert_eq!(assigned(&mut agent).len(), 1);
}

/// A resumed task cancelled while its adoption is on the way: the agent is
/// told to drop what it holds, nothing is answered, and the token comes back.
#[test]
fn an_adoption_that_races_a_cancel_gives_its_token_back() {
    let rec = holder();
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec.clone()]);
    let mut agent = s.connect_agent_resuming(peer(1), &[tc("gcc")], 2, 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(10, tc("gcc").key(), 1).unwrap();
    let held = take_held(&rec);
    assert!(cd.cancel(10));
    // Cancelled before the adoption: it says so and keeps the reservation.
    assert_eq!(held.adopt(agent.id(), 7).ok(), Some(false));
    assert!(matches!(agent.poll(), Some(Dispatch::Abandon(7))));
    assert!(agent.poll().is_none());
    assert_eq!(s.agents()[0].tokens_in_use, 0);
    assert!(answers(&mut cd).is_empty());
}

/// An agent that leaves holding an adopted task has it placed again, like
/// any task it held; reservations nobody adopted come back with it.
#[test]
fn an_agent_lost_after_adopting_has_the_task_placed_again() {
    let rec = holder();
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec.clone()]);
    let agent = s.connect_agent_resuming(peer(1), &[tc("gcc")], 4, 3);
    let mut other = s.connect_agent(peer(3), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(10, tc("gcc").key(), 1).unwrap();
    assert_eq!(take_held(&rec).adopt(agent.id(), 9).ok(), Some(true));
    drop(agent);
    let placed = body_of(&mut other);
    assert_eq!(placed.iter().map(|x| x.1).collect::<Vec<_>>(), vec![1], "placed again on the other agent");
    other.complete(placed[0].0, true).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
    assert_eq!(s.agents()[0].tokens_in_use, 0);
}

/// Reservations no consumerd claimed are given back, and their tokens serve
/// waiting tasks; an agent gone or without a reservation cannot adopt.
#[test]
fn unclaimed_reservations_come_back_and_adoption_needs_one() {
    let rec = holder();
    let s: S = Scheduler::with_hooks(Config::default(), vec![rec.clone()]);
    let mut agent = s.connect_agent_resuming(peer(1), &[tc("gcc")], 2, 5);
    assert_eq!(agent.reserved(), 2, "no more than its limit");
    let mut cd = s.connect_consumerd(peer(2), &[tc("gcc")]);
    cd.submit(11, tc("gcc").key(), 2).unwrap();
    assert!(assigned(&mut agent).is_empty(), "every token reserved");
    assert_eq!(agent.release_reserved(5), 2);
    assert_eq!(assigned(&mut agent).len(), 1, "a released token serves the waiting task");
    cd.submit(10, tc("gcc").key(), 1).unwrap();
    let held = take_held(&rec);
    let Err(held) = held.adopt(agent.id(), 3) else { panic!("adopted without a reservation") };
    let Err(held) = held.adopt(AgentId(999), 3) else { panic!("adopted by an agent that is not there") };
    held.proceed();
    assert_eq!(assigned(&mut agent).len(), 1, "placed like any task");
}

/// Assignments an agent received, by cost.
fn costs_to(a: &mut AgentSession<CostedJob>) -> Vec<(TaskId, u64)> {
    let mut out = vec![];
    while let Some(d) = a.poll() {
        if let Dispatch::Assign(t) = d {
            out.push((t.id(), *t.body()));
        }
    }
    out
}

fn speed_aware() -> Scheduler<CostedJob> {
    Scheduler::new(Config { speed_aware: true, ..Config::default() })
}

#[test]
fn speed_aware_placement_takes_the_fastest_free_agent_before_the_least_loaded() {
    let s = speed_aware();
    let mut slow = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut fast = s.connect_agent(peer(2), &[tc("gcc")], 4);
    slow.set_speed(400);
    fast.set_speed(1000);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for id in 0..4 {
        cd.submit(id, tc("gcc").key(), 10 * MS).unwrap();
    }
    assert_eq!(costs_to(&mut fast).len(), 4, "every one to the fast agent while it has tokens");
    assert!(costs_to(&mut slow).is_empty());
    // Agents of about one speed (within a quarter) are placed on by load.
    let s = speed_aware();
    let mut a = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut b = s.connect_agent(peer(2), &[tc("gcc")], 4);
    a.set_speed(1000);
    b.set_speed(1100);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for id in 0..4 {
        cd.submit(id, tc("gcc").key(), 10 * MS).unwrap();
    }
    assert_eq!((costs_to(&mut a).len(), costs_to(&mut b).len()), (2, 2));
}

/// A slow agent (a quarter speed) and a fast one, two tokens each, the
/// fast one's both taken by units of 100 ms (returned).
type SlowFast = (AgentSession<CostedJob>, AgentSession<CostedJob>, ConsumerdSession<CostedJob>);
fn fast_agent_busy(s: &Scheduler<CostedJob>) -> (SlowFast, Vec<(TaskId, u64)>) {
    let slow = s.connect_agent(peer(1), &[tc("gcc")], 2);
    let mut fast = s.connect_agent(peer(2), &[tc("gcc")], 2);
    slow.set_speed(250);
    fast.set_speed(1000);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(0, tc("gcc").key(), 100 * MS).unwrap();
    cd.submit(1, tc("gcc").key(), 100 * MS).unwrap();
    let on_fast = costs_to(&mut fast);
    assert_eq!(on_fast.len(), 2);
    ((slow, fast, cd), on_fast)
}

#[test]
fn a_long_unit_waits_for_a_fast_agent_and_a_short_one_takes_the_slow_agent() {
    let s = speed_aware();
    let ((mut slow, mut fast, mut cd), on_fast) = fast_agent_busy(&s);
    // An 8 s unit: 32 s on the slow agent; on the fast one after a wait of
    // about 50 ms. It waits, though the slow agent has two free tokens.
    cd.submit(2, tc("gcc").key(), 8000 * MS).unwrap();
    assert!(costs_to(&mut slow).is_empty(), "the long unit went to the slow agent");
    assert_eq!(s.routes()[0].queued, 1);
    // A 10 ms unit: 40 ms on the slow agent now beats waiting.
    cd.submit(3, tc("gcc").key(), 10 * MS).unwrap();
    assert_eq!(costs_to(&mut slow).iter().map(|t| t.1).collect::<Vec<_>>(), [10 * MS]);
    // The fast agent's next free token takes the long unit.
    fast.complete(on_fast[0].0, true).unwrap();
    assert_eq!(costs_to(&mut fast).iter().map(|t| t.1).collect::<Vec<_>>(), [8000 * MS]);
    assert_eq!(s.routes()[0].queued, 0);
    // The same farm without speed-aware placement: the long unit starts on the slow agent.
    let s = Scheduler::<CostedJob>::new(Config::default());
    let mut slow = s.connect_agent(peer(1), &[tc("gcc")], 2);
    let mut fast = s.connect_agent(peer(2), &[tc("gcc")], 2);
    slow.set_speed(250);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    for (id, cost) in [100 * MS, 100 * MS, 8000 * MS].into_iter().enumerate() {
        cd.submit(id as u64, tc("gcc").key(), cost).unwrap();
    }
    let placed: Vec<u64> = costs_to(&mut slow).into_iter().chain(costs_to(&mut fast)).map(|t| t.1).collect();
    assert_eq!(placed.len(), 3, "nothing waits with the policy off");
}

#[test]
fn a_unit_whose_cost_is_not_known_takes_a_free_slow_agent_rather_than_wait() {
    // A cold farm's first wave: every prediction is the same guess. Held for
    // the fast agents, the whole wave waited while the slow ones idled (the
    // farm's mixed-critical took 1.07-1.09 × its bound, against 1.00 warm).
    let s = speed_aware();
    let ((mut slow, _fast, mut cd), _) = fast_agent_busy(&s);
    // Not known: it takes one of the slow agent's free tokens at once.
    cd.submit(2, tc("gcc").key(), UNKNOWN_COST).unwrap();
    assert_eq!(costs_to(&mut slow).iter().map(|t| t.1).collect::<Vec<_>>(), [UNKNOWN_COST]);
    assert_eq!(s.routes()[0].queued, 0);
    // Known to cost a second (the guess's own figure): it waits for the fast
    // agent, though the slow one has a free token.
    cd.submit(3, tc("gcc").key(), 1000 * MS).unwrap();
    assert!(costs_to(&mut slow).is_empty(), "a known second went to the slow agent");
    assert_eq!(s.routes()[0].queued, 1);
    // It waits for no busy agent, but a free token of a faster one is still
    // its own, though the window it was placed through showed only slow agents.
    let s = speed_aware();
    let mut slow: Vec<_> =
        (0..crate::router::WINDOW as u128).map(|i| s.connect_agent(peer(i), &[tc("gcc")], 1)).collect();
    for a in &mut slow {
        a.set_speed(250);
    }
    let mut fast = s.connect_agent(peer(100), &[tc("gcc")], 1);
    fast.set_speed(1000);
    let mut cd = s.connect_consumerd(peer(101), &[tc("gcc")]);
    cd.submit(0, tc("gcc").key(), UNKNOWN_COST).unwrap();
    assert_eq!(costs_to(&mut fast).len(), 1, "a free fast token went unused");
    assert!(slow.iter_mut().all(|a| costs_to(a).is_empty()));
}

#[test]
fn a_slow_agent_takes_the_cheapest_waiting_unit_and_a_long_wait_lets_it_take_a_long_one() {
    let s = speed_aware();
    let mut fast = s.connect_agent(peer(2), &[tc("gcc")], 1);
    let mut slow = s.connect_agent(peer(1), &[tc("gcc")], 1);
    fast.set_speed(1000);
    slow.set_speed(500);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(0, tc("gcc").key(), 500 * MS).unwrap();
    let first = costs_to(&mut fast);
    assert_eq!(first.len(), 1);
    // A long unit: 8 s on the slow agent, about 5 on the fast one once its
    // token is back. It waits.
    cd.submit(1, tc("gcc").key(), 4000 * MS).unwrap();
    assert!(costs_to(&mut slow).is_empty());
    // A short one behind it takes the slow agent.
    cd.submit(2, tc("gcc").key(), 20 * MS).unwrap();
    let short = costs_to(&mut slow);
    assert_eq!(short.iter().map(|t| t.1).collect::<Vec<_>>(), [20 * MS]);
    // The slow agent's token comes back: the long unit still waits.
    slow.complete(short[0].0, true).unwrap();
    assert!(costs_to(&mut slow).is_empty());
    assert_eq!(s.routes()[0].queued, 1);
    // The fast agent turns out slow (a tenth): the long unit is now better
    // off on the agent that was slow, and goes there.
    fast.set_speed(100);
    let long = costs_to(&mut slow);
    assert_eq!(long.iter().map(|t| t.1).collect::<Vec<_>>(), [4000 * MS]);
    fast.complete(first[0].0, true).unwrap();
    slow.complete(long[0].0, true).unwrap();
    assert_eq!(s.routes()[0].queued, 0);
    assert_eq!(answers_costed(&mut cd), 3);
    assert!(s.agents().iter().all(|a| a.tokens_in_use == 0));
}

fn answers_costed(c: &mut ConsumerdSession<CostedJob>) -> usize {
    std::iter::from_fn(|| c.poll_answer()).count()
}

/// Every dispatch waiting for an agent, in order.
fn dispatches<J: Job + std::fmt::Debug>(a: &mut AgentSession<J>) -> Vec<String> {
    std::iter::from_fn(|| a.poll())
        .map(|d| match d {
            Dispatch::Assign(t) => format!("assign {}", t.id().0),
            Dispatch::Cancel(t) => format!("cancel {}", t.0),
            other => format!("{other:?}"),
        })
        .collect()
}

fn tokens_in_use<J: Job>(s: &Scheduler<J>) -> Vec<u32> {
    s.agents().iter().map(|a| a.tokens_in_use).collect()
}

/// A task running on `a`, and an idle agent `b` beside it.
fn hedge_pair() -> Pair<TestJob> {
    hedge_pair_of()
}

/// A scheduler, two agents, a consumerd and its task.
type Pair<J> = (Scheduler<J>, AgentSession<J>, AgentSession<J>, ConsumerdSession<J>, TaskId);

/// [`hedge_pair`] for any job.
fn hedge_pair_of<J: Job<Task = u64>>() -> Pair<J> {
    let s = Scheduler::new(Config::default());
    let mut a = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    let t = assigned(&mut a)[0];
    let b = s.connect_agent(peer(2), &[tc("gcc")], 1);
    (s, a, b, cd, t)
}

#[test]
fn a_copy_answered_first_answers_the_task_and_the_original_is_cancelled() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0), "an idle agent and nothing waiting: a copy starts");
    assert!(!a.hedge(t, 0), "one copy at most");
    assert_eq!(dispatches(&mut b), vec![format!("assign {}", t.0)]);
    assert_eq!(tokens_in_use(&s), vec![1, 1]);
    b.complete(t, true).unwrap();
    assert_eq!(dispatches(&mut a), vec![format!("cancel {}", t.0)], "the original's compiler is stopped");
    a.complete(t, false).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(true), "the copy's answer");
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
    let (sa, sb) = (&s.agents()[0], &s.agents()[1]);
    assert_eq!((sa.hedged, sa.stale, sb.copies_won, sb.completed), (1, 1, 1, 1));
}

#[test]
fn a_copy_goes_only_to_an_agent_as_fast_as_asked_and_the_fastest_first() {
    let (s, a, mut b, _cd, t) = hedge_pair();
    b.set_speed(400);
    assert!(!a.hedge(t, 1250), "the only idle agent is slower than asked: no copy");
    assert!(dispatches(&mut b).is_empty());
    assert_eq!(tokens_in_use(&s), vec![1, 0], "the token looked at was given back");
    let mut c = s.connect_agent(peer(4), &[tc("gcc")], 1);
    c.set_speed(1500);
    assert!(a.hedge(t, 1250), "a fast enough agent came");
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)]);
    assert!(dispatches(&mut b).is_empty(), "not the slow one");
}

#[test]
fn the_original_answered_first_cancels_the_copy() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    a.complete(t, true).unwrap();
    assert_eq!(dispatches(&mut b), vec![format!("cancel {}", t.0)]);
    b.complete(t, false).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
    assert_eq!(s.agents()[1].stale, 1);
}

#[test]
fn a_copy_not_yet_sent_when_the_task_ends_is_never_sent_and_frees_its_token() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    a.complete(t, true).unwrap();
    assert!(dispatches(&mut b).is_empty(), "neither the copy nor a cancel for it");
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
    assert_eq!(answers(&mut cd).len(), 1);
}

#[test]
fn hedging_never_takes_a_token_a_waiting_task_could_use() {
    let (s, a, mut b, mut cd, t) = hedge_pair();
    // The idle agent's token goes to the next task, not to a copy.
    cd.submit(2, tc("gcc").key(), 2).unwrap();
    let second = assigned(&mut b);
    assert_eq!(second.len(), 1);
    cd.submit(3, tc("gcc").key(), 3).unwrap();
    assert!(!a.hedge(t, 0), "no free token");
    b.complete(second[0], true).unwrap();
    let third = assigned(&mut b);
    assert_eq!(third.len(), 1, "the freed token went to the waiting task");
    assert!(!a.hedge(t, 0), "no free token while it runs");
    b.complete(third[0], true).unwrap();
    assert!(a.hedge(t, 0), "now nothing waits and a token is free");
    assert_eq!(dispatches(&mut b).len(), 1);
    let _ = s;
}

#[test]
fn a_consumerd_cancel_stops_both_copies() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    assert!(cd.cancel(1));
    assert_eq!(dispatches(&mut a), vec![format!("cancel {}", t.0)]);
    assert_eq!(dispatches(&mut b), vec![format!("cancel {}", t.0)]);
    a.complete(t, false).unwrap();
    b.complete(t, false).unwrap();
    assert!(answers(&mut cd).is_empty());
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
}

#[test]
fn losing_the_copys_agent_leaves_the_original_running_and_a_new_copy_possible() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    drop(b);
    assert!(dispatches(&mut a).is_empty(), "the original is not disturbed");
    assert_eq!(s.agents()[0].lost, 0);
    let mut c = s.connect_agent(peer(4), &[tc("gcc")], 1);
    assert!(a.hedge(t, 0), "the copy is gone: another may start");
    assert_eq!(dispatches(&mut c).len(), 1);
    a.complete(t, true).unwrap();
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)]);
    c.complete(t, false).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
}

#[test]
fn losing_the_original_agent_hands_the_task_to_its_copy() {
    let (s, a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    drop(a);
    assert!(dispatches(&mut b).is_empty(), "the copy carries on: no cancel, no second assignment");
    b.complete(t, true).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].reply, Reply::Done(true));
    assert_eq!(tokens_in_use(&s), vec![0]);
}

#[test]
fn losing_the_original_agent_before_the_copy_is_sent_hands_it_over_too() {
    let (s, a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    drop(a);
    assert_eq!(dispatches(&mut b), vec![format!("assign {}", t.0)]);
    b.complete(t, true).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
    assert_eq!(tokens_in_use(&s), vec![0]);
}

#[test]
fn losing_both_agents_places_the_task_again_once() {
    let (s, a, mut b, mut cd, t) = hedge_pair();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    let mut c = s.connect_agent(peer(4), &[tc("gcc")], 2);
    drop(a);
    drop(b);
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "placed again, once");
    c.complete(t, true).unwrap();
    assert_eq!(answers(&mut cd).len(), 1);
    assert_eq!(tokens_in_use(&s), vec![0]);
}

/// Agent `a` was lost running task `t`, which now runs again on `b`; `a`
/// is back (a new session, `back`) with one token reserved for the run of
/// `t` it still holds.
fn cut_off_and_back() -> Pair<TestJob> {
    cut_off_and_back_of()
}

/// [`cut_off_and_back`] for any job.
fn cut_off_and_back_of<J: Job<Task = u64> + std::fmt::Debug>() -> Pair<J> {
    let s = Scheduler::new(Config::default());
    let mut a = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    let t = assigned(&mut a)[0];
    let mut b = s.connect_agent(peer(2), &[tc("gcc")], 1);
    drop(a);
    assert_eq!(dispatches(&mut b), vec![format!("assign {}", t.0)], "placed again on b");
    let back = s.connect_agent_resuming(peer(1), &[tc("gcc")], 1, 1);
    (s, b, back, cd, t)
}

#[test]
fn a_run_held_by_an_agent_back_from_a_cut_is_adopted_as_the_copy_and_answers_first() {
    let (s, mut b, mut back, mut cd, t) = cut_off_and_back();
    assert_eq!(cd.copy_held(1, back.id(), 9), Some(true));
    assert_eq!(back.reserved(), 0, "the reserved token went to the copy");
    let Some(Dispatch::Adopt { task, handle }) = back.poll() else { panic!("no adoption") };
    assert_eq!((task.id(), handle), (t, 9));
    drop(task);
    back.complete(t, true).unwrap();
    assert_eq!(dispatches(&mut b), vec![format!("cancel {}", t.0)], "the run begun again is stopped");
    b.complete(t, false).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(true), "the held run's answer");
    assert!(tokens_in_use(&s).iter().all(|&n| n == 0), "{:?}", tokens_in_use(&s));
}

#[test]
fn a_held_run_is_not_copied_where_it_cannot_be_and_keeps_its_reservation() {
    let (s, _b, back, cd, _) = cut_off_and_back();
    assert_eq!(cd.copy_held(2, back.id(), 9), None, "no such task in flight");
    let bare = s.connect_agent(peer(4), &[tc("gcc")], 1);
    assert_eq!(cd.copy_held(1, bare.id(), 9), None, "an agent with nothing reserved");
    assert_eq!(back.reserved(), 1);
    assert_eq!(cd.copy_held(1, back.id(), 9), Some(true));
    assert_eq!(cd.copy_held(1, back.id(), 9), None, "its own copy already");
}

#[test]
fn a_held_run_takes_the_place_of_a_stragglers_copy_begun_after_it() {
    let (s, b, mut back, mut cd, t) = cut_off_and_back();
    let mut c = s.connect_agent(peer(4), &[tc("gcc")], 1);
    assert!(b.hedge(t, 0), "the run begun again is copied as a straggler");
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)]);
    assert_eq!(cd.copy_held(1, back.id(), 9), Some(true));
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)], "the straggler's copy is stopped");
    c.complete(t, false).unwrap();
    let Some(Dispatch::Adopt { task, handle: 9 }) = back.poll() else { panic!("no adoption") };
    drop(task);
    back.complete(t, true).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(true));
    assert_eq!(s.agents().iter().find(|a| a.id == c.id()).unwrap().stale, 1, "the straggler's answer was stale");
    drop(b);
}

#[test]
fn a_held_run_whose_task_was_answered_before_the_adoption_is_dropped_and_frees_its_token() {
    let (s, mut b, mut back, mut cd, t) = cut_off_and_back();
    assert_eq!(cd.copy_held(1, back.id(), 9), Some(true));
    b.complete(t, true).unwrap();
    assert!(matches!(back.poll(), Some(Dispatch::Abandon(9))), "the agent drops what it holds");
    assert!(back.poll().is_none(), "and is sent nothing else");
    assert_eq!(answers(&mut cd).len(), 1);
    assert!(tokens_in_use(&s).iter().all(|&n| n == 0), "{:?}", tokens_in_use(&s));
}

#[test]
fn a_held_run_of_a_task_waiting_for_a_token_is_not_copied() {
    let s = sched();
    let mut a = s.connect_agent(peer(1), &[tc("gcc")], 1);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(1, tc("gcc").key(), 1).unwrap();
    assert_eq!(assigned(&mut a).len(), 1);
    drop(a);
    // No agent to run it: it waits.
    let back = s.connect_agent_resuming(peer(1), &[tc("gcc")], 1, 1);
    assert_eq!(cd.copy_held(1, back.id(), 9), None);
    assert_eq!(back.reserved(), 1);
}

#[test]
fn a_copy_that_could_not_run_leaves_the_task_to_its_own_run() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair_of::<FallibleJob>();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    b.complete(t, None).unwrap();
    assert!(answers(&mut cd).is_empty(), "an internal error of the copy does not answer the task");
    assert!(dispatches(&mut a).is_empty(), "the task's own run is not stopped");
    assert_eq!(tokens_in_use(&s), vec![1, 0], "the copy's token is back");
    assert!(a.hedge(t, 0), "and another copy may start");
    assert_eq!(dispatches(&mut b).len(), 1);
    a.complete(t, Some(true)).unwrap();
    assert_eq!(dispatches(&mut b), vec![format!("cancel {}", t.0)]);
    b.complete(t, Some(false)).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(Some(true)), "the task's own run answered");
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
    assert_eq!(s.agents()[1].stale, 2, "both of the copy's answers were dropped");
}

#[test]
fn a_held_run_that_ended_in_an_internal_error_does_not_answer_over_the_run_begun_again() {
    let (s, mut b, mut back, mut cd, t) = cut_off_and_back_of::<FallibleJob>();
    assert_eq!(cd.copy_held(1, back.id(), 9), Some(true));
    let Some(Dispatch::Adopt { task, handle: 9 }) = back.poll() else { panic!("no adoption") };
    drop(task);
    back.complete(t, None).unwrap();
    assert!(answers(&mut cd).is_empty());
    assert!(dispatches(&mut b).is_empty(), "the run begun again goes on");
    b.complete(t, Some(true)).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(Some(true)));
    assert!(tokens_in_use(&s).iter().all(|&n| n == 0), "{:?}", tokens_in_use(&s));
}

#[test]
fn an_internal_error_of_the_tasks_own_run_still_answers_it() {
    let (s, mut a, mut b, mut cd, t) = hedge_pair_of::<FallibleJob>();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    a.complete(t, None).unwrap();
    assert_eq!(dispatches(&mut b), vec![format!("cancel {}", t.0)]);
    b.complete(t, Some(true)).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(None), "the consumerd is told to compile it");
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
}

#[test]
fn a_copy_handed_the_task_answers_it_even_with_an_internal_error() {
    let (s, a, mut b, mut cd, t) = hedge_pair_of::<FallibleJob>();
    assert!(a.hedge(t, 0));
    assert_eq!(dispatches(&mut b).len(), 1);
    drop(a);
    b.complete(t, None).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "the only run left answers: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(None));
    assert_eq!(tokens_in_use(&s), vec![0]);
}

/// [`cut_off_and_back`], with a straggler's copy sent to a third agent `c`
/// (two tokens) and then replaced by the held run: `c` is told to cancel it
/// (not yet polled) and has not answered.
fn a_cancelled_copy_on_c(
) -> (S, AgentSession<TestJob>, AgentSession<TestJob>, ConsumerdSession<TestJob>, AgentSession<TestJob>, TaskId) {
    a_cancelled_copy_on_c_of()
}

/// [`a_cancelled_copy_on_c`] for any job.
#[allow(clippy::type_complexity)]
fn a_cancelled_copy_on_c_of<J: Job<Task = u64> + std::fmt::Debug>(
) -> (Scheduler<J>, AgentSession<J>, AgentSession<J>, ConsumerdSession<J>, AgentSession<J>, TaskId) {
    let (s, b, back, cd, t) = cut_off_and_back_of::<J>();
    let mut c = s.connect_agent(peer(4), &[tc("gcc")], 2);
    assert!(b.hedge(t, 0), "a straggler's copy on c");
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)]);
    assert_eq!(cd.copy_held(1, back.id(), 9), Some(true), "the held run takes the copy's place");
    (s, b, back, cd, c, t)
}

/// [`a_cancelled_copy_on_c`], then the task's two runs lost: placed again
/// on a new agent `d`, copied to `c` (whose older run still holds a token),
/// and `d` lost before `c` is sent the copy, so the task is handed to it.
fn handed_to_c_before_it_is_sent() -> (S, ConsumerdSession<TestJob>, AgentSession<TestJob>, TaskId) {
    let (s, b, back, cd, mut c, t) = a_cancelled_copy_on_c();
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)], "c's copy is stopped; it has not answered yet");
    let mut d = s.connect_agent(peer(5), &[tc("gcc")], 1);
    drop(back);
    drop(b);
    assert_eq!(dispatches(&mut d), vec![format!("assign {}", t.0)], "placed again, on the least loaded agent");
    assert!(d.hedge(t, 0), "copied to c");
    drop(d);
    (s, cd, c, t)
}

/// A token taken from a leaving agent's pool and never given back (a leak,
/// like the one the test above pins) ends the agent's session after
/// `Config::token_wait` instead of holding its thread for good.
#[test]
fn a_leaving_agent_whose_token_leaked_is_let_go_after_its_wait() {
    let s: S = Scheduler::new(Config { token_wait: std::time::Duration::from_millis(50), ..Config::default() });
    let a = s.connect_agent(peer(1), &[tc("gcc")], 2);
    let entry = s.core.agents.get(&a.id()).expect("the agent is connected");
    assert!(entry.tokens.try_acquire(), "a token taken and never given back");
    let (done, ended) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(a);
        let _ = done.send(());
    });
    // A bound for a hang, not a timing: the wait is 50 ms.
    ended
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the session's drop still waits for the leaked token after 60 s");
    assert!(s.agents().is_empty(), "the agent is gone from the scheduler");
    assert_eq!(s.leaked_tokens(), 1, "the leak is counted");
}

/// `agent` answers `t` with `answer`, which is the consumerd's one answer;
/// no token is left held.
fn answers_once<J: Job>(
    s: &Scheduler<J>,
    agent: &mut AgentSession<J>,
    cd: &mut ConsumerdSession<J>,
    t: TaskId,
    answer: J::Answer,
) where
    J::Answer: Clone + PartialEq + std::fmt::Debug,
{
    agent.complete(t, answer.clone()).unwrap();
    let got = answers(cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(answer));
    assert!(tokens_in_use(s).iter().all(|&n| n == 0), "a token is held: {:?}", tokens_in_use(s));
}

/// The task placed again on `c` while `c` still runs the copy it was told
/// to cancel: an agent names a run by its task's id alone, so the new run
/// goes to `c` only once the cancelled copy has answered — sent at once,
/// the copy's answer to its cancel (which can overtake a large task on the
/// wire) would be taken for the new run's, and the task sent back.
#[test]
fn a_task_placed_again_on_an_agent_still_running_its_cancelled_copy_is_sent_once_that_copy_answered() {
    let (s, b, back, mut cd, mut c, t) = a_cancelled_copy_on_c();
    // Both runs left are lost before c answers its cancelled copy: the
    // task is placed again, on c.
    drop(back);
    drop(b);
    assert_eq!(
        dispatches(&mut c),
        vec![format!("cancel {}", t.0)],
        "the new run is held until the cancelled copy answers"
    );
    assert_eq!(tokens_in_use(&s), vec![2], "the cancelled copy's token, and the new run's");
    c.complete(t, false).unwrap();
    assert!(answers(&mut cd).is_empty(), "the cancelled copy's answer is not the new run's");
    assert_eq!(tokens_in_use(&s), vec![1]);
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "the new run goes once the copy answered");
    answers_once(&s, &mut c, &mut cd, t, true);
}

/// The cancel for `c`'s replaced copy pushed late — after the task, its
/// other runs lost, was placed on `c` again at the next attempt (the two
/// pushes race on a scheduler with more than one thread): it names the
/// copy's attempt, and stops nothing.
#[test]
fn a_late_cancel_for_a_copy_of_an_earlier_attempt_does_not_stop_the_run_placed_after_it() {
    let (s, b, back, mut cd, mut c, t) = a_cancelled_copy_on_c();
    let copy_attempt = 1;
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)]);
    c.complete(t, false).unwrap();
    drop(back);
    drop(b);
    s.core.cancel_on(c.id().0, t, copy_attempt);
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "the late cancel is not for this run");
    answers_once(&s, &mut c, &mut cd, t, true);
}

/// A copy sent to `c` while `c` still runs its cancelled copy of the same
/// attempt (replaced by a held run, which was then lost): the new copy is
/// held until the cancelled one answers, that answer ("could not finish")
/// is not taken for the new copy's, and the new copy runs.
#[test]
fn a_copy_sent_where_a_cancelled_copy_of_the_same_attempt_still_runs_is_run_after_it() {
    let (s, mut b, back, mut cd, mut c, t) = a_cancelled_copy_on_c_of::<FallibleJob>();
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)]);
    drop(back);
    assert!(b.hedge(t, 0), "copied again, to c's second token");
    assert!(dispatches(&mut c).is_empty(), "the copy waits for the cancelled one's answer");
    c.complete(t, None).unwrap();
    assert!(answers(&mut cd).is_empty());
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "the new copy runs");
    c.complete(t, Some(true)).unwrap();
    assert_eq!(dispatches(&mut b), vec![format!("cancel {}", t.0)], "the copy won");
    b.complete(t, None).unwrap();
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::Done(Some(true)), "the new copy's answer");
    assert_eq!(tokens_in_use(&s), vec![0, 0]);
}

/// As above, with the task's own agent lost while the new copy waits: the
/// task is handed to that copy, and the cancelled one's "could not finish"
/// neither ends the task nor keeps the copy from running.
#[test]
fn a_copy_waiting_behind_a_cancelled_one_and_handed_the_task_runs_it() {
    let (s, b, back, mut cd, mut c, t) = a_cancelled_copy_on_c_of::<FallibleJob>();
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)]);
    drop(back);
    assert!(b.hedge(t, 0), "copied again, to c's second token");
    drop(b);
    assert!(dispatches(&mut c).is_empty(), "the copy, now the task's run, waits for the cancelled one's answer");
    c.complete(t, None).unwrap();
    assert!(answers(&mut cd).is_empty(), "the cancelled copy's answer does not end the task");
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "the task's run goes");
    answers_once(&s, &mut c, &mut cd, t, Some(true));
}

/// A copy started on `c` between a held run's clearing of `c`'s older copy
/// and its late cancel for it (`copy_held` racing `hedge`): the new copy is
/// dropped (the attempt runs there), the cancel stops the run, and its
/// "could not finish" clears the copy word — so that losing the task's
/// agent next places the task again instead of handing it to a copy that
/// runs nowhere.
#[test]
fn a_stopped_copy_with_no_copy_waiting_clears_its_copy_word() {
    let (s, b, back, mut cd, t) = cut_off_and_back_of::<FallibleJob>();
    let mut c = s.connect_agent(peer(4), &[tc("gcc")], 2);
    assert!(b.hedge(t, 0), "a straggler's copy on c");
    let Some(Dispatch::Assign(task)) = c.poll() else { panic!("the copy was not sent") };
    let copy_attempt = 1;
    // `copy_held`'s first half: c's copy cleared, its cancel not yet pushed.
    assert!(task.clear_hedge(c.id().0, copy_attempt));
    drop(task);
    assert!(b.hedge(t, 0), "copied again, to c");
    s.core.cancel_on(c.id().0, t, copy_attempt);
    drop(back);
    assert_eq!(dispatches(&mut c), vec![format!("cancel {}", t.0)], "the new copy dropped, the run stopped");
    c.complete(t, None).unwrap();
    drop(b);
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "placed again, not handed to no run");
    answers_once(&s, &mut c, &mut cd, t, Some(true));
}

#[test]
fn a_copy_sent_to_an_agent_still_running_an_older_cancelled_run_of_its_task_is_run_once_that_run_answered() {
    let (s, mut cd, mut c, t) = handed_to_c_before_it_is_sent();
    assert!(dispatches(&mut c).is_empty(), "the copy, now the task's only run, waits for the older run's answer");
    c.complete(t, false).unwrap();
    assert!(answers(&mut cd).is_empty(), "the older run's answer is not the task's");
    assert_eq!(dispatches(&mut c), vec![format!("assign {}", t.0)], "then it is sent");
    answers_once(&s, &mut c, &mut cd, t, true);
}

#[test]
fn an_agent_lost_before_it_is_sent_a_copy_handed_to_it_does_not_forget_the_task() {
    let (s, mut cd, c, _) = handed_to_c_before_it_is_sent();
    // c is lost too, before it was sent the copy it was handed: the task is
    // not forgotten — its third placement lost, it goes back to be compiled
    // locally.
    drop(c);
    let got = answers(&mut cd);
    assert_eq!(got.len(), 1, "one answer: {got:?}");
    assert_eq!(got[0].reply, Reply::RunLocally(RetryReason::AttemptsExhausted));
    assert!(s.agents().is_empty());
}

#[test]
fn a_long_unit_with_no_room_to_wait_for_a_fast_agent_runs_on_a_slow_one() {
    let s = Scheduler::<CostedJob>::new(Config { speed_aware: true, max_queued_per_route: 2, ..Config::default() });
    let mut slow = s.connect_agent(peer(1), &[tc("gcc")], 4);
    let mut fast = s.connect_agent(peer(2), &[tc("gcc")], 1);
    slow.set_speed(250);
    fast.set_speed(1000);
    let mut cd = s.connect_consumerd(peer(3), &[tc("gcc")]);
    cd.submit(0, tc("gcc").key(), 100 * MS).unwrap();
    assert_eq!(costs_to(&mut fast).len(), 1);
    // Two 8 s units wait for the fast agent, though the slow one has tokens.
    cd.submit(1, tc("gcc").key(), 8000 * MS).unwrap();
    cd.submit(2, tc("gcc").key(), 8000 * MS).unwrap();
    assert!(costs_to(&mut slow).is_empty());
    assert_eq!(s.routes()[0].queued, 2);
    // The route's queue is full: the next one runs on the slow agent rather
    // than go back to be compiled locally.
    cd.submit(3, tc("gcc").key(), 8000 * MS).unwrap();
    assert_eq!(costs_to(&mut slow).iter().map(|t| t.1).collect::<Vec<_>>(), [8000 * MS]);
    assert!(answers(&mut cd).is_empty(), "refused while a token was free");
    assert_eq!(s.routes()[0].queued, 2);
}
