//! The Redis tier: results shared between schedulers.
//!
//! [`RedisTier`] stores the checksummed entry form of [`super::entry`] under
//! `ccroute:v1:<64 hex>`, optionally with a TTL. A cache must never hold a
//! compile up, so every call is bounded and every failure is a miss:
//!
//! - each call (connecting included) runs under one short timeout;
//! - an error or timeout is counted, drops the connection, and starts a
//!   back-off during which calls return at once without touching the network;
//! - the next call after the back-off reconnects; calls that arrive while it
//!   connects wait for that one connection (within their own timeout)
//!   instead of opening more.
//!
//! A corrupt value is counted and left alone: the next put of the same key
//! overwrites it, and a TTL ends it.
//!
//! Locks: none. The connection is an `ArcSwapOption` (a multiplexed
//! connection is cheap to clone and serves concurrent calls), the back-off
//! deadline and the "connecting" flag are atomics, and waiters for a
//! connection park on a `Notify`.
//!
//! Left out: Redis Cluster and Sentinel, and sizes: `bytes` and `entries` in
//! [`RedisTier::status`] are 0, because the server holds other writers'
//! entries and asking it would cost a round trip.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use ccroute_wire::{CacheKey, CacheTierStatus};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use thiserror::Error;
use tokio::sync::Notify;
use tracing::{debug, warn};

use super::{key_hex, CachedResult, TierCounters};

/// Every key this tier writes starts with this.
pub const KEY_PREFIX: &str = "ccroute:v1:";

/// How to reach Redis and how patient to be with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://host:port/db` (see the `redis` crate for the forms).
    pub url: String,
    /// The most one get may take, connecting included: a slow cache is a miss.
    pub timeout: Duration,
    /// The most one put may take: puts run in the background, so they can
    /// wait out a busy moment that a lookup cannot.
    pub write_timeout: Duration,
    /// How long entries live in Redis; `None` keeps them until Redis evicts.
    pub ttl: Option<Duration>,
    /// After a failure, how long calls skip Redis before trying again.
    pub backoff: Duration,
    /// The largest entry written: a larger one could not be read back
    /// within a lookup's timeout, and each lookup that timed out on it
    /// would drop the connection and skip Redis for the back-off.
    pub max_entry: usize,
}

impl RedisConfig {
    /// `url` with a 250 ms lookup timeout, a 2 s store timeout, no TTL, a
    /// 1 s back-off, and entries of at most 8 MiB (read in ~70 ms at
    /// 1 Gbit/s: well within the lookup's timeout; larger objects stay in
    /// the memory and disk tiers).
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            timeout: Duration::from_millis(250),
            write_timeout: Duration::from_secs(2),
            ttl: None,
            backoff: Duration::from_secs(1),
            max_entry: 8 << 20,
        }
    }

    /// Sets the largest entry written.
    pub fn with_max_entry(mut self, bytes: usize) -> Self {
        self.max_entry = bytes;
        self
    }

    /// The most a put may take: never less than a get.
    fn put_timeout(&self) -> Duration {
        self.write_timeout.max(self.timeout)
    }

    /// Sets the timeout of a get (connecting included).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Gives entries a TTL.
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Sets the back-off after a failure.
    pub fn with_backoff(mut self, backoff: Duration) -> Self {
        self.backoff = backoff;
        self
    }
}

/// Why a Redis call did not complete.
#[derive(Debug, Error)]
pub enum RedisTierError {
    /// The configured URL is not a Redis URL.
    #[error("invalid redis url {url:?}: {source}")]
    Url {
        /// The URL as configured.
        url: String,
        /// The parser's complaint.
        source: RedisError,
    },
    /// Connecting or the command took longer than the timeout.
    #[error("redis {op} timed out after {ms} ms")]
    Timeout {
        /// `get` or `put`.
        op: &'static str,
        /// The timeout.
        ms: u128,
    },
    /// Redis or the connection to it failed.
    #[error("redis {op} failed: {source}")]
    Redis {
        /// `get` or `put`.
        op: &'static str,
        /// The client's error.
        source: RedisError,
    },
    /// A recent failure: Redis is skipped for a while.
    #[error("redis skipped for {ms} more ms after a failure")]
    BackingOff {
        /// Time left in the back-off.
        ms: u64,
    },
    /// An entry past [`RedisConfig::max_entry`]: not written.
    #[error("an entry of {bytes} bytes is past the {max} a lookup can read in time: not stored in redis")]
    TooLarge {
        /// The entry's size.
        bytes: usize,
        /// The bound.
        max: usize,
    },
}

/// A Redis-backed cache tier.
pub struct RedisTier {
    client: Client,
    config: RedisConfig,
    conn: ArcSwapOption<MultiplexedConnection>,
    /// Taken by the one call that connects; Acquire pairs with the Release
    /// of [`Connecting`]'s drop.
    connecting: AtomicBool,
    /// Wakes the calls waiting while another connects.
    connect_done: Notify,
    /// Milliseconds since `epoch` before which calls skip Redis. Relaxed: a
    /// hint; a call that reads a stale value only tries Redis once more.
    skip_until_ms: AtomicU64,
    epoch: Instant,
    counters: TierCounters,
    /// Puts that reached Redis, and puts that failed. Statistics (Relaxed).
    puts: AtomicU64,
    put_errors: AtomicU64,
}

impl std::fmt::Debug for RedisTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisTier")
            .field("config", &self.config)
            .field("connected", &self.conn.load().is_some())
            .finish_non_exhaustive()
    }
}

impl RedisTier {
    /// A tier for `config`. Does not connect: the first call does.
    ///
    /// # Errors
    /// [`RedisTierError::Url`] when the URL does not parse.
    pub fn new(config: RedisConfig) -> Result<Self, RedisTierError> {
        let client = Client::open(config.url.as_str())
            .map_err(|source| RedisTierError::Url { url: config.url.clone(), source })?;
        Ok(RedisTier {
            client,
            config,
            conn: ArcSwapOption::empty(),
            connecting: AtomicBool::new(false),
            connect_done: Notify::new(),
            skip_until_ms: AtomicU64::new(0),
            epoch: Instant::now(),
            counters: TierCounters::default(),
            puts: AtomicU64::new(0),
            put_errors: AtomicU64::new(0),
        })
    }

    /// The result under `key`, or `None`: on a miss, and on any failure
    /// (counted as an error) within the configured timeout.
    pub async fn get(&self, key: &CacheKey) -> Option<CachedResult> {
        match self.fetch(key).await {
            Ok(Some(bytes)) => match CachedResult::decode(key, bytes) {
                Ok(result) => {
                    self.counters.hit();
                    Some(result)
                }
                Err(error) => {
                    self.counters.error();
                    self.counters.miss();
                    warn!(key = %key_hex(key), %error, "corrupt value in redis");
                    None
                }
            },
            Ok(None) => {
                self.counters.miss();
                None
            }
            Err(error) => {
                self.counters.error();
                self.counters.miss();
                debug!(%error, "redis lookup degraded to a miss");
                None
            }
        }
    }

    /// Stores `result` under `key` (with the TTL, if any). A failure is
    /// counted and returned; callers may ignore it.
    ///
    /// # Errors
    /// Any [`RedisTierError`]; none of them leaves a partial value.
    pub async fn put(&self, key: &CacheKey, result: &CachedResult) -> Result<(), RedisTierError> {
        let value = result.encode(key);
        if value.len() > self.config.max_entry {
            // Not Redis's failure: nothing is counted against it.
            let error = RedisTierError::TooLarge { bytes: value.len(), max: self.config.max_entry };
            debug!(%error, "redis store skipped");
            return Err(error);
        }
        let mut cmd = redis::cmd("SET");
        cmd.arg(redis_key(key)).arg(value.as_ref());
        if let Some(ttl) = self.config.ttl {
            cmd.arg("PX").arg(ttl.as_millis().max(1) as u64);
        }
        let outcome = self
            .bounded("put", self.config.put_timeout(), async {
                let mut conn = self.connection().await?;
                cmd.query_async::<()>(&mut conn).await.map_err(|source| RedisTierError::Redis { op: "put", source })
            })
            .await;
        match &outcome {
            Ok(()) => {
                self.puts.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                debug!(%error, "redis store dropped");
                self.put_errors.fetch_add(1, Ordering::Relaxed);
                self.counters.error();
            }
        }
        outcome
    }

    async fn fetch(&self, key: &CacheKey) -> Result<Option<Bytes>, RedisTierError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(redis_key(key));
        self.bounded("get", self.config.timeout, async {
            let mut conn = self.connection().await?;
            cmd.query_async::<Option<Bytes>>(&mut conn)
                .await
                .map_err(|source| RedisTierError::Redis { op: "get", source })
        })
        .await
    }

    /// Runs one call under the timeout; a failure of the link drops the
    /// connection and starts the back-off.
    async fn bounded<T>(
        &self,
        op: &'static str,
        limit: Duration,
        call: impl std::future::Future<Output = Result<T, RedisTierError>>,
    ) -> Result<T, RedisTierError> {
        let outcome = match tokio::time::timeout(limit, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(RedisTierError::Timeout { op, ms: limit.as_millis() }),
        };
        let link_failed = match &outcome {
            Err(RedisTierError::Timeout { .. }) => true,
            Err(RedisTierError::Redis { source, .. }) => is_link_failure(source),
            _ => false,
        };
        if link_failed {
            self.back_off();
        }
        outcome
    }

    /// Drops the connection and skips Redis for the back-off.
    fn back_off(&self) {
        self.conn.store(None);
        let until = self.now_ms().saturating_add(self.config.backoff.as_millis() as u64);
        self.skip_until_ms.store(until, Ordering::Relaxed);
    }

    /// The live connection, or a new one unless backing off. While another
    /// call connects, waits for it (the caller's timeout bounds the wait).
    async fn connection(&self) -> Result<MultiplexedConnection, RedisTierError> {
        loop {
            if let Some(conn) = self.conn.load_full() {
                return Ok((*conn).clone());
            }
            let (now, until) = (self.now_ms(), self.skip_until_ms.load(Ordering::Relaxed));
            if now < until {
                return Err(RedisTierError::BackingOff { ms: until - now });
            }
            // Registered before the flag is tested, so the connector's wake-up
            // cannot fall between the test and the wait.
            let done = self.connect_done.notified();
            tokio::pin!(done);
            done.as_mut().enable();
            if self.connecting.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return self.connect().await;
            }
            done.await;
        }
    }

    async fn connect(&self) -> Result<MultiplexedConnection, RedisTierError> {
        // Gives the flag back and wakes the waiters however this ends,
        // cancellation by the timeout included.
        let _connecting = Connecting(self);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.config.timeout))
            // Each call's own bound (get or put) applies on top.
            .set_response_timeout(Some(self.config.put_timeout()));
        match self.client.get_multiplexed_async_connection_with_config(&config).await {
            Ok(conn) => {
                self.conn.store(Some(Arc::new(conn.clone())));
                debug!(url = %self.config.url, "redis connected");
                Ok(conn)
            }
            Err(source) => {
                // Before the waiters wake, so that they see the back-off.
                self.back_off();
                Err(RedisTierError::Redis { op: "connect", source })
            }
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The configuration in force.
    pub fn config(&self) -> &RedisConfig {
        &self.config
    }

    /// Puts that Redis acknowledged.
    pub fn puts(&self) -> u64 {
        self.puts.load(Ordering::Relaxed)
    }

    /// Puts that failed or timed out (also counted in the status's errors).
    pub fn put_errors(&self) -> u64 {
        self.put_errors.load(Ordering::Relaxed)
    }

    /// This tier's row in a status report, named `redis`; sizes are 0 (unknown).
    pub fn status(&self) -> CacheTierStatus {
        self.counters.status("redis", 0, 0)
    }
}

/// The connecting call's hold on [`RedisTier::connecting`].
struct Connecting<'a>(&'a RedisTier);

impl Drop for Connecting<'_> {
    fn drop(&mut self) {
        // Release pairs with the Acquire of the next connector.
        self.0.connecting.store(false, Ordering::Release);
        self.0.connect_done.notify_waiters();
    }
}

/// The Redis key of a cache key.
pub fn redis_key(key: &CacheKey) -> String {
    format!("{KEY_PREFIX}{}", key_hex(key))
}

/// Whether the connection is unusable after `e` (as opposed to Redis
/// refusing one command, say for lack of memory).
fn is_link_failure(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::cache::entry::tests::{key, sample};
    use crate::cache::test_redis::RedisServer;

    /// Far beyond any configured timeout: a call that takes this long stalled.
    const STALL: Duration = Duration::from_secs(5);

    async fn within_bound<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(STALL, f).await.unwrap_or_else(|_| panic!("{what} stalled past {STALL:?}"))
    }

    async fn raw(server: &RedisServer) -> MultiplexedConnection {
        Client::open(server.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
    }

    #[tokio::test]
    async fn a_put_is_read_back_under_the_prefixed_key_with_its_ttl() {
        let server = RedisServer::start();
        let tier = RedisTier::new(RedisConfig::new(server.url()).with_ttl(Duration::from_secs(60))).unwrap();
        let r = sample(1, 4000);
        tier.put(&key(1), &r).await.unwrap();
        assert_eq!(tier.get(&key(1)).await, Some(r.clone()));

        let mut conn = raw(&server).await;
        let name = format!("ccroute:v1:{}", key_hex(&key(1)));
        assert_eq!(redis_key(&key(1)), name);
        let stored: Vec<u8> = redis::cmd("GET").arg(&name).query_async(&mut conn).await.unwrap();
        assert_eq!(stored, r.encode(&key(1)));
        let pttl: i64 = redis::cmd("PTTL").arg(&name).query_async(&mut conn).await.unwrap();
        assert!((1..=60_000).contains(&pttl), "ttl {pttl} ms");

        let s = tier.status();
        assert_eq!((s.name.as_str(), s.hits, s.misses, s.errors), ("redis", 1, 0, 0));
        assert_eq!(tier.puts(), 1);
    }

    #[tokio::test]
    async fn an_absent_key_is_a_miss_and_a_corrupt_value_an_error() {
        let server = RedisServer::start();
        let tier = RedisTier::new(RedisConfig::new(server.url())).unwrap();
        assert_eq!(tier.get(&key(1)).await, None);
        assert_eq!((tier.status().misses, tier.status().errors), (1, 0));

        let mut conn = raw(&server).await;
        let mut bad = sample(2, 100).encode(&key(2)).to_vec();
        bad[80] ^= 1;
        let () = redis::cmd("SET").arg(redis_key(&key(2))).arg(bad).query_async(&mut conn).await.unwrap();
        assert_eq!(tier.get(&key(2)).await, None);
        assert_eq!((tier.status().misses, tier.status().errors), (2, 1));
        // A later put repairs it.
        tier.put(&key(2), &sample(2, 100)).await.unwrap();
        assert_eq!(tier.get(&key(2)).await, Some(sample(2, 100)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_first_calls_share_one_connection() {
        let server = RedisServer::start();
        let writer = RedisTier::new(RedisConfig::new(server.url())).unwrap();
        writer.put(&key(1), &sample(1, 1000)).await.unwrap();

        let tier =
            Arc::new(RedisTier::new(RedisConfig::new(server.url()).with_timeout(Duration::from_secs(2))).unwrap());
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let tier = Arc::clone(&tier);
            calls.spawn(async move { tier.get(&key(1)).await });
        }
        while let Some(got) = calls.join_next().await {
            assert_eq!(got.unwrap(), Some(sample(1, 1000)));
        }
        let clients: String = redis::cmd("CLIENT").arg("LIST").query_async(&mut raw(&server).await).await.unwrap();
        // The writer, the reader and the connection asking.
        assert_eq!(clients.lines().count(), 3, "{clients}");
        assert_eq!(tier.status().hits, 50);
    }

    #[tokio::test]
    async fn a_killed_redis_costs_only_counted_misses_and_is_recovered() {
        let mut server = RedisServer::start();
        let config = RedisConfig::new(server.url()).with_backoff(Duration::from_millis(50));
        let tier = RedisTier::new(config).unwrap();
        tier.put(&key(1), &sample(1, 100)).await.unwrap();
        assert!(tier.get(&key(1)).await.is_some());

        server.kill();
        for _ in 0..5 {
            assert_eq!(within_bound("get from a dead redis", tier.get(&key(1))).await, None);
        }
        assert!(within_bound("put to a dead redis", tier.put(&key(2), &sample(2, 10))).await.is_err());
        let errors = tier.status().errors;
        assert!(errors >= 6, "every failed call is counted, got {errors}");

        // Back on the same port, empty: the tier reconnects by itself.
        let _server = RedisServer::start_on(server.port());
        let deadline = Instant::now() + STALL;
        while tier.put(&key(3), &sample(3, 10)).await.is_err() {
            assert!(Instant::now() < deadline, "the tier did not reconnect");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(tier.get(&key(3)).await, Some(sample(3, 10)));
    }

    #[tokio::test]
    async fn a_redis_that_never_answers_costs_one_timeout_then_is_left_alone() {
        // Accepts connections and never answers: the worst kind of dead.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&accepted);
        let black_hole = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((sock, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                held.push(sock);
            }
        });
        let config = RedisConfig::new(format!("redis://127.0.0.1:{port}/"))
            .with_timeout(Duration::from_millis(200))
            .with_backoff(Duration::from_secs(600));
        let tier = RedisTier::new(config).unwrap();

        assert_eq!(within_bound("get from a silent redis", tier.get(&key(1))).await, None);
        for n in 0..20 {
            assert_eq!(within_bound("get while backing off", tier.get(&key(n))).await, None);
        }
        let err = within_bound("put while backing off", tier.put(&key(1), &sample(1, 10))).await.unwrap_err();
        assert!(matches!(err, RedisTierError::BackingOff { .. }), "{err}");
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "no new connection while backing off");
        let s = tier.status();
        assert_eq!((s.hits, s.misses, s.errors), (0, 21, 22));
        black_hole.abort();
    }

    #[tokio::test]
    async fn nothing_listening_is_a_prompt_counted_miss() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let tier = RedisTier::new(RedisConfig::new(format!("redis://127.0.0.1:{port}/"))).unwrap();
        assert_eq!(within_bound("get from a closed port", tier.get(&key(1))).await, None);
        assert_eq!((tier.status().misses, tier.status().errors), (1, 1));
    }

    #[test]
    fn a_bad_url_is_refused_with_the_url() {
        let err = RedisTier::new(RedisConfig::new("http://example")).unwrap_err();
        assert!(err.to_string().starts_with("invalid redis url \"http://example\""), "{err}");
    }

    /// An entry too large to read back within a lookup's timeout is not
    /// written (each lookup of it would time out and shut Redis off for the
    /// back-off); nothing counts against Redis, and the next entry is stored.
    #[tokio::test]
    async fn an_entry_past_the_bound_is_not_written_and_redis_stays_on() {
        let server = RedisServer::start();
        let tier = RedisTier::new(RedisConfig::new(server.url()).with_max_entry(16 << 10)).unwrap();
        let big = sample(1, 64 << 10);
        assert!(matches!(tier.put(&key(1), &big).await, Err(RedisTierError::TooLarge { .. })));
        assert_eq!(tier.get(&key(1)).await, None);
        let small = sample(2, 4000);
        tier.put(&key(2), &small).await.unwrap();
        assert_eq!(tier.get(&key(2)).await, Some(small));
        assert_eq!(tier.status().errors, 0);
    }
}
