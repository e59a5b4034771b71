//! A session of arbitrary operations on the scheduler core — submits,
//! cancels, agent results (right, wrong and repeated), agents and consumerds
//! leaving and coming back, limits moving, toolchains changing, agents'
//! speeds changing (with speed-aware placement on or off) — then every
//! agent finishes what it holds. Checked: no panic; every task answered
//! at most once, and exactly once unless it was cancelled or its consumerd
//! left; no token held and no task waiting at the end; no token given back
//! twice (the core debug-asserts it, and fuzz builds keep debug assertions).
//! Tasks an agent holds are copied to another agent (straggler hedging)
//! at random: a copy and its original both answer, and the first answer
//! is the task's.
#![no_main]

use std::collections::BTreeSet;

use ccroute_core::{AgentSession, Config, ConsumerdSession, Dispatch, PeerInfo, Scheduler, TaskId};
use ccroute_wire::{Lang, Toolchain, ToolchainKind};
use libfuzzer_sys::fuzz_target;

/// Bodies are their expected cost in microseconds (lanes rank them in
/// cost classes when longest-first is on); answers say whether the
/// compile succeeded.
type J = ccroute_core::test_support::CostedJob;

fn tc(i: u8) -> Toolchain {
    Toolchain {
        kind: ToolchainKind::Gnu,
        lang: Lang::C,
        compiler: format!("cc{}", i % 2),
        target: "t".into(),
        version: "1".into(),
        pic_default: false,
        pie_default: false,
        binary_hash: [0; 32],
    }
}

fn peer(n: u128) -> PeerInfo {
    PeerInfo { node_id: n, host_name: String::new() }
}

struct Cd {
    session: ConsumerdSession<J>,
    open: BTreeSet<u64>,
}

struct Agent {
    session: AgentSession<J>,
    held: Vec<TaskId>,
}

fn drain(cd: &mut Cd) {
    while let Some(a) = cd.session.poll_answer() {
        // A second answer finds its task no longer open.
        assert!(cd.open.remove(&a.client_id), "answer for a task not open: {}", a.client_id);
    }
}

fn poll(agent: &mut Agent) {
    while let Some(d) = agent.session.poll() {
        if let Dispatch::Assign(t) = d {
            agent.held.push(t.id());
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte's low bit turns longest-first on, the next speed-aware placement.
    let longest_first = data.first().is_some_and(|b| b & 1 == 1);
    let speed_aware = data.first().is_some_and(|b| b & 2 == 2);
    let s: Scheduler<J> = Scheduler::new(Config {
        max_attempts: 3,
        max_queued_per_route: 8,
        longest_first,
        speed_aware,
        ..Config::default()
    });
    let both = [tc(0), tc(1)];
    let keys = [both[0].key(), both[1].key()];
    let mut cds: Vec<Cd> =
        (0..2).map(|i| Cd { session: s.connect_consumerd(peer(100 + i), &both), open: BTreeSet::new() }).collect();
    let mut agents: Vec<Agent> = (0..3)
        .map(|i| Agent { session: s.connect_agent(peer(i), &both[..(i as usize % 2) + 1], 2), held: vec![] })
        .collect();
    let mut next_id = 0u64;
    for op in data.chunks(2) {
        let (a, b) = (op[0], op.get(1).copied().unwrap_or(0));
        let ci = usize::from(b % 2);
        let ai = usize::from(b % 3);
        match a % 11 {
            0 => {
                let id = next_id;
                next_id += 1;
                // Costs from 0 to ~25 s: every cost class.
                let cost = id.wrapping_mul(97_003) % 25_000_000;
                if cds[ci].session.submit(id, keys[usize::from(b / 3 % 2)], cost).is_ok() {
                    cds[ci].open.insert(id);
                }
            }
            1 => {
                if let Some(&id) = cds[ci].open.iter().nth(usize::from(b / 2) % cds[ci].open.len().max(1)) {
                    assert!(cds[ci].session.cancel(id));
                    cds[ci].open.remove(&id);
                }
            }
            2 => poll(&mut agents[ai]),
            3 => {
                let agent = &mut agents[ai];
                if !agent.held.is_empty() {
                    let t = agent.held.swap_remove(usize::from(b) % agent.held.len());
                    agent.session.complete(t, b & 8 == 0).expect("a held task completes");
                    assert!(agent.session.complete(t, true).is_err(), "answered twice");
                }
            }
            4 => {
                let limit = u32::from(b / 3 % 4);
                agents[ai] = Agent { session: s.connect_agent(peer(u128::from(b)), &both, limit), held: vec![] };
            }
            5 => {
                let fresh = s.connect_consumerd(peer(200 + u128::from(b)), &both);
                cds[ci] = Cd { session: fresh, open: BTreeSet::new() };
            }
            6 => {
                s.set_agent_limit(agents[ai].session.id(), u32::from(b / 3));
            }
            7 => {
                let pick: Vec<Toolchain> =
                    both.iter().enumerate().filter(|(i, _)| b >> (i + 2) & 1 == 1).map(|(_, t)| t.clone()).collect();
                agents[ai].session.set_toolchains(&pick);
            }
            8 => drain(&mut cds[ci]),
            10 => {
                let agent = &agents[ai];
                if let Some(&t) = agent.held.get(usize::from(b / 3) % agent.held.len().max(1)) {
                    // A copy to any agent, or only to one of at least a speed (as speeds go, up to 10.2x).
                    let min_speed = if b & 0x80 == 0 { 0 } else { u32::from(b & 0x7f) * 80 };
                    agent.session.hedge(t, min_speed);
                }
            }
            // Speeds from 0 (clamped to the slowest) to 10.2 times the nominal.
            9 => agents[ai].session.set_speed(u32::from(b) * 40),
            _ => unreachable!(),
        }
    }
    // Every agent finishes what it holds, until nothing moves. A poll that
    // finds an ended task's assignment gives its token back, and the task
    // that token then serves may be assigned to an agent polled earlier in
    // the same pass: a pass that holds nothing proves nothing is left only
    // when the pass before it held nothing too (no completion, no cancel
    // here, so the second pass's polls find no ended task to give back).
    let mut quiet = 0;
    while quiet < 2 {
        let mut moved = false;
        for agent in agents.iter_mut() {
            poll(agent);
            while let Some(t) = agent.held.pop() {
                agent.session.complete(t, true).expect("complete");
                moved = true;
            }
        }
        quiet = if moved { 0 } else { quiet + 1 };
    }
    for cd in cds.iter_mut() {
        drain(cd);
        assert!(cd.open.is_empty(), "tasks never answered: {:?}", cd.open);
    }
    for a in s.agents() {
        assert_eq!(a.tokens_in_use, 0, "token leaked: {a:?}");
    }
    assert!(s.routes().iter().all(|r| r.queued == 0), "tasks left waiting");
});
