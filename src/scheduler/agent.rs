//! An agent's connection: tasks out, results in.
//!
//! The owner task holds the agent's session. What the core places on the
//! agent comes out of the session's outbox and goes out with the task's
//! scheduler id — small sources inline on the control stream, large ones on
//! a stream of their own — its header and payload forwarded as the
//! consumerd sent them (the source is never decompressed here). Results come
//! back on the control stream or, with a large object, on a uni stream whose
//! payload budget is reserved before it is read. When the connection ends,
//! dropping the session places everything the agent held again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ccroute_wire::{Adopt, Cancel, Frame, Hello, Message, Origin, ResumedTask, TaskHeader, UsageLimit, Welcome};
use tokio::task::JoinSet;

use super::cache_hook::CacheLookup;
use super::inbound::{spawn_readers, Inbound, Ticket};
use super::job::{AgentAnswer, NetJob};
use super::{peer_info, ServerState};
use crate::net::{self, Admission, FrameWriter, NetError, ServerHandshake};
use ccroute_core::cost::{Basis, Prediction};
use ccroute_core::{AgentSession, Dispatch, TaskId};

/// How often the agent's token limit is checked for a change to report.
const LIMIT_CHECK: Duration = Duration::from_millis(250);

/// Serves one agent until its connection ends.
pub(crate) async fn serve(state: Arc<ServerState>, conn: quinn::Connection, hello: Hello, hs: ServerHandshake) {
    let node = (hello.body.node_id, conn.stable_id());
    let arch = hello.body.system.arch.clone();
    let mut native = hello.body.toolchains.clone();
    // An agent that runs shipped toolchains serves every one a consumerd of
    // its architecture supplies, re-attached as that set changes.
    let ships = matches!(hello.body.shipping, ccroute_wire::Shipping::Ready(_));
    let mut supplied = state.shipping.subscribe();
    let generation = *supplied.borrow_and_update();
    let served = if ships { state.shipping.served_by(&arch, &native) } else { native.clone() };
    state.shipping.set_agent(node, hello.body.shipping.clone(), &arch, &native, generation);
    // What it still holds for an earlier scheduler has its tokens first.
    let resumed = hello.body.resumed.clone();
    let mut session = state.scheduler.connect_agent_resuming(
        peer_info(&hello),
        &served,
        hello.body.usage_limit,
        u32::try_from(resumed.len()).unwrap_or(u32::MAX),
    );
    let welcome = Welcome { scheduler_id: state.id, limit: session.token_limit() };
    let (writer, reader) = match hs.welcome(welcome, &ServerState::control_stream()).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "handshake failed after the hello");
            state.shipping.remove_agent(node);
            return;
        }
    };
    let body = &hello.body;
    let mut speed =
        Speed::new((body.speed_milli, body.probed_speed_milli), state.costs.speed_of(&body.host_name), &session);
    tracing::info!(
        toolchains = body.toolchains.len(),
        limit = session.token_limit(),
        speed = session.speed(),
        pinned = body.speed_milli > 0,
        probed = body.probed_speed_milli,
        "agent joined"
    );
    if !resumed.is_empty() {
        tracing::info!(tasks = resumed.len(), "the agent still holds tasks from an earlier scheduler");
        state.resumes.announce(session.id(), &resumed);
    }
    // After its announcements: a resumed task of its consumerd is held
    // until they are in the table.
    state.resumes.agent_joined(hello.body.node_id);
    // When the announced tasks no consumerd sent again are dropped.
    let unclaimed_at =
        tokio::time::sleep(if resumed.is_empty() { Duration::ZERO } else { super::resume::RESUME_WINDOW });
    tokio::pin!(unclaimed_at);
    let mut unclaimed_done = resumed.is_empty();
    let budget = state.budget.clone();
    let (mut rx, mut readers) = spawn_readers(conn.clone(), reader, move |message: Message| {
        // A result must be read even past the budget: its task is waiting
        // for it, and the agent's token comes back with it.
        let ticket = match budget.try_reserve(message.payload_len()) {
            Some(r) => Ticket::Reserved(r, CacheLookup::Unchecked),
            None => Ticket::OverBudget,
        };
        std::future::ready((message, Admission::Read(ticket)))
    });

    let mut senders = JoinSet::new();
    // Each task in flight here: when it was dispatched, for the metrics and the web view.
    let mut dispatched: HashMap<u64, Flight> = HashMap::new();
    // When the agent last answered anything: a host that answers is not stalled.
    let mut last_answer: Option<Instant> = None;
    let mut last_limit = session.token_limit();
    let mut check = tokio::time::interval(LIMIT_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Shared by the web view's record of each task it answers, not copied for each.
    let name: Arc<str> = hello.body.host_name.as_str().into();
    let outcome: super::SessionOutcome = loop {
        tokio::select! {
            event = rx.recv() => match event {
                None => break Ok(()),
                Some(Inbound::Failed(e)) => break super::failure_outcome(*e),
                // A result whose object did not arrive whole: the agent's
                // failure for that task, which its consumerd then compiles
                // itself (or another agent, were it a copy).
                Some(Inbound::Unfinished(message, why)) => {
                    if let Message::TaskResult(r) = *message {
                        state.shipping.inputs_ended(node, r.task_id);
                        last_answer = Some(Instant::now());
                        let why = format!("the agent's result came without its object: {why}");
                        let h = ccroute_wire::ResultHeader::bare(r.task_id, ccroute_wire::Outcome::InternalError(why));
                        let frame = Frame { message: Message::TaskResult(h), payload: Bytes::new() };
                        if let Err(why) = on_frame((&state, &name, &mut speed), &mut session, &mut dispatched, frame, Ticket::Plain) {
                            break Err(why);
                        }
                    }
                }
                Some(Inbound::Frame { message, payload, ticket }) => {
                    let frame = Frame { message, payload: payload.unwrap_or_default() };
                    if let Message::TaskResult(r) = &frame.message {
                        state.shipping.inputs_ended(node, r.task_id);
                        last_answer = Some(Instant::now());
                    }
                    if let Message::ToolchainUpdate(u) = &frame.message {
                        if ships {
                            let generation = *supplied.borrow_and_update();
                            native.clone_from(&u.toolchains);
                            session.set_toolchains(&state.shipping.served_by(&arch, &native));
                            state.shipping.set_agent(node, hello.body.shipping.clone(), &arch, &native, generation);
                            continue;
                        }
                    }
                    if let Err(why) = on_frame((&state, &name, &mut speed), &mut session, &mut dispatched, frame, ticket) {
                        break Err(why);
                    }
                }
            },
            dispatch = session.next() => {
                if let Dispatch::Cancel(id) = &dispatch {
                    if let Some(f) = dispatched.get(&id.0) {
                        stopped_after_a_copy(f, (&mut speed, conn.rtt()), &session, (&state.costs, &hello.body.host_name));
                    }
                }
                if send_dispatch(&conn, &writer, &mut senders, dispatch, (&state, node), &mut dispatched).await.is_err() {
                    break Ok(());
                }
            }
            () = &mut unclaimed_at, if !unclaimed_done => {
                unclaimed_done = true;
                let handles = state.resumes.unclaimed(session.id(), &resumed);
                let released = session.release_reserved(u32::try_from(handles.len()).unwrap_or(u32::MAX));
                tracing::info!(
                    held = resumed.len(),
                    dropped = handles.len(),
                    released,
                    "held tasks that no consumerd sent again or took as a copy are dropped"
                );
                let mut failed = false;
                for handle in handles {
                    if writer.send(Message::Cancel(Cancel { task_id: handle }), Bytes::new()).await.is_err() {
                        failed = true;
                        break;
                    }
                }
                if failed {
                    break Ok(());
                }
            }
            _ = check.tick() => {
                if state.hedging {
                    hedge_stragglers((&session, &state.costs), &mut dispatched, speed.given, last_answer);
                }
                let limit = session.token_limit();
                if limit != last_limit {
                    last_limit = limit;
                    if writer.send(Message::UsageLimit(UsageLimit { limit }), Bytes::new()).await.is_err() {
                        break Ok(());
                    }
                }
            }
            Ok(()) = supplied.changed(), if ships => {
                let generation = *supplied.borrow_and_update();
                session.set_toolchains(&state.shipping.served_by(&arch, &native));
                state.shipping.attached(node, generation);
            }
            stream = conn.accept_bi() => match stream {
                Ok((send, recv)) => {
                    let state = state.clone();
                    senders.spawn(async move { super::shipping::relay(&state.shipping, node, send, recv).await });
                }
                Err(_) => break Ok(()),
            },
            Some(_) = senders.join_next(), if !senders.is_empty() => {}
            e = writer.failed() => break super::failure_outcome(e),
        }
    };
    state.shipping.remove_agent(node);
    if let Some(web) = &state.web {
        web.agent_left(node.0);
    }
    // Were its connection lost, not the agent, it comes back holding them.
    state.resumes.agent_left(hello.body.node_id, session.in_flight(), Instant::now());
    super::finish(&conn, "agent", outcome, session.in_flight());
    readers.abort_all();
    senders.abort_all();
    // Dropping the session places every task the agent held again.
}

/// A task runs this long at least before a copy of it may start.
const HEDGE_FLOOR: Duration = Duration::from_secs(1);

/// A task runs this many times its expected time (at its agent's speed)
/// before a copy of it may start.
const HEDGE_FACTOR: f64 = 2.0;

/// A copy of a task whose agent still answers others goes only to an agent
/// this much faster (fourths: 5/4).
const HEDGE_FASTER: (u32, u32) = (5, 4);

/// A task still far from done may be copied to an idle agent at least this
/// many times as fast as its own.
const MOVE_FASTER: u32 = 2;

/// ... while it has run at most this share of its expected time here (and
/// at least [`HEDGE_FLOOR`]): what remains here is then 5/8 of it or more,
/// and the copy takes at most half, so it ends first with room to spare.
const MOVE_BEFORE: f64 = 3.0 / 8.0;

/// Starts copies of this agent's tasks that run past [`HEDGE_FACTOR`] times
/// what they were expected to take here, and at least [`HEDGE_FLOOR`], on
/// idle agents ([`AgentSession::hedge`]: only when no task waits for them).
/// Where the agent answered before but nothing since (stalled, or
/// slowed before its speed is learnt) any idle agent may take the copy.
/// Otherwise (it answered since the task was sent, `last_answer`, or never
/// answered at all: new, at a cold build's start) it is not stalled and the
/// unit is only longer than expected: a copy on a host no faster would end
/// after it, so only an agent [`HEDGE_FASTER`] than this one takes it, and
/// only when what was expected was the unit's own history (past a guess it
/// is only a long unit). And a long task placed here before a much faster agent
/// was free (or before the speeds were known) is copied to one
/// [`MOVE_FASTER`] times as fast while most of it remains ([`MOVE_BEFORE`],
/// or any time after [`HEDGE_FLOOR`] when its expected time was a guess):
/// on a farm of mixed hosts, long units the build started first landed on
/// slow hosts as they joined, and ran there 2.5x as long as the build's
/// bound.
/// A task not copied now is looked at again at the next check.
fn hedge_stragglers(
    (session, costs): (&AgentSession<NetJob>, &crate::cost::Costs),
    dispatched: &mut HashMap<u64, Flight>,
    speed_milli: u32,
    last_answer: Option<Instant>,
) {
    for (id, f) in dispatched.iter_mut() {
        let Some(e) = &f.expected else { continue };
        if f.hedged.is_some() {
            continue;
        }
        let ran = f.at.elapsed();
        let answered_since = last_answer.map(|t| t > f.at);
        let floors = copy_floors(e.prediction, ran, speed_milli, answered_since);
        let Some(why) =
            floors.into_iter().flatten().find_map(|(min, why)| session.hedge(TaskId(*id), min).then_some(why))
        else {
            continue;
        };
        f.hedged = Some(costs.now(e));
        tracing::info!(
            task = id,
            ran_ms = ran.as_millis() as u64,
            predicted_ms = e.prediction.micros / 1000,
            speed_milli,
            answered_since,
            "{why}"
        );
    }
}

/// The copies a task predicted `predicted` at speed 1, that has `ran` on an
/// agent of `speed_milli`, may have, in the order to try them: the least
/// speed of the agent taking the copy, and why. `answered_since`: whether
/// its agent answered anything since the task was sent (`None`: never).
fn copy_floors(
    predicted: Prediction,
    ran: Duration,
    speed_milli: u32,
    answered_since: Option<bool>,
) -> [Option<(u32, &'static str)>; 2] {
    let speed = f64::from(speed_milli.max(ccroute_core::MIN_SPEED)) / 1000.0;
    let expected = Duration::from_micros(predicted.micros).div_f64(speed);
    // A guess says nothing of what remains: a unit that ran a second on a
    // slow host may have most of its time ahead of it.
    let guessed = predicted.basis != Basis::History;
    let far_from_done = ran >= HEDGE_FLOOR && (guessed || ran <= expected.mul_f64(MOVE_BEFORE));
    let straggler = ran > expected.mul_f64(HEDGE_FACTOR).max(HEDGE_FLOOR);
    // An agent that answered before but nothing since this task was sent
    // looks stalled. One that never answered is only new: at a cold build's
    // start every agent holds the build's longest units and answers nothing
    // for seconds, and copies of them taken then on hosts no faster spent
    // the one copy each task may have (a first build on `mixed` in critical
    // order then read 2.5 of its bound).
    let stalled = answered_since == Some(false);
    let faster = speed_milli.saturating_mul(HEDGE_FASTER.0) / HEDGE_FASTER.1;
    // Run past twice a guess, on an agent not stalled: a long unit, not a
    // slow run (the rule above moves it while a much faster host can win).
    // Such copies to hosts a quarter faster never answered first on the
    // farm's cold builds, and after a scheduler restart, whose speeds rest on
    // a result or two, they copied units that had run as long as expected.
    let slow_run = stalled || !guessed;
    [
        far_from_done.then_some((
            speed_milli.saturating_mul(MOVE_FASTER),
            "long task copied to an idle agent at least twice as fast",
        )),
        (straggler && slow_run).then_some((if stalled { 0 } else { faster }, "straggler copied to an idle agent")),
    ]
}

/// A run of which a copy was made is stopped after the copy answered
/// first: the time it ran bounds this agent's speed ([`Speed::stopped`]),
/// by what its unit's history says it costs now. Only when that history
/// moved since the copy started (or began: on a cold farm it is the copy's
/// answer that begins it), which tells the copy's answer from a consumerd
/// that gave up on the unit (a stall of its own, not this agent's). On a
/// cold farm, whose size-line guesses teach a probed agent nothing, an agent
/// slowed in the middle of a build kept its probed speed, took the next unit
/// as it freed its token, and that unit was copied again a second later.
fn stopped_after_a_copy(
    f: &Flight,
    (speed, rtt): (&mut Speed, Duration),
    session: &AgentSession<NetJob>,
    (costs, host): (&crate::cost::Costs, &str),
) {
    let (Some(e), Some(then)) = (&f.expected, f.hedged) else { return };
    let cost = costs.now(e);
    if cost == then {
        return;
    }
    // Counted from dispatch, while the speed is learnt from the agent's own
    // time: the link's share of answered runs' round trips is taken off. It
    // is both ways, and a stopped run made only the first, so the bound errs
    // high (moves the speed less), and on a link slower than the run there
    // is none. Before the agent's first answer, the connection's round trip
    // (`rtt`) stands for the link: the least any run's round trip holds.
    let ran = f.at.elapsed().saturating_sub(speed.link.unwrap_or(rtt));
    let Some(milli) = speed.stopped(cost, ran.as_micros() as f64) else { return };
    if speed.give(milli, session, (costs, host)) {
        tracing::info!(
            ran_ms = ran.as_millis() as u64,
            cost_ms = cost.micros / 1000,
            speed_milli = speed.given,
            "a copied run stopped unanswered: this agent is slower than learnt"
        );
    }
}

/// Lets go of the table of tasks in flight once it empties, if a load grew
/// it: it would otherwise keep its largest size for as long as the agent
/// stays connected.
fn release_if_empty(dispatched: &mut HashMap<u64, Flight>) {
    if dispatched.is_empty() && dispatched.capacity() > 64 {
        *dispatched = HashMap::new();
    }
}

/// A task dispatched to the agent and not answered yet.
struct Flight {
    at: Instant,
    /// A copy of it was started on another agent: what its unit was
    /// expected to cost then.
    hedged: Option<Prediction>,
    /// How long it waited before its dispatch.
    queue: Duration,
    /// It was running on the agent before this session (adopted after a
    /// scheduler restart or a cut): `at` is when it was adopted.
    adopted: bool,
    consumerd: u128,
    spec: Bytes,
    /// What it was expected to cost.
    expected: Option<crate::cost::Expected>,
}

/// An agent's speed: pinned by its configuration, or learnt from its
/// results (what a unit was expected to cost ÷ the time it took here), and
/// given to the core for placement ([`AgentSession::set_speed`]). Before
/// its results say anything, the speed the agent measured at its start
/// ([`crate::agent::speed_probe`]) stands in, unless one was kept for its host.
///
/// A unit's own history is what tells an agent's speed; a prediction from
/// the size line is off by 3-10x either way, and speeds learnt from it
/// throughout wandered to 2.9 on hosts of 1.0 (long units then waited for
/// those "faster" agents while equal ones idled). So size-line predictions
/// teach only an agent with no history-based result yet (a cold farm has
/// nothing better), and its first such result replaces what they taught.
struct Speed {
    pinned: bool,
    /// Whether it began at the agent's probed speed: a measure of this
    /// host, which size-line guesses do not move.
    probed: bool,
    /// The learnt speed's logarithm, a moving average.
    ln: f64,
    /// What the core was last given, thousandths.
    given: u32,
    /// Results with a history-based prediction taken in, up to [`Speed::SETTLED`]
    /// (a speed kept from before counts as settled).
    from_history: u32,
    /// The part of an answered run's round trip (dispatch to answer) that
    /// was not the agent's own time: its link, both ways. A moving average;
    /// `None` before the first answer.
    link: Option<Duration>,
}

impl Speed {
    /// Weight of one result in the moving average, once settled.
    const WEIGHT: f64 = 1.0 / 16.0;
    /// History-based results after which the average moves by [`Speed::WEIGHT`];
    /// before, each weighs as much as all before it (a plain mean).
    const SETTLED: u32 = 16;

    /// Pinned when `pinned_milli` is not 0; else from what was learnt of
    /// its host before (`known`), else as probed (`probed_milli`, 0: not),
    /// else nominal.
    fn new(milli: (u32, u32), known: Option<u32>, session: &AgentSession<NetJob>) -> Speed {
        let (start, mut speed) = Speed::start(milli, known);
        if let Some(start) = start {
            session.set_speed(start);
        }
        speed.given = session.speed();
        speed.ln = (f64::from(speed.given) / 1000.0).ln();
        speed
    }

    /// The speed to give the core first, if not nominal, and the state
    /// before its `given` is known.
    fn start((pinned_milli, probed_milli): (u32, u32), known: Option<u32>) -> (Option<u32>, Speed) {
        let pinned = pinned_milli > 0;
        let probed = !pinned && known.is_none() && probed_milli > 0;
        let start = if pinned {
            Some(pinned_milli)
        } else if known.is_some() {
            known
        } else {
            probed.then_some(probed_milli)
        };
        let from_history = if known.is_some() { Self::SETTLED } else { 0 };
        (start, Speed { pinned, probed, ln: 0.0, given: 0, from_history, link: None })
    }

    /// Takes in an answered run's link time (its round trip less the
    /// agent's own time): the first as it is, then an eighth of the way.
    fn linked(&mut self, link: Duration) {
        self.link = Some(self.link.map_or(link, |before| (before * 7 + link) / 8));
    }

    /// Learns from one unit that was expected to cost `expected` at speed 1
    /// and took `took` here, keeping a change for `host` in `costs`;
    /// returns the speed to express `took` at speed 1: nominal while the
    /// speed rests on size-line guesses only, so that guesses are placed
    /// by but never written into units' histories (where they would fix a
    /// wrong scale for good: guessed speeds of 3-9 on hosts of 1.0 stayed
    /// at 2.5-4.8 over the next builds). A probed speed is a measure, not
    /// a guess: it is written in (on the probe's scale, as the farm's
    /// other probed agents' are).
    fn observe(
        &mut self,
        expected: Prediction,
        took: Duration,
        session: &AgentSession<NetJob>,
        (costs, host): (&crate::cost::Costs, &str),
    ) -> f64 {
        if let Some(milli) = self.learn(expected, took.as_micros() as f64) {
            self.give(milli, session, (costs, host));
        }
        if self.pinned || self.probed || self.from_history > 0 {
            f64::from(self.given) / 1000.0
        } else {
            1.0
        }
    }

    /// Gives the core a learnt speed `milli` when it differs enough from
    /// what it has, keeping it for `host` in `costs`; whether it did.
    fn give(&mut self, milli: u32, session: &AgentSession<NetJob>, (costs, host): (&crate::cost::Costs, &str)) -> bool {
        // Only changes of more than 3 % are worth a new look at the routes.
        if milli.abs_diff(self.given) * 32 <= self.given {
            return false;
        }
        session.set_speed(milli);
        self.given = session.speed();
        // Guesses are not kept: a restarted scheduler would take them as learnt.
        if self.from_history > 0 {
            costs.learnt_speed(host, self.given);
        }
        true
    }

    /// A run of a unit whose history says `cost` (at speed 1) was stopped
    /// here unanswered after `ran_us`: it would have taken longer, so this
    /// host's speed is below `cost ÷ ran`. Above that bound, the learnt
    /// speed moves to it as far as the next result of a unit with history
    /// would move it (all the way while none has, as the first does), but
    /// the bound does not count as one: it is not a measure, and the next
    /// result replaces it while no history has settled the speed. Below the
    /// bound it says nothing. The new speed in thousandths, when it moves.
    fn stopped(&mut self, cost: Prediction, ran_us: f64) -> Option<u32> {
        if self.pinned || cost.basis != Basis::History || cost.micros == 0 || ran_us <= 0.0 {
            return None;
        }
        let bound = Self::sample_ln(cost.micros, ran_us);
        if bound >= self.ln {
            return None;
        }
        // As `learn` weighs the next result of a unit with history.
        Some(self.toward(bound, 1.0 / f64::from((self.from_history + 1).min(Self::SETTLED))))
    }

    /// The speed a unit costing `cost_us` at speed 1 shows by taking
    /// `took_us` here, as a logarithm, within the core's range.
    fn sample_ln(cost_us: u64, took_us: f64) -> f64 {
        let (min, max) = (f64::from(ccroute_core::MIN_SPEED), f64::from(ccroute_core::MAX_SPEED));
        (cost_us as f64 / took_us).clamp(min / 1000.0, max / 1000.0).ln()
    }

    /// Moves the average `weight` of the way to `sample_ln`; the new speed
    /// in thousandths.
    fn toward(&mut self, sample_ln: f64, weight: f64) -> u32 {
        self.ln += (sample_ln - self.ln) * weight;
        (self.ln.exp() * 1000.0).round() as u32
    }

    /// The new average's speed in thousandths, when this result teaches one.
    fn learn(&mut self, expected: Prediction, took_us: f64) -> Option<u32> {
        let weight = match expected.basis {
            _ if self.pinned || expected.micros == 0 || took_us <= 0.0 => return None,
            Basis::Cold => return None,
            Basis::Size if self.from_history > 0 || self.probed => return None,
            Basis::Size => Self::WEIGHT,
            Basis::History => {
                self.from_history = (self.from_history + 1).min(Self::SETTLED);
                1.0 / f64::from(self.from_history)
            }
        };
        Some(self.toward(Self::sample_ln(expected.micros, took_us), weight))
    }
}

/// One frame from the agent. `Err` is a protocol violation.
fn on_frame(
    (state, agent_name, speed): (&ServerState, &Arc<str>, &mut Speed),
    session: &mut AgentSession<NetJob>,
    dispatched: &mut HashMap<u64, Flight>,
    frame: Frame,
    ticket: Ticket,
) -> super::SessionOutcome {
    match frame.message {
        // The frame reader hands over exactly the declared payload.
        Message::TaskResult(header) => {
            state.metrics.received(frame.payload.len());
            let flight = dispatched.remove(&header.task_id);
            release_if_empty(dispatched);
            if let Some(f) = flight {
                let took = f.at.elapsed();
                state.metrics.compile.observe(took);
                // The agent's own time on it (inputs fetched and compiled):
                // what the unit costs, without the network's share.
                let agent_time =
                    Duration::from_micros(if header.wall_us > 0 { header.wall_us } else { header.cpu_time_us });
                // An adopted run's time here began at its adoption, not its start.
                if header.wall_us > 0 && !f.adopted {
                    speed.linked(took.saturating_sub(agent_time));
                }
                if let (Some(e), ccroute_wire::Outcome::Success) = (&f.expected, &header.outcome) {
                    // The model keeps costs at speed 1: a fast agent's time is
                    // longer there, a slow one's shorter.
                    let speed = speed.observe(e.prediction, agent_time, session, (&state.costs, &**agent_name));
                    tracing::debug!(task = header.task_id, took_ms = agent_time.as_millis() as u64, speed, "answered");
                    state.costs.took(e, agent_time.mul_f64(speed));
                }
                if let Some(web) = &state.web {
                    web.stopped(header.task_id);
                    let outcome = match header.outcome {
                        ccroute_wire::Outcome::Success => "ok",
                        ccroute_wire::Outcome::CompileFailed => "failed",
                        _ => "error",
                    };
                    web.ended(super::web::Ended {
                        spec: f.spec,
                        consumerd: f.consumerd,
                        agent: agent_name.clone(),
                        queue: f.queue,
                        // The rest of the round trip is the transfer both ways.
                        transfer: took.saturating_sub(agent_time),
                        compile: agent_time,
                        outcome,
                    });
                }
            }
            let reservation = match ticket {
                Ticket::Reserved(r, _) => Some(Arc::new(r)),
                Ticket::OverBudget | Ticket::Plain | Ticket::Hit(_) => None,
            };
            if header.task_id & ResumedTask::HANDLE_BIT != 0 {
                // A task it held for an earlier scheduler, which it was told
                // to drop after finishing it: nobody waits for it.
                tracing::debug!(handle = header.task_id, "result of a dropped task ignored");
                return Ok(());
            }
            let task = TaskId(header.task_id);
            let answer = AgentAnswer { header, payload: frame.payload, reservation };
            if let Err(e) = session.complete(task, answer) {
                // An answer for a task it does not hold: a confused agent,
                // not a reason to drop every task it does hold.
                tracing::warn!(error = %e, "ignored");
            }
            Ok(())
        }
        Message::CpuSample(sample) => {
            session.push_sample(sample);
            Ok(())
        }
        Message::ToolchainUpdate(u) => {
            session.set_toolchains(&u.toolchains);
            Ok(())
        }
        Message::UsageLimit(u) => {
            session.set_max_limit(u.limit);
            Ok(())
        }
        other => Err(super::SessionEnd::NotForRole { role: "agent", message: other.name() }),
    }
}

/// Sends a task (under the scheduler's id for it) or a cancel.
async fn send_dispatch(
    conn: &quinn::Connection,
    writer: &FrameWriter,
    senders: &mut JoinSet<()>,
    dispatch: Dispatch<NetJob>,
    (state, node): (&ServerState, super::shipping::SessionKey),
    dispatched: &mut HashMap<u64, Flight>,
) -> Result<(), NetError> {
    let shipping = &state.shipping;
    match dispatch {
        Dispatch::Cancel(id) => {
            shipping.inputs_ended(node, id.0);
            dispatched.remove(&id.0);
            release_if_empty(dispatched);
            if let Some(web) = &state.web {
                web.stopped(id.0);
            }
            writer.send(Message::Cancel(Cancel { task_id: id.0 }), Bytes::new()).await
        }
        Dispatch::Assign(task) => {
            let body = task.body();
            if body.header.inputs {
                // Its agent fetches the inputs from the consumerd that sent it.
                shipping.inputs_placed(node, task.id().0, body.origin, body.header.task_id);
            }
            // Named by its origin, so that a later scheduler can adopt it.
            let origin = Origin { consumerd: body.origin.0, task_id: body.header.task_id };
            let header =
                TaskHeader { task_id: task.id().0, origin: Some(origin), resumed: false, ..body.header.clone() };
            let queue = body.received.elapsed();
            state.metrics.waited(task.toolchain(), queue);
            state.metrics.sent(body.payload.len());
            let flight = Flight {
                at: Instant::now(),
                hedged: None,
                queue,
                adopted: false,
                consumerd: body.origin.0,
                spec: body.header.spec.clone(),
                expected: body.expected,
            };
            tracing::debug!(
                task = task.id().0,
                expected_us = body.expected.as_ref().map_or(0, |e| e.prediction.micros),
                "placed"
            );
            dispatched.insert(task.id().0, flight);
            if let Some(web) = &state.web {
                web.started(task.id().0, node.0, body.origin.0);
            }
            net::send_sized(conn, writer, senders, Message::Task(header), body.payload.clone(), ()).await
        }
        Dispatch::Adopt { task, handle } => {
            let body = task.body();
            if body.header.inputs {
                // A fetch it still has to make goes to the consumerd as for any placement.
                shipping.inputs_placed(node, task.id().0, body.origin, body.header.task_id);
            }
            let flight = Flight {
                at: Instant::now(),
                hedged: None,
                queue: Duration::ZERO,
                adopted: true,
                consumerd: body.origin.0,
                spec: body.header.spec.clone(),
                expected: body.expected,
            };
            dispatched.insert(task.id().0, flight);
            if let Some(web) = &state.web {
                web.started(task.id().0, node.0, body.origin.0);
            }
            writer.send(Message::Adopt(Adopt { handle, task_id: task.id().0 }), Bytes::new()).await
        }
        Dispatch::Abandon(handle) => writer.send(Message::Cancel(Cancel { task_id: handle }), Bytes::new()).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn learning() -> Speed {
        Speed { pinned: false, probed: false, ln: 0.0, given: 1000, from_history: 0, link: None }
    }

    fn at(micros: u64, basis: Basis) -> Prediction {
        Prediction { micros, basis }
    }

    #[test]
    fn copies_go_to_faster_hosts_unless_the_agent_stalled_after_answering() {
        let long = "long task copied to an idle agent at least twice as fast";
        let straggler = "straggler copied to an idle agent";
        let secs = Duration::from_secs;
        // A cold build's start: a guessed second, run 3 s on an agent that
        // never answered: a long unit, moved only to a much faster host.
        let cold = at(1_000_000, Basis::Cold);
        assert_eq!(copy_floors(cold, secs(3), 1000, None), [Some((2000, long)), None]);
        // The same on an agent that answered before and not since: stalled.
        assert_eq!(copy_floors(cold, secs(3), 1000, Some(false)), [Some((2000, long)), Some((0, straggler))]);
        // Still answering, on a 0.4 host (2.5 s expected here): a long unit,
        // not a stall, however far past the guess.
        assert_eq!(copy_floors(cold, secs(4), 400, Some(true)), [Some((800, long)), None]);
        assert_eq!(copy_floors(cold, secs(6), 400, Some(true)), [Some((800, long)), None]);
        let sized = at(500_000, Basis::Size);
        assert_eq!(copy_floors(sized, secs(3), 1300, Some(true)), [Some((2600, long)), None]);
        assert_eq!(copy_floors(sized, secs(3), 1300, Some(false)), [Some((2600, long)), Some((0, straggler))]);
        // Known to take a second, run 3 s on a 1.0 host that answers: a slow
        // run, copied to a host a quarter faster.
        let second = at(1_000_000, Basis::History);
        assert_eq!(copy_floors(second, secs(3), 1000, Some(true)), [None, Some((1250, straggler))]);
        // Known 20 s at speed 1, on a 0.5 host (40 s here): moved while
        // most remains (up to 15 s), then nothing until it runs past 80 s.
        let known = at(20_000_000, Basis::History);
        assert_eq!(copy_floors(known, secs(10), 500, Some(true)), [Some((1000, long)), None]);
        assert_eq!(copy_floors(known, secs(20), 500, Some(true)), [None, None]);
        assert_eq!(copy_floors(known, secs(81), 500, Some(false)), [None, Some((0, straggler))]);
        // Under a second nothing is copied.
        assert_eq!(copy_floors(cold, Duration::from_millis(900), 1000, Some(false)), [None, None]);
    }

    #[test]
    fn size_line_guesses_teach_only_until_a_units_history_does() {
        let mut s = learning();
        // A cold farm: the size line says 4 ms, it took 1 ms: a guess of 4.
        let guess = s.learn(at(4_000, Basis::Size), 1_000.0).unwrap();
        assert!(guess > 1000, "{guess}");
        // A cold prediction teaches nothing.
        assert_eq!(s.learn(at(4_000, Basis::Cold), 1_000.0), None);
        // The first result of a unit with history replaces the guesses: 0.5.
        assert_eq!(s.learn(at(1_000, Basis::History), 2_000.0), Some(500));
        // From then on the size line teaches nothing, however far off.
        assert_eq!(s.learn(at(90_000, Basis::Size), 1_000.0), None);
        // History is averaged: 0.5 and 2.0 give 1.0 (the mean of logarithms).
        assert_eq!(s.learn(at(2_000, Basis::History), 1_000.0), Some(1000));
    }

    #[test]
    fn a_run_stopped_unanswered_bounds_the_speed_from_above() {
        // Probed at 1.3; a unit its history says costs 0.6 s was stopped
        // here after 1.6 s: 0.375 at most, all the way while no history
        // has taught this agent anything.
        let mut s = Speed { probed: true, ln: 1.3f64.ln(), given: 1300, ..learning() };
        assert_eq!(s.stopped(at(600_000, Basis::History), 1_600_000.0), Some(375));
        // A bound above the speed says nothing, nor does a guessed cost.
        assert_eq!(s.stopped(at(600_000, Basis::History), 1_000_000.0), None);
        assert_eq!(s.stopped(at(600_000, Basis::Size), 6_000_000.0), None);
        assert_eq!(s.stopped(at(600_000, Basis::Cold), 6_000_000.0), None);
        // It is not a result: the next result of a unit with history
        // replaces it, as the first always does (here 1.2).
        assert_eq!(s.from_history, 0);
        assert_eq!(s.learn(at(1_200_000, Basis::History), 1_000_000.0), Some(1200));
        // Settled, a bound below moves it as one result does, no more.
        let mut settled = Speed { from_history: Speed::SETTLED, ..learning() };
        let moved = settled.stopped(at(1_000_000, Basis::History), 2_000_000.0).unwrap();
        assert_eq!(moved, ((0.5f64.ln() / 16.0).exp() * 1000.0).round() as u32);
        assert_eq!(settled.from_history, Speed::SETTLED);
        // Pinned: never.
        let mut pinned = Speed { pinned: true, ..learning() };
        assert_eq!(pinned.stopped(at(1_000_000, Basis::History), 4_000_000.0), None);
    }

    /// A run copied and then cancelled: its agent's speed falls only when
    /// the unit's history moved since the copy started (the copy answered),
    /// not when nothing was learnt meanwhile (its consumerd gave up).
    #[test]
    fn only_a_copy_that_answered_first_bounds_the_stopped_runs_agent() {
        use ccroute_core::test_support::{peer, tc};
        let s: ccroute_core::Scheduler<NetJob> = ccroute_core::Scheduler::new(ccroute_core::Config::default());
        let session = s.connect_agent(peer(1), &[tc("gcc")], 1);
        session.set_speed(1300);
        let costs = crate::cost::Costs::open(None);
        let spec = ccroute_wire::codec::encode_spec(&ccroute_wire::TaskSpec {
            args: vec!["-O2".into(), "-c".into()],
            input_path: "a.c".into(),
            cwd: None,
            env: vec![],
            inputs: None,
        });
        // A unit seen before: 0.4 s.
        let cold = costs.expect(tc("gcc").key(), &spec, 4096).unwrap();
        costs.took(&cold, Duration::from_millis(400));
        let e = costs.expect(tc("gcc").key(), &spec, 4096).unwrap();
        // Copied then, after it had run 1.6 s here.
        let stopped = Flight {
            at: Instant::now() - Duration::from_millis(1600),
            hedged: Some(costs.now(&e)),
            queue: Duration::ZERO,
            adopted: false,
            consumerd: 1,
            spec: spec.clone(),
            expected: Some(e),
        };
        let mut speed = Speed { probed: true, ln: 1.3f64.ln(), given: 1300, ..learning() };
        // Nothing learnt since the copy started: the consumerd gave up (a
        // stall of its own, maybe), which says nothing of this agent.
        stopped_after_a_copy(&stopped, (&mut speed, Duration::ZERO), &session, (&costs, "h"));
        assert_eq!((speed.given, session.speed()), (1300, 1300));
        // The copy answered in 0.38 s: the unit's history moves to about
        // 0.39 s, so this agent is at most about 0.25 (less by what the run
        // went on while this test ran: a stalled machine's 0.4 s is
        // allowed for).
        costs.took(&e, Duration::from_millis(380));
        stopped_after_a_copy(&stopped, (&mut speed, Duration::ZERO), &session, (&costs, "h"));
        assert!((190..=250).contains(&speed.given), "{}", speed.given);
        assert_eq!(session.speed(), speed.given);
        // A bound is not a learnt speed: not kept for the host.
        assert_eq!(costs.speed_of("h"), None);

        // Over a link that took 1.2 s of each answered run's round trip, a
        // run of it stopped 2.0 s after its dispatch ran here about 0.8 s:
        // the agent is at most about 0.49, not 0.2 (a stalled machine's 0.4 s
        // is allowed for).
        let over_thin = Flight { at: Instant::now() - Duration::from_millis(2000), ..stopped };
        let mut thin = Speed { probed: true, ln: 1.3f64.ln(), given: 1300, ..learning() };
        session.set_speed(1300);
        thin.linked(Duration::from_millis(1200));
        stopped_after_a_copy(&over_thin, (&mut thin, Duration::from_millis(5)), &session, (&costs, "h"));
        assert!((320..=500).contains(&thin.given), "{}", thin.given);
        // The same before the agent answered anything, over a connection
        // whose round trip is 1.2 s: that is taken off instead.
        let mut unanswered = Speed { probed: true, ln: 1.3f64.ln(), given: 1300, ..learning() };
        session.set_speed(1300);
        stopped_after_a_copy(&over_thin, (&mut unanswered, Duration::from_millis(1200)), &session, (&costs, "h"));
        assert!((320..=500).contains(&unanswered.given), "{}", unanswered.given);
    }

    #[test]
    fn a_kept_speed_is_settled_and_a_pinned_one_never_moves() {
        // Kept from before: one result moves it by a sixteenth (in logarithm).
        let mut kept = Speed { from_history: Speed::SETTLED, ..learning() };
        assert_eq!(kept.learn(at(1_000, Basis::Size), 1_000.0), None);
        let moved = kept.learn(at(2_000, Basis::History), 1_000.0).unwrap();
        assert_eq!(moved, ((2f64.ln() / 16.0).exp() * 1000.0).round() as u32);
        let mut pinned = Speed { pinned: true, ..learning() };
        assert_eq!(pinned.learn(at(2_000, Basis::History), 1_000.0), None);
    }

    #[test]
    fn a_probed_speed_stands_until_a_units_history_speaks() {
        // What comes first: pinned, then kept, then probed, then nominal.
        let first = |pinned, probed, known| {
            let (start, s) = Speed::start((pinned, probed), known);
            (start, s.pinned, s.probed, s.from_history)
        };
        assert_eq!(first(2500, 400, Some(700)), (Some(2500), true, false, Speed::SETTLED));
        assert_eq!(first(0, 400, Some(700)), (Some(700), false, false, Speed::SETTLED));
        assert_eq!(first(0, 400, None), (Some(400), false, true, 0));
        assert_eq!(first(0, 0, None), (None, false, false, 0));
        // Probed at 0.4: the size line, off 3-10x, does not move it.
        let mut s = Speed { probed: true, ln: 0.4f64.ln(), given: 400, ..learning() };
        assert_eq!(s.learn(at(90_000, Basis::Size), 1_000.0), None);
        assert_eq!(s.learn(at(1_000, Basis::Cold), 1_000.0), None);
        // A unit's own history does, as the first such result always does: 0.5.
        assert_eq!(s.learn(at(1_000, Basis::History), 2_000.0), Some(500));
    }
}
