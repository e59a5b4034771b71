//! A consumerd's connection: tasks in, answers out.
//!
//! Tasks arrive inline on the control stream (small sources) or one per uni
//! stream (large ones). A uni-stream task's header passes a gate before its
//! payload is read: the payload budget is reserved there, through this
//! connection's share of it (`budget::Share`), and past it the payload is
//! never read and the task is answered "retry locally". Tasks in flight are
//! capped per connection too ([`in_flight_cap`]): a consumerd that ignores
//! its remote limit is answered "run it locally" past it, before its task
//! reaches a queue others wait in. Headers whose payloads are still arriving
//! are capped by the transport: a peer may have at most
//! `TransportOptions::max_concurrent_uni_streams` (64) streams open, and a
//! payload that stops arriving is dropped at its deadline
//! (`net::queued_payload_deadline`: one that waits its turn behind others
//! the connection is delivering is given their time too, up to 74 s). The owner
//! task submits each task to the core under the consumerd's own id, and
//! sends each answer back under that id — small ones on the control stream,
//! large objects on a stream of their own, spawned so that the loop never
//! waits on one.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ccroute_wire::{Frame, Hello, Message, PreferredRemoteLimit, ResultHeader, RetryReason, Welcome};
use tokio::task::JoinSet;

use super::budget::Share;
use super::cache_hook::CacheLookup;
use super::inbound::{spawn_readers, Inbound, Ticket};
use super::job::{AgentAnswer, NetJob, TaskBody};
use super::{peer_info, ServerState};
use crate::net::{self, Admission, FrameWriter, NetError, ServerHandshake};
use ccroute_core::{Answer, ConsumerdSession, Reply};

/// How often the consumerd's preferred remote limit is checked for a change.
const LIMIT_CHECK: Duration = Duration::from_millis(100);

/// How long an announcement of new toolchains waits for the agents that
/// can be shipped them to attach (see `shipping::Shipping::wait_attached`).
const ATTACH_WAIT: Duration = Duration::from_millis(250);

/// Cancels of tasks not seen yet remembered per consumerd, at most.
const EARLY_CANCELS: usize = 4096;

/// Cancels that came before their task: a task with a large text travels
/// on a stream of its own, which its cancel, on the control stream, can
/// overtake. Task ids are never reused on a connection, so a task named
/// here is dropped when it comes (placed, it would hold an agent's token
/// for a compile nobody waits for). The oldest are forgotten past
/// [`EARLY_CANCELS`].
#[derive(Debug, Default)]
struct EarlyCancels {
    ids: std::collections::HashSet<u64>,
    order: std::collections::VecDeque<u64>,
}

impl EarlyCancels {
    fn add(&mut self, id: u64) {
        if self.ids.insert(id) {
            self.order.push_back(id);
        }
        while self.order.len() > EARLY_CANCELS {
            if let Some(old) = self.order.pop_front() {
                self.ids.remove(&old);
            }
        }
    }

    /// Whether task `id` was cancelled before it came (forgotten here then).
    fn take(&mut self, id: u64) -> bool {
        if !self.ids.remove(&id) {
            return false;
        }
        self.order.retain(|&x| x != id);
        true
    }
}

/// Serves one consumerd until its connection ends.
pub(crate) async fn serve(state: Arc<ServerState>, conn: quinn::Connection, hello: Hello, hs: ServerHandshake) {
    let scheduler = &state.scheduler;
    let mut session = scheduler.connect_consumerd(peer_info(&hello), &hello.body.toolchains);
    let node = (hello.body.node_id, conn.stable_id());
    let arch = hello.body.system.arch.clone();
    let announced = state.shipping.set_supplier(node, &arch, &conn, &hello.body.toolchains);
    // Until the optimizer's next tick: an even share of the cluster (none
    // while it has no agent: every task would only come back to run locally).
    let share = scheduler.cluster_limit() / (scheduler.consumerds().len() as u32).max(1);
    scheduler.set_remote_limit(session.id(), super::optimizer::widen(f64::from(share), state.lookahead));
    let welcome = Welcome { scheduler_id: state.id, limit: session.remote_limit() };
    // What the consumerd was told; a tick during the handshake is sent below.
    let mut last_limit = welcome.limit;
    let (writer, reader) = match hs.welcome(welcome, &ServerState::control_stream()).await {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(error = %e, "handshake failed after the hello");
            state.shipping.remove_supplier(node);
            return;
        }
    };
    if let Some(generation) = announced {
        state.shipping.wait_attached(&arch, generation, ATTACH_WAIT).await;
    }
    let share = Arc::new(state.budget.share());
    let budget = share.clone();
    let cache = state.cache.clone();
    let (mut rx, mut readers) = spawn_readers(conn.clone(), reader, move |message: Message| {
        let budget = budget.clone();
        let cache = cache.clone();
        async move {
            let Message::Task(t) = &message else {
                return (message, Admission::Read(Ticket::Plain));
            };
            // The cache first: a hit never reads the source.
            let lookup = match (&cache, t.cache_key) {
                (Some(cache), Some(key)) => match cache.storage().get(&key).await {
                    Some(hit) => return (message, Admission::Skip(Ticket::Hit(hit))),
                    None => CacheLookup::Missed,
                },
                _ => CacheLookup::Missed,
            };
            let admission = match budget.try_reserve(t.payload.len) {
                Some(r) => Admission::Read(Ticket::Reserved(r, lookup)),
                None => Admission::Skip(Ticket::OverBudget),
            };
            (message, admission)
        }
    });

    // Runs agents come back holding (cut off while they ran them): a task
    // of this session running again elsewhere takes one as its copy.
    let mut held_runs = state.resumes.consumerd_joined(node.0, node.1 as u64);
    let mut senders = JoinSet::new();
    let mut early = EarlyCancels::default();
    let mut check = tokio::time::interval(LIMIT_CHECK);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome: super::SessionOutcome = loop {
        tokio::select! {
            event = rx.recv() => match event {
                None => break Ok(()),
                Some(Inbound::Failed(e)) => break super::failure_outcome(*e),
                Some(Inbound::Frame { message, payload: Some(payload), ticket }) => {
                    let frame = Frame { message, payload };
                    if let Message::ToolchainUpdate(u) = &frame.message {
                        // The task that follows an announcement should find
                        // the agents it can be shipped to on its route.
                        if let Some(generation) = state.shipping.set_supplier(node, &arch, &conn, &u.toolchains) {
                            state.shipping.wait_attached(&arch, generation, ATTACH_WAIT).await;
                        }
                    }
                    if let Err(why) = on_frame(&state, (&share, &mut early), &mut session, &writer, frame, ticket, node).await {
                        break Err(why);
                    }
                }
                Some(Inbound::Frame { message: Message::Task(t), payload: None, ticket: Ticket::Hit(_) }) if early.take(t.task_id) => {
                    tracing::debug!(task = t.task_id, "a task cancelled before it came: dropped");
                }
                Some(Inbound::Frame { message: Message::Task(t), payload: None, ticket: Ticket::Hit(hit) }) => {
                    // Through the core like any task (counted, and answered by the cache hook).
                    // A cache hit compiles nothing: nothing is expected of it.
                    let body = TaskBody { origin: node, ..TaskBody::new(t, Bytes::new(), None, CacheLookup::Hit(hit)) };
                    if let Err(why) = submit(&mut session, &writer, body).await {
                        break Err(why);
                    }
                }
                Some(Inbound::Unfinished(message, why)) => {
                    if let Message::Task(t) = *message {
                        let why = format!("its source did not reach the scheduler whole: {why}");
                        let h = ResultHeader::run_locally(t.task_id, RetryReason::Rejected(why));
                        if writer.send(Message::TaskResult(h), Bytes::new()).await.is_err() {
                            break Ok(());
                        }
                    }
                }
                Some(Inbound::Frame { message, payload: None, .. }) => {
                    if let Message::Task(t) = message {
                        if over_budget(&state, &writer, t.task_id).await.is_err() {
                            break Ok(());
                        }
                    }
                }
            },
            answer = session.next_answer() => {
                if send_answer(&conn, &writer, &mut senders, answer, &state.metrics).await.is_err() {
                    break Ok(());
                }
            }
            Some(run) = held_runs.recv() => {
                let (agent, handle) = run.holder;
                let copied = state.resumes.copy_held(node.0, run, || session.copy_held(run.task_id, agent, handle));
                tracing::debug!(task = run.task_id, ?agent, ?copied, "held run offered");
                if copied == Some(true) {
                    tracing::info!(
                        task = run.task_id,
                        ?agent,
                        "a run an agent held when it was cut off is this task's copy: the first answer wins"
                    );
                }
            }
            _ = check.tick() => {
                let limit = session.remote_limit();
                if limit != last_limit {
                    last_limit = limit;
                    let msg = Message::PreferredRemoteLimit(PreferredRemoteLimit { limit });
                    if writer.send(msg, Bytes::new()).await.is_err() {
                        break Ok(());
                    }
                }
            }
            Some(_) = senders.join_next(), if !senders.is_empty() => {}
            e = writer.failed() => break super::failure_outcome(e),
        }
    };
    state.shipping.remove_supplier(node);
    state.resumes.consumerd_left(node.0, node.1 as u64);
    super::finish(&conn, "consumerd", outcome, session.in_flight());
    readers.abort_all();
    senders.abort_all();
    // Dropping the session cancels what it still has in flight.
}

/// Answers a task that would take the scheduler past its payload budget
/// (or this connection past its share of it): run it locally.
async fn over_budget(state: &ServerState, writer: &FrameWriter, task_id: u64) -> Result<(), NetError> {
    state.counters.over_budget.fetch_add(1, Ordering::Relaxed);
    writer.send(Message::TaskResult(ResultHeader::run_locally(task_id, RetryReason::OverBudget)), Bytes::new()).await
}

/// One frame from the consumerd. `Err` is a protocol violation.
async fn on_frame(
    state: &ServerState,
    (share, early): (&Share, &mut EarlyCancels),
    session: &mut ConsumerdSession<NetJob>,
    writer: &FrameWriter,
    frame: Frame,
    ticket: Ticket,
    origin: super::shipping::SessionKey,
) -> super::SessionOutcome {
    match frame.message {
        // Its reservation, if any, goes with the ticket.
        Message::Task(header) if early.take(header.task_id) => {
            tracing::debug!(task = header.task_id, "a task cancelled before it came: dropped");
            Ok(())
        }
        Message::Task(header) => {
            let (reservation, lookup) = match ticket {
                Ticket::Reserved(mut r, lookup) => {
                    r.arrived();
                    (Some(r), lookup)
                }
                Ticket::Hit(hit) => (None, CacheLookup::Hit(hit)),
                // An inline task: its bytes are already here (a control
                // stream frame is at most INLINE_PAYLOAD_MAX); count them.
                Ticket::Plain => match share.try_reserve_arrived(header.payload.len) {
                    Some(r) => (Some(r), CacheLookup::Unchecked),
                    None => return Ok(over_budget(state, writer, header.task_id).await?),
                },
                Ticket::OverBudget => (None, CacheLookup::Unchecked),
            };
            state.metrics.received(frame.payload.len());
            // A cache hit compiles nothing: nothing is expected of it.
            let expected = match lookup {
                CacheLookup::Hit(_) => None,
                _ => state.costs.expect(header.toolchain, &header.spec, frame.payload.len()),
            };
            tracing::trace!(
                task = header.task_id,
                bytes = frame.payload.len(),
                expected = ?expected.as_ref().map(|e| (e.prediction.micros, e.prediction.basis)),
                "task received"
            );
            let body = TaskBody { origin, expected, ..TaskBody::new(header, frame.payload, reservation, lookup) };
            submit(session, writer, body).await
        }
        Message::Cancel(c) => {
            if !session.cancel(c.task_id) {
                early.add(c.task_id);
            }
            Ok(())
        }
        Message::ToolchainUpdate(u) => {
            session.set_toolchains(&u.toolchains);
            Ok(())
        }
        Message::Demand(d) => {
            session.set_demand(d.wanted);
            Ok(())
        }
        other => Err(super::SessionEnd::NotForRole { role: "consumerd", message: other.name() }),
    }
}

async fn submit(session: &mut ConsumerdSession<NetJob>, writer: &FrameWriter, body: TaskBody) -> super::SessionOutcome {
    let (client_id, toolchain) = (body.header.task_id, body.header.toolchain);
    let cap = in_flight_cap(session.remote_limit());
    if session.in_flight() >= cap {
        let why = format!(
            "this consumerd has {} tasks in flight at the scheduler, its cap ({cap}: twice its remote limit of {}, \
             at least {MIN_IN_FLIGHT_CAP})",
            session.in_flight(),
            session.remote_limit()
        );
        let h = ResultHeader::run_locally(client_id, RetryReason::Rejected(why));
        return Ok(writer.send(Message::TaskResult(h), Bytes::new()).await?);
    }
    match session.submit(client_id, toolchain, body) {
        Ok(_) => Ok(()),
        Err(e) => {
            let h = ResultHeader::run_locally(client_id, RetryReason::Rejected(e.to_string()));
            Ok(writer.send(Message::TaskResult(h), Bytes::new()).await?)
        }
    }
}

/// The fewest tasks a consumerd may have in flight at the scheduler,
/// whatever its remote limit: room for a build whose window is still
/// opening, and for cache hits answered at once.
pub(crate) const MIN_IN_FLIGHT_CAP: usize = 1024;

/// Tasks a consumerd may have in flight at the scheduler: twice the remote
/// limit it was given (an honest consumerd keeps to the limit, and may lag
/// behind a window that just shrank), at least [`MIN_IN_FLIGHT_CAP`].
pub(crate) fn in_flight_cap(remote_limit: u32) -> usize {
    (remote_limit as usize).saturating_mul(2).max(MIN_IN_FLIGHT_CAP)
}

/// Sends one answer under the consumerd's id for its task.
async fn send_answer(
    conn: &quinn::Connection,
    writer: &FrameWriter,
    senders: &mut JoinSet<()>,
    answer: Answer<AgentAnswer>,
    metrics: &super::metrics::Metrics,
) -> Result<(), NetError> {
    let (header, payload, reservation) = match answer.reply {
        Reply::Done(a) | Reply::Intercepted(a) => {
            let mut h = a.header;
            h.task_id = answer.client_id;
            (h, a.payload, a.reservation)
        }
        Reply::RunLocally(reason) => {
            tracing::debug!(task = answer.client_id, %reason, "sent back to be compiled locally");
            (ResultHeader::run_locally(answer.client_id, reason), Bytes::new(), None)
        }
    };
    metrics.sent(payload.len());
    net::send_sized(conn, writer, senders, Message::TaskResult(header), payload, reservation).await
}
