//! Submit → assign → complete → answer cycles through the scheduler core,
//! against a straightforward `Mutex<HashMap>` + channels reference (what
//! kubecc's design amounts to: mutex-guarded maps of routes, tasks and
//! tokens, and a channel per agent and per consumerd).
//!
//! `cargo bench --bench dispatch` runs the criterion groups, then a paired
//! comparison (the two implementations alternately, same process, same
//! workload) and prints cycles per second and the ratio. Under `cargo test`
//! it runs each workload once, small, as a smoke test.
//!
//! Each thread owns one consumerd session and a share of the agent sessions;
//! a task submitted by one thread may run on an agent another thread owns,
//! so the threads really share routes, tokens and outboxes.

#![allow(clippy::unwrap_used, clippy::needless_range_loop)]

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use ccroute_core::{AgentSession, AnswerKind, Config, Dispatch, Job, PeerInfo, Scheduler};
use ccroute_wire::{Lang, Toolchain, ToolchainKind};
use criterion::{BenchmarkId, Criterion, Throughput};

struct BenchJob;

impl Job for BenchJob {
    type Task = u64;
    type Answer = u64;
    fn classify(_: &u64) -> AnswerKind {
        AnswerKind::Success
    }
}

#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    agents: usize,
    toolchains: usize,
    /// Tokens per agent.
    tokens: u32,
    /// Tasks each thread keeps in flight.
    batch: u64,
}

const SHAPES: [Shape; 3] = [
    Shape { name: "8 agents x 16 toolchains", agents: 8, toolchains: 16, tokens: 16, batch: 64 },
    Shape { name: "1000 agents", agents: 1000, toolchains: 16, tokens: 16, batch: 64 },
    // A farm that is full, as during most of a large build: more tasks in
    // flight than tokens, so tasks wait and every token given back serves one.
    Shape { name: "1000 agents, full", agents: 1000, toolchains: 1, tokens: 1, batch: 1500 },
];

fn toolchain(i: usize) -> Toolchain {
    Toolchain {
        kind: ToolchainKind::Gnu,
        lang: Lang::C,
        compiler: format!("gcc-{i}"),
        target: "x86_64-linux-gnu".into(),
        version: "12".into(),
        pic_default: true,
        pie_default: true,
        binary_hash: [0; 32],
    }
}

fn peer(n: usize) -> PeerInfo {
    PeerInfo { node_id: n as u128, host_name: String::new() }
}

/// Runs `total` cycles through ccroute's core on `threads` threads.
fn run_ccroute(shape: Shape, threads: usize, total: u64) -> Duration {
    let sched: Scheduler<BenchJob> = Scheduler::new(Config::default());
    let tcs: Vec<Toolchain> = (0..shape.toolchains).map(toolchain).collect();
    let keys: Vec<_> = tcs.iter().map(Toolchain::key).collect();
    let mut agents: Vec<Vec<AgentSession<BenchJob>>> = (0..threads).map(|_| Vec::new()).collect();
    for i in 0..shape.agents {
        agents[i % threads].push(sched.connect_agent(peer(i), &tcs, shape.tokens));
    }
    let per_thread = total / threads as u64;
    let done = AtomicU64::new(0);
    let all_done = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    // The last worker to finish says when; the main thread blocks meanwhile
    // (spinning, it would take a core from the workers on a 2-core machine).
    let (finished_tx, finished) = mpsc::channel::<Instant>();
    let elapsed = std::thread::scope(|scope| {
        for mine in agents.iter_mut() {
            let finished_tx = finished_tx.clone();
            let (sched, tcs, keys, done, all_done, start) = (&sched, &tcs, &keys, &done, &all_done, &start);
            scope.spawn(move || {
                let mut cd = sched.connect_consumerd(peer(1_000_000), tcs);
                start.wait();
                let (mut sent, mut answered) = (0u64, 0u64);
                loop {
                    while sent < per_thread && sent - answered < shape.batch {
                        let _ = cd.submit(sent, keys[(sent as usize) % keys.len()], sent);
                        sent += 1;
                    }
                    for agent in mine.iter_mut() {
                        while let Some(d) = agent.poll() {
                            if let Dispatch::Assign(task) = d {
                                let (id, body) = (task.id(), *task.body());
                                drop(task);
                                let _ = agent.complete(id, body);
                            }
                        }
                    }
                    while cd.poll_answer().is_some() {
                        answered += 1;
                    }
                    if answered == per_thread {
                        if done.fetch_add(1, Ordering::AcqRel) + 1 == threads as u64 {
                            all_done.store(true, Ordering::Release);
                            let _ = finished_tx.send(Instant::now());
                        }
                        // Keep serving this thread's agents until everyone is done.
                        while !all_done.load(Ordering::Acquire) {
                            for agent in mine.iter_mut() {
                                while let Some(d) = agent.poll() {
                                    if let Dispatch::Assign(task) = d {
                                        let id = task.id();
                                        drop(task);
                                        let _ = agent.complete(id, 0);
                                    }
                                }
                            }
                            std::hint::spin_loop();
                        }
                        return;
                    }
                }
            });
        }
        start.wait();
        let t0 = Instant::now();
        finished.recv().map_or_else(|_| t0.elapsed(), |end| end - t0)
    });
    assert_eq!(sched.totals().completed, per_thread * threads as u64, "every cycle answered once");
    elapsed
}

/// The reference: every structure behind a mutex, every hand-off a channel.
struct Reference {
    routes: Mutex<HashMap<usize, Vec<usize>>>,
    tokens: Vec<Mutex<(u32, u32)>>,
    to_agent: Vec<Mutex<mpsc::Sender<u64>>>,
    tasks: Mutex<HashMap<u64, (usize, usize)>>,
    waiting: Mutex<HashMap<usize, VecDeque<u64>>>,
    to_consumerd: Vec<Mutex<mpsc::Sender<u64>>>,
}

impl Reference {
    fn submit(&self, id: u64, tc: usize, consumerd: usize) {
        let agents = self.routes.lock().unwrap().get(&tc).cloned().unwrap_or_default();
        let mut best: Option<(usize, u32, u32)> = None;
        for &a in &agents {
            let t = self.tokens[a].lock().unwrap();
            if t.0 < t.1 && best.is_none_or(|(_, u, l)| u64::from(t.0) * u64::from(l) < u64::from(u) * u64::from(t.1)) {
                best = Some((a, t.0, t.1));
            }
        }
        self.tasks.lock().unwrap().insert(id, (consumerd, tc));
        match best {
            Some((a, _, _)) => {
                self.tokens[a].lock().unwrap().0 += 1;
                let _ = self.to_agent[a].lock().unwrap().send(id);
            }
            None => self.waiting.lock().unwrap().entry(tc).or_default().push_back(id),
        }
    }

    fn complete(&self, agent: usize, id: u64, tcs_of_agent: &[usize]) {
        let (consumerd, _) = self.tasks.lock().unwrap().remove(&id).unwrap_or((0, 0));
        let _ = self.to_consumerd[consumerd].lock().unwrap().send(id);
        let mut waiting = self.waiting.lock().unwrap();
        for tc in tcs_of_agent {
            if let Some(next) = waiting.get_mut(tc).and_then(VecDeque::pop_front) {
                let _ = self.to_agent[agent].lock().unwrap().send(next);
                return;
            }
        }
        drop(waiting);
        self.tokens[agent].lock().unwrap().0 -= 1;
    }
}

fn run_reference(shape: Shape, threads: usize, total: u64) -> Duration {
    let mut agent_rx = vec![];
    let mut to_agent = vec![];
    for _ in 0..shape.agents {
        let (tx, rx) = mpsc::channel();
        to_agent.push(Mutex::new(tx));
        agent_rx.push(Some(rx));
    }
    let mut cd_rx = vec![];
    let mut to_consumerd = vec![];
    for _ in 0..threads {
        let (tx, rx) = mpsc::channel();
        to_consumerd.push(Mutex::new(tx));
        cd_rx.push(Some(rx));
    }
    let all: Vec<usize> = (0..shape.agents).collect();
    let r = Reference {
        routes: Mutex::new((0..shape.toolchains).map(|tc| (tc, all.clone())).collect()),
        tokens: (0..shape.agents).map(|_| Mutex::new((0, shape.tokens))).collect(),
        to_agent,
        tasks: Mutex::new(HashMap::new()),
        waiting: Mutex::new(HashMap::new()),
        to_consumerd,
    };
    let every_tc: Vec<usize> = (0..shape.toolchains).collect();
    let per_thread = total / threads as u64;
    let done = AtomicU64::new(0);
    let all_done = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    let (finished_tx, finished) = mpsc::channel::<Instant>();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let finished_tx = finished_tx.clone();
            let mine: Vec<(usize, mpsc::Receiver<u64>)> = (0..shape.agents)
                .filter(|a| a % threads == t)
                .filter_map(|a| agent_rx[a].take().map(|rx| (a, rx)))
                .collect();
            let answers = cd_rx[t].take();
            let (r, every_tc, done, all_done, start) = (&r, &every_tc, &done, &all_done, &start);
            scope.spawn(move || {
                let Some(answers) = answers else { return };
                start.wait();
                let (mut sent, mut answered) = (0u64, 0u64);
                let id_base = (t as u64) << 40;
                loop {
                    while sent < per_thread && sent - answered < shape.batch {
                        r.submit(id_base | sent, (sent as usize) % every_tc.len(), t);
                        sent += 1;
                    }
                    for (a, rx) in &mine {
                        while let Ok(id) = rx.try_recv() {
                            r.complete(*a, id, every_tc);
                        }
                    }
                    while answers.try_recv().is_ok() {
                        answered += 1;
                    }
                    if answered == per_thread {
                        if done.fetch_add(1, Ordering::AcqRel) + 1 == threads as u64 {
                            all_done.store(true, Ordering::Release);
                            let _ = finished_tx.send(Instant::now());
                        }
                        while !all_done.load(Ordering::Acquire) {
                            for (a, rx) in &mine {
                                while let Ok(id) = rx.try_recv() {
                                    r.complete(*a, id, every_tc);
                                }
                            }
                            std::hint::spin_loop();
                        }
                        return;
                    }
                }
            });
        }
        start.wait();
        let t0 = Instant::now();
        finished.recv().map_or_else(|_| t0.elapsed(), |end| end - t0)
    })
}

fn criterion_groups(c: &mut Criterion) {
    for shape in SHAPES {
        let mut group = c.benchmark_group(format!("dispatch/{}", shape.name));
        group.throughput(Throughput::Elements(1));
        group.sample_size(10);
        group.measurement_time(Duration::from_secs(3));
        for threads in [1, 2] {
            group.bench_with_input(BenchmarkId::new("ccroute", threads), &threads, |b, &threads| {
                b.iter_custom(|iters| run_ccroute(shape, threads, iters.max(threads as u64)))
            });
            group.bench_with_input(BenchmarkId::new("mutex-reference", threads), &threads, |b, &threads| {
                b.iter_custom(|iters| run_reference(shape, threads, iters.max(threads as u64)))
            });
        }
        group.finish();
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Both implementations alternately, same workload: the ratio holds on a
/// noisy machine where absolute times do not.
fn paired(total: u64, rounds: usize) {
    println!(
        "\npaired runs: {total} cycles each, medians of {rounds}, ratio = ccroute / mutex reference of the same round"
    );
    for shape in SHAPES {
        for threads in [1, 2] {
            let (mut ours, mut theirs) = (vec![], vec![]);
            for _ in 0..rounds {
                ours.push(total as f64 / run_ccroute(shape, threads, total).as_secs_f64());
                theirs.push(total as f64 / run_reference(shape, threads, total).as_secs_f64());
            }
            let ratios: Vec<f64> = ours.iter().zip(&theirs).map(|(o, t)| o / t).collect();
            let (lo, hi) = ratios.iter().fold((f64::MAX, 0.0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            let (o, t, r) = (median(ours), median(theirs), median(ratios));
            println!(
                "{:<26} {} thread{}: ccroute {:>10.0} cycles/s   mutex {:>10.0} cycles/s   ratio {:.2}x (paired runs {:.2}x-{:.2}x)",
                shape.name,
                threads,
                if threads == 1 { " " } else { "s" },
                o,
                t,
                r,
                lo,
                hi
            );
        }
    }
}

fn main() {
    // For instruction-level profiles (`valgrind --tool=callgrind`): one
    // implementation, one shape, one thread count, nothing else.
    //   DISPATCH_PROFILE=ccroute|reference,<shape 0|1|2>,<threads>,<cycles>
    if let Ok(spec) = std::env::var("DISPATCH_PROFILE") {
        let f: Vec<&str> = spec.split(',').collect();
        let shape = SHAPES[f.get(1).and_then(|s| s.parse().ok()).unwrap_or(0usize).min(SHAPES.len() - 1)];
        let threads = f.get(2).and_then(|s| s.parse().ok()).unwrap_or(1usize).max(1);
        let n = f.get(3).and_then(|s| s.parse().ok()).unwrap_or(100_000u64);
        let d = if f[0] == "reference" { run_reference(shape, threads, n) } else { run_ccroute(shape, threads, n) };
        println!("{spec}: {:.0} cycles/s", n as f64 / d.as_secs_f64());
        return;
    }
    let bench = std::env::args().any(|a| a == "--bench");
    if !bench {
        // `cargo test`: one small run of each, checked, not timed.
        for shape in SHAPES {
            for threads in [1, 2] {
                run_ccroute(shape, threads, 2000);
                run_reference(shape, threads, 2000);
            }
        }
        println!("dispatch: smoke run ok");
        return;
    }
    // DISPATCH_PAIRED=1: only the paired comparison.
    if std::env::var_os("DISPATCH_PAIRED").is_none() {
        let mut c = Criterion::default().configure_from_args();
        criterion_groups(&mut c);
        c.final_summary();
    }
    paired(400_000, 9);
}
