//! What a peer sends, gathered for its connection's owner task: frames from
//! the control stream, and frames from uni streams that first passed a gate
//! (which reserves payload budget, or answers from the cache, before a byte
//! of the payload is read). One channel, bounded, so a flood from one peer
//! waits on that peer's owner and nobody else's.

use bytes::Bytes;
use ccroute_wire::Message;
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::budget::Reservation;
use super::cache_hook::CacheLookup;
use crate::cache::CachedResult;
use crate::net::{self, Admission, FrameReader, NetError};

/// What a gate decided about a frame's payload.
#[derive(Debug)]
pub(crate) enum Ticket {
    /// Budget reserved for it (and, for a task, what the cache said).
    Reserved(Reservation, CacheLookup),
    /// Over budget: not read.
    OverBudget,
    /// A cache hit: not read.
    Hit(CachedResult),
    /// Not gated (the control stream) or carrying no payload.
    Plain,
}

/// One thing from the peer.
// Frames are the common case and move once, through a channel: boxing
// each would cost an allocation per frame.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Inbound {
    /// A frame; `payload` is `None` when the gate skipped it.
    Frame { message: Message, payload: Option<Bytes>, ticket: Ticket },
    /// A frame whose header came and whose payload did not (it stopped
    /// arriving, or its stream broke; its budget given back), and why: what
    /// it names is answered without it.
    Unfinished(Box<Message>, String),
    /// A stream or the connection failed.
    Failed(Box<NetError>),
}

/// Reads the control stream and the gated uni streams of `conn` into one
/// channel, until the connection ends or the receiver is dropped. The
/// readers are in the returned set: abort it when the owner is done.
pub(crate) fn spawn_readers<G, F>(
    conn: quinn::Connection,
    mut control: FrameReader,
    gate: G,
) -> (mpsc::Receiver<Inbound>, JoinSet<()>)
where
    G: Fn(Message) -> F + Send + Sync + 'static,
    F: std::future::Future<Output = (Message, Admission<Ticket>)> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Inbound>(256);
    let mut readers = JoinSet::new();
    let control_tx = tx.clone();
    readers.spawn(async move {
        loop {
            let event = match control.next().await {
                Ok(Some(f)) => Inbound::Frame { message: f.message, payload: Some(f.payload), ticket: Ticket::Plain },
                Ok(None) => break,
                Err(e) => Inbound::Failed(Box::new(e)),
            };
            let failed = matches!(event, Inbound::Failed(_));
            if control_tx.send(event).await.is_err() || failed {
                break;
            }
        }
    });
    let mut uni = net::accept_gated_frames(conn, ccroute_wire::Limits::DEFAULT, gate);
    readers.spawn(async move {
        while let Some(next) = uni.next().await {
            let event = match next {
                Ok(g) => Inbound::Frame { message: g.message, payload: g.payload, ticket: g.token },
                Err(e @ NetError::ConnectionLost { .. }) => Inbound::Failed(Box::new(e)),
                Err(e) => {
                    tracing::warn!(error = %e, "a payload stream failed");
                    match e.into_unfinished() {
                        Ok((message, why)) => Inbound::Unfinished(Box::new(message), why),
                        // Its header was not read either: nothing names a task to answer.
                        Err(_) => continue,
                    }
                }
            };
            if tx.send(event).await.is_err() {
                break;
            }
        }
    });
    (rx, readers)
}
