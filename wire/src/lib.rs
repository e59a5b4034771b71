//! The ccroute protocol, sans-IO.
//!
//! This crate knows nothing of sockets, QUIC or tokio: it turns messages into
//! bytes and bytes into messages, with every bound checked before allocation
//! and every failure a typed error, never a panic.
//!
//! - [`handshake`]: the version handshake every connection opens with.
//! - [`message`]: tasks, results, cancels, toolchain updates, CPU samples,
//!   limits and admin queries.
//! - [`frame`]: length-prefixed frames with raw payloads after their header.
//! - [`toolchain`]: toolchain identity and its stable 128-bit key.
//! - [`manifest`]: a toolchain as files, for agents that do not have it.
//! - [`inputs`]: a unit as the files it reads, for agents to compile at their real paths.
//! - [`cache_key`]: result-cache keys over an unambiguous encoding.
//! - [`payload`]: payload compression.
//! - [`local`]: the wrapper ↔ consumerd protocol on the Unix socket.
//! - `codec` (private details, public functions): the only module that knows
//!   headers are bincode.

pub mod cache_key;
pub mod codec;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod inputs;
pub mod local;
pub mod manifest;
pub mod message;
pub mod payload;
pub mod toolchain;

pub use cache_key::{cache_key, CacheKeyHasher};
pub use error::DecodeError;
pub use frame::{encode_frame, encode_header, Frame, FrameDecoder, Limits};
pub use handshake::{
    Hello, HelloBody, HelloOutcome, HelloReply, Refusal, RefusalKind, Role, Shipping, SystemInfo, Welcome,
    PROTOCOL_VERSION,
};
pub use inputs::{InputFile, Inputs, InputsError};
pub use manifest::{Entry, EntryKind, Manifest, ManifestError};
pub use message::*;
pub use toolchain::{Lang, Toolchain, ToolchainKey, ToolchainKind};
