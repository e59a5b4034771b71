//! Shipped toolchains on the scheduler: who supplies them, who runs them,
//! and the relay of fetch streams.
//!
//! A consumerd supplies every toolchain it announces (it packaged each one
//! to learn its identity). An agent that announced [`WireShipping::Ready`]
//! serves, besides its installed compilers, every toolchain a connected
//! consumerd of its architecture supplies: its owner task listens to
//! [`Shipping::subscribe`] and re-attaches it to those routes when the set
//! changes. Routes stay keyed by the toolchain key alone, so a shipped
//! toolchain and the same one installed on another agent are one route.
//!
//! A fetch stream opened by an agent starts with [`Fetch::Toolchain`];
//! [`relay`] reads that one frame, picks a consumerd that supplies the key,
//! opens a stream to it, forwards the frame, and from then on copies bytes
//! both ways without decoding them: the agent checks every digest itself.
//! Left out: the scheduler does not check that the agent holds a task of
//! that toolchain (compiler files are no secret), and picks the first
//! supplier rather than the least busy.
//!
//! Units sent as their inputs ([`ccroute_wire::inputs`]) travel on each
//! toolchain's inputs twin, which every agent that can make the sandbox
//! serves besides the toolchain itself. Their fetch streams start with
//! [`Fetch::Inputs`] naming the task by the id its agent knows: the relay
//! goes to the consumerd that sent that task to that agent — recorded
//! when the task was placed, forgotten when it ends — and nowhere else, so
//! an agent reads only the inputs of tasks it holds, and only while it
//! holds them.

use std::collections::{HashMap, HashSet};

use dashmap::DashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::BytesMut;
use ccroute_wire::codec::decode_message;
use ccroute_wire::{
    encode_header, Fetch, Message, Package, Shipping as WireShipping, Toolchain, ToolchainKey, ToolchainKind,
};
use tokio::sync::{watch, Notify};

/// Most toolchains one consumerd supplies: shipping agents attach to every
/// supplied route, so a consumerd announcing thousands must not make every
/// agent join thousands of routes.
pub(crate) const MAX_SUPPLIED: usize = 64;

/// Largest first frame of a fetch stream.
const MAX_REQUEST: u32 = 64 << 10;

/// How long an agent may take to send its first frame.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Supplier {
    arch: String,
    toolchains: Vec<Toolchain>,
}

/// A session: the peer's node id and its connection's id. Node ids survive
/// reconnects, so an old session that ends late must not remove its
/// successor's entry.
pub(crate) type SessionKey = (u128, usize);

#[derive(Debug, Clone)]
struct AgentShipping {
    state: WireShipping,
    native: HashSet<ToolchainKey>,
    arch: String,
    /// The supplied set's generation it is attached to.
    attached: u64,
}

#[derive(Debug, Default)]
struct Inner {
    suppliers: HashMap<SessionKey, Supplier>,
    /// Each supplier's connection, to relay fetches to.
    conns: HashMap<SessionKey, quinn::Connection>,
    agents: HashMap<SessionKey, AgentShipping>,
}

/// See the module doc.
#[derive(Debug)]
pub(crate) struct Shipping {
    inner: Mutex<Inner>,
    /// The supplied set's generation, bumped on every change.
    changed: watch::Sender<u64>,
    /// Woken when an agent re-attached.
    attached: Notify,
    /// Inputs tasks on agents: (agent session, the agent's task id) →
    /// (consumerd session, the consumerd's task id).
    inputs: DashMap<(SessionKey, u64), (SessionKey, u64)>,
}

impl Default for Shipping {
    fn default() -> Self {
        Shipping {
            inner: Mutex::default(),
            changed: watch::Sender::new(0),
            attached: Notify::new(),
            inputs: DashMap::new(),
        }
    }
}

impl Shipping {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every update replaces one map entry.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A consumerd supplies `toolchains` (its announced set, replacing the
    /// last). Returns the new generation when the supplied set changed.
    pub(crate) fn set_supplier(
        &self,
        node: SessionKey,
        arch: &str,
        conn: &quinn::Connection,
        toolchains: &[Toolchain],
    ) -> Option<u64> {
        let mut shippable: Vec<Toolchain> =
            toolchains.iter().filter(|t| t.kind != ToolchainKind::Test).cloned().collect();
        if shippable.len() > MAX_SUPPLIED {
            tracing::warn!(
                announced = shippable.len(),
                kept = MAX_SUPPLIED,
                "a consumerd announced more toolchains than are shipped for one consumerd; the rest run only on agents that have them"
            );
            shippable.truncate(MAX_SUPPLIED);
        }
        let changed = {
            let mut inner = self.lock();
            let before: HashSet<ToolchainKey> =
                inner.suppliers.values().flat_map(|s| s.toolchains.iter().map(Toolchain::key)).collect();
            inner.suppliers.insert(node, Supplier { arch: arch.to_owned(), toolchains: shippable });
            inner.conns.insert(node, conn.clone());
            let after: HashSet<ToolchainKey> =
                inner.suppliers.values().flat_map(|s| s.toolchains.iter().map(Toolchain::key)).collect();
            before != after
        };
        changed.then(|| {
            self.changed.send_modify(|g| *g += 1);
            *self.changed.borrow()
        })
    }

    /// Waits, at most `limit`, until every agent of `arch` that runs shipped
    /// toolchains is attached to generation `generation`: so that the task
    /// that follows an announcement finds them on its route instead of
    /// being sent back to compile locally.
    pub(crate) async fn wait_attached(&self, arch: &str, generation: u64, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.attached.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let behind = self
                .lock()
                .agents
                .values()
                .any(|a| matches!(a.state, WireShipping::Ready(_)) && a.arch == arch && a.attached < generation);
            if !behind {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
            }
        }
    }

    /// An agent re-attached to its routes for generation `generation`.
    pub(crate) fn attached(&self, node: SessionKey, generation: u64) {
        if let Some(a) = self.lock().agents.get_mut(&node) {
            a.attached = a.attached.max(generation);
        }
        self.attached.notify_waiters();
    }

    /// A consumerd left.
    pub(crate) fn remove_supplier(&self, node: SessionKey) {
        let removed = {
            let mut inner = self.lock();
            inner.conns.remove(&node);
            inner.suppliers.remove(&node)
        };
        if removed.is_some_and(|s| !s.toolchains.is_empty()) {
            self.changed.send_modify(|g| *g += 1);
        }
    }

    /// Changes to the supplied set.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// What an agent of `arch` that runs shipped toolchains serves: its own
    /// and every supplied one, one per key, and the inputs twin of each.
    pub(crate) fn served_by(&self, arch: &str, native: &[Toolchain]) -> Vec<Toolchain> {
        let mut seen: HashSet<ToolchainKey> = native.iter().map(Toolchain::key).collect();
        let mut out = native.to_vec();
        {
            let inner = self.lock();
            for s in inner.suppliers.values().filter(|s| s.arch == arch) {
                for t in &s.toolchains {
                    if seen.insert(t.key()) {
                        out.push(t.clone());
                    }
                }
            }
        }
        let twins: Vec<Toolchain> = out
            .iter()
            .filter(|t| t.kind != ToolchainKind::Test && !t.is_inputs_twin())
            .map(Toolchain::inputs_twin)
            .filter(|t| seen.insert(t.key()))
            .collect();
        out.extend(twins);
        out
    }

    /// An inputs task was placed on an agent: its fetches go to `origin`.
    pub(crate) fn inputs_placed(&self, agent: SessionKey, task: u64, origin: SessionKey, origin_task: u64) {
        self.inputs.insert((agent, task), (origin, origin_task));
    }

    /// The agent's task ended (answered, cancelled) or it left.
    pub(crate) fn inputs_ended(&self, agent: SessionKey, task: u64) {
        self.inputs.remove(&(agent, task));
    }

    /// An agent joined (or re-announced), with its shipping state, its
    /// architecture, its installed compilers, and the supplied set's
    /// generation its routes reflect.
    pub(crate) fn set_agent(
        &self,
        node: SessionKey,
        state: WireShipping,
        arch: &str,
        native: &[Toolchain],
        generation: u64,
    ) {
        let native = native.iter().flat_map(|t| [t.key(), t.inputs_twin().key()]).collect();
        self.lock().agents.insert(node, AgentShipping { state, native, arch: arch.to_owned(), attached: generation });
        self.attached.notify_waiters();
    }

    /// An agent left.
    pub(crate) fn remove_agent(&self, node: SessionKey) {
        self.lock().agents.remove(&node);
        self.inputs.retain(|(agent, _), _| *agent != node);
    }

    /// An agent's shipping state, for `status`.
    pub(crate) fn agent_state(&self, node: u128) -> WireShipping {
        let inner = self.lock();
        // The newest session of that node (the highest connection id).
        let newest = inner.agents.iter().filter(|((n, _), _)| *n == node).max_by_key(|((_, c), _)| *c);
        newest.map(|(_, a)| a.state.clone()).unwrap_or_default()
    }

    /// Of `agents` on the route `key`, those that serve it shipped.
    pub(crate) fn shipped_to(&self, key: ToolchainKey, agents: &[u128]) -> Vec<u128> {
        let inner = self.lock();
        agents
            .iter()
            .copied()
            .filter(|a| inner.agents.iter().any(|((n, _), s)| n == a && !s.native.contains(&key)))
            .collect()
    }

    fn supplier_of(&self, key: ToolchainKey) -> Option<quinn::Connection> {
        let inner = self.lock();
        let (node, _) = inner.suppliers.iter().find(|(_, s)| s.toolchains.iter().any(|t| t.key() == key))?;
        inner.conns.get(node).cloned()
    }
}

/// Relays one fetch stream the agent `agent` opened (see the module doc).
pub(crate) async fn relay(
    shipping: &Shipping,
    agent: SessionKey,
    mut a_send: quinn::SendStream,
    mut a_recv: quinn::RecvStream,
) {
    // Bulk data towards the agent: below its control stream.
    let _ = a_send.set_priority(-1);
    let request = match tokio::time::timeout(REQUEST_TIMEOUT, read_frame(&mut a_recv)).await {
        Ok(Ok(r)) => r,
        Ok(Err(why)) => {
            tracing::warn!(reason = %why, "bad fetch stream from an agent; closed");
            let _ = a_send.reset(0u32.into());
            return;
        }
        Err(_) => {
            tracing::warn!("an agent opened a fetch stream and sent nothing; closed");
            let _ = a_send.reset(0u32.into());
            return;
        }
    };
    let (conn, frame, what) = match request {
        Request::Toolchain(key, frame) => match shipping.supplier_of(key) {
            Some(conn) => (conn, frame, format!("toolchain {key}")),
            None => {
                let mut buf = BytesMut::new();
                let why = "no connected consumerd supplies it".to_owned();
                encode_header(&Message::Package(Box::new(Package::Unavailable(why))), &mut buf);
                let _ = a_send.write_all(&buf).await;
                let _ = a_send.finish();
                return;
            }
        },
        Request::Inputs(task) => {
            let origin = shipping.inputs.get(&(agent, task)).map(|e| *e.value());
            let conn = origin.and_then(|(node, id)| Some((shipping.lock().conns.get(&node).cloned()?, id)));
            let Some((conn, id)) = conn else {
                tracing::debug!(task, "an agent asked for the inputs of a task it does not hold; closed");
                let _ = a_send.reset(0u32.into());
                return;
            };
            let mut buf = BytesMut::new();
            encode_header(&Message::Fetch(Fetch::Inputs(id)), &mut buf);
            (conn, buf.to_vec(), format!("inputs of task {task}"))
        }
    };
    let (mut c_send, mut c_recv) = match tokio::time::timeout(REQUEST_TIMEOUT, conn.open_bi()).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::warn!(fetch = %what, error = %e, "cannot open a fetch stream to the consumerd");
            let _ = a_send.reset(0u32.into());
            return;
        }
        Err(_) => {
            tracing::warn!(fetch = %what, "the consumerd has no fetch stream free for 10 s; the agent's fetch fails");
            let _ = a_send.reset(0u32.into());
            return;
        }
    };
    if c_send.write_all(&frame).await.is_err() {
        let _ = a_send.reset(0u32.into());
        return;
    }
    tokio::join!(pipe(&mut a_recv, &mut c_send), pipe(&mut c_recv, &mut a_send));
}

/// Copies one direction of a relayed stream to its end, then finishes the
/// other side, or resets it if either side failed.
async fn pipe(from: &mut quinn::RecvStream, to: &mut quinn::SendStream) {
    match tokio::io::copy(from, to).await {
        Ok(_) => {
            let _ = to.finish();
        }
        Err(_) => {
            let _ = to.reset(0u32.into());
        }
    }
}

/// What a fetch stream asks for.
enum Request {
    /// A toolchain, with the first frame's bytes to forward as they came.
    Toolchain(ToolchainKey, Vec<u8>),
    /// The inputs of the agent's task.
    Inputs(u64),
}

/// Reads the first frame.
async fn read_frame(recv: &mut quinn::RecvStream) -> Result<Request, String> {
    let mut len = [0u8; 4];
    recv.read_exact(&mut len).await.map_err(|e| e.to_string())?;
    let n = u32::from_le_bytes(len);
    if n > MAX_REQUEST {
        return Err(format!("first frame of {n} bytes, more than {MAX_REQUEST}"));
    }
    let mut body = vec![0u8; n as usize];
    recv.read_exact(&mut body).await.map_err(|e| e.to_string())?;
    match decode_message(&body).map_err(|e| e.to_string())? {
        Message::Fetch(Fetch::Toolchain(key)) => {
            let mut frame = len.to_vec();
            frame.extend_from_slice(&body);
            Ok(Request::Toolchain(key, frame))
        }
        Message::Fetch(Fetch::Inputs(task)) => Ok(Request::Inputs(task)),
        other => Err(format!("a fetch stream must start with a toolchain request, not a {}", other.name())),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use ccroute_wire::Lang;

    use super::*;

    fn tc(version: &str, kind: ToolchainKind) -> Toolchain {
        Toolchain {
            kind,
            lang: Lang::C,
            compiler: "gcc".into(),
            target: "x86_64-linux-gnu".into(),
            version: version.into(),
            pic_default: true,
            pie_default: true,
            binary_hash: [version.len() as u8; 32],
        }
    }

    #[test]
    fn agents_serve_their_own_and_what_consumerds_of_their_arch_supply() {
        let s = Shipping::default();
        let mut rx = s.subscribe();
        let native = vec![tc("12", ToolchainKind::Gnu)];
        // Each with its inputs twin: an agent that ships can make the sandbox.
        assert_eq!(s.served_by("x86_64", &native), vec![native[0].clone(), native[0].inputs_twin()]);
        s.lock().suppliers.insert(
            (1, 1),
            Supplier {
                arch: "x86_64".into(),
                toolchains: vec![tc("11.4", ToolchainKind::Gnu), tc("12", ToolchainKind::Gnu)],
            },
        );
        let served = s.served_by("x86_64", &native);
        assert_eq!(served.len(), 4, "the native one is not listed twice: {served:?}");
        assert!(served.contains(&tc("11.4", ToolchainKind::Gnu).inputs_twin()));
        assert!(s.served_by("aarch64", &native).len() == 2, "another architecture gets none");
        let test = vec![tc("t", ToolchainKind::Test)];
        assert_eq!(s.served_by("aarch64", &test), test, "the test toolchain has no twin");
        s.set_agent((9, 1), WireShipping::Ready("bubblewrap".into()), "x86_64", &native, 0);
        assert_eq!(s.shipped_to(tc("11.4", ToolchainKind::Gnu).key(), &[9]), vec![9]);
        assert!(s.shipped_to(tc("12", ToolchainKind::Gnu).key(), &[9]).is_empty());
        // An old session of that node ending late leaves the new one alone.
        s.remove_agent((9, 0));
        assert!(matches!(s.agent_state(9), WireShipping::Ready(_)));
        assert!(s.shipped_to(native[0].inputs_twin().key(), &[9]).is_empty(), "its own, as inputs");
        s.remove_supplier((1, 0));
        assert_eq!(s.served_by("x86_64", &native).len(), 4);
        s.remove_supplier((1, 1));
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        assert_eq!(s.served_by("x86_64", &native).len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn an_announcement_waits_for_the_shipping_agents_to_attach() {
        let s = std::sync::Arc::new(Shipping::default());
        s.set_agent((9, 1), WireShipping::Ready("bubblewrap".into()), "x86_64", &[], 0);
        s.set_agent((10, 2), WireShipping::Off, "x86_64", &[], 0);
        s.set_agent((11, 3), WireShipping::Ready("bubblewrap".into()), "aarch64", &[], 0);
        let waiter = {
            let s = s.clone();
            tokio::spawn(async move {
                let t = tokio::time::Instant::now();
                s.wait_attached("x86_64", 1, Duration::from_secs(5)).await;
                t.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        s.attached((9, 1), 1);
        let waited = waiter.await.unwrap();
        assert_eq!(waited, Duration::from_millis(30), "only the shipping agent of that architecture is waited for");
        // An agent that never attaches costs the limit, no more.
        let t = tokio::time::Instant::now();
        s.wait_attached("x86_64", 2, Duration::from_millis(250)).await;
        assert_eq!(t.elapsed(), Duration::from_millis(250));
    }
}
