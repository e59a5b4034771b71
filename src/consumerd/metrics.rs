//! The consumerd's Prometheus metrics (`ccroute consumerd --metrics ADDR`):
//! where its compiles ran, what it holds now, what its caches answered and
//! what it sent — read from [`Stats`] at scrape time.

use std::sync::Arc;

use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;
use tokio::sync::watch;

use super::Stats;
use crate::net::exposition::{build_info, Family, Source};

/// The consumerd's `/metrics`: `stats`, the remote window the scheduler
/// gives it (`window`), and its local slots.
pub fn source(stats: Arc<Stats>, window: watch::Receiver<u32>, local_slots: u32) -> Source {
    Arc::new(move || {
        let s = stats.snapshot();
        let (counter, gauge) = (MetricType::Counter, MetricType::Gauge);
        let mut text = Family::new(
            "ccroute_consumerd_text_units",
            "Units sent remote as preprocessed text instead of their inputs, by why",
            counter,
        );
        for (why, n) in stats.text_reasons() {
            text = text.row(vec![("reason", why.into())], n as f64);
        }
        vec![
            build_info("consumerd"),
            Family::new("ccroute_consumerd_compiles", "Compiles this consumerd ended, by where they ran", counter)
                .row(vec![("ran", "local".into())], s.local as f64)
                .row(vec![("ran", "remote".into())], s.remote as f64)
                .row(vec![("ran", "local_after_remote".into())], s.fallbacks as f64)
                .row(vec![("ran", "direct_cache".into())], s.direct_hits as f64),
            Family::new(
                "ccroute_consumerd_scheduler_cache_hits",
                "Remote compiles the scheduler's result cache answered",
                counter,
            )
            .row(vec![], s.preprocessed_hits as f64),
            Family::new(
                "ccroute_consumerd_remote_units",
                "Remote compiles answered, by how the unit travelled",
                counter,
            )
            .row(vec![("form", "inputs".into())], s.remote_inputs as f64)
            .row(vec![("form", "text".into())], s.remote_text as f64),
            text,
            Family::new("ccroute_consumerd_task_sent", "Bytes of task frames sent, by form", counter)
                .unit(Unit::Bytes)
                .row(vec![("form", "inputs".into())], s.inputs_task_bytes as f64)
                .row(vec![("form", "text".into())], s.text_task_bytes as f64),
            Family::new("ccroute_consumerd_inputs_fetched", "Bytes of inputs agents fetched (as sent)", counter)
                .unit(Unit::Bytes)
                .row(vec![], s.inputs_blob_bytes as f64),
            Family::new("ccroute_consumerd_jobs_in_flight", "Wrapper connections with a job now", gauge)
                .row(vec![], s.in_flight as f64),
            Family::new("ccroute_consumerd_jobs_waiting", "Jobs waiting for a slot now", gauge)
                .row(vec![], s.waiting as f64),
            Family::new("ccroute_consumerd_slots_in_use", "Slots held now, local and remote", gauge)
                .row(vec![("kind", "local".into())], s.local_running as f64)
                .row(vec![("kind", "remote".into())], s.remote_running as f64),
            Family::new(
                "ccroute_consumerd_slots",
                "Slots: local (--local-jobs), remote (the scheduler's share)",
                gauge,
            )
            .row(vec![("kind", "local".into())], f64::from(local_slots))
            .row(vec![("kind", "remote".into())], f64::from(*window.borrow())),
        ]
    })
}
